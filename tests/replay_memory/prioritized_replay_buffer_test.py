"""Tests for dopamine_per.replay_memory.prioritized_replay_buffer."""

import os
import random

from absl.testing import absltest
from absl.testing import parameterized
from dopamine.tf.replay_memory import prioritized_replay_buffer as dopamine_prb
import numpy as np

from dopamine_per import errors
from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.replay_memory import prioritized_replay_buffer as prb
from tests.support import fixtures
from tests.support import replay_cases
from tests.support import stats_util

Buffer = prb.OutOfGraphPrioritizedReplayBuffer
snapshot = replay_cases.snapshot
assert_same_snapshot = replay_cases.assert_same_snapshot


def _buffer(**kwargs):
  config = dict(observation_shape=(2,), stack_size=2, replay_capacity=16,
                batch_size=4, update_horizon=1)
  config.update(kwargs)
  return Buffer(**config)


def _add(buffer, count, seed=0, priorities=None):
  rs = np.random.RandomState(seed)
  for i in range(count):
    args = [rs.randint(0, 255, size=2).astype(np.uint8), i % 3, float(i),
            rs.rand() < 0.15]
    args.append(None if priorities is None else priorities[i])
    buffer.add(*args)


class AddTest(absltest.TestCase):

  def test_signature_and_forwarded_arguments(self):
    rng = np.random.default_rng(0)
    buffer = _buffer(rng=rng)
    self.assertEqual(buffer.get_add_args_signature()[-1],
                     prb.ReplayElement('priority', (), np.float32))
    self.assertNotIn('priority', buffer._store)
    self.assertIs(buffer._rng, rng)
    self.assertIs(buffer.sum_tree._rng, rng)
    self.assertEqual(buffer.sum_tree.capacity, 16)

  def test_priority_positional_keyword_and_default(self):
    buffer = _buffer(stack_size=3)
    obs = np.zeros(2, np.uint8)
    buffer.add(obs, 0, 0.0, False, None)
    buffer.add(obs, 0, 0.0, False, 2.5)
    buffer.add(obs, 0, 0.0, False, priority=4.0)
    buffer.add(obs, 0, 0.0, False, priority=None)
    buffer.add(obs, 0, 0.0, False, priority=np.float64(0.5))
    # Padding at 0 and 1 gets priority 0; None the max so far (1 at first).
    np.testing.assert_array_equal(buffer.get_priority(np.arange(7)),
                                  [0, 0, 1, 2.5, 4, 4, 0.5])
    self.assertEqual(buffer.get_priority(np.arange(7)).dtype, np.float32)
    buffer.sum_tree.check_invariants()

  def test_omitted_or_repeated_priority_raises_as_dopamine(self):
    buffer = _buffer()
    with self.assertRaisesRegex(ValueError, 'Add expects 5 elements'):
      buffer.add(np.zeros(2, np.uint8), 0, 0.0, False)
    with self.assertRaisesRegex(ValueError, 'Add expects 5 elements'):
      buffer.add(np.zeros(2, np.uint8), 0, 0.0, False, 1.0, priority=1.0)
    self.assertTrue(buffer.is_empty())

  def test_extra_storage_then_priority(self):
    extra = prb.ReplayElement('extra', (), np.int32)
    buffer = _buffer(stack_size=1, extra_storage_types=[extra])
    buffer.add(np.zeros(2, np.uint8), 0, 0.0, False, 7, 3.0)
    buffer.add(np.zeros(2, np.uint8), 0, 0.0, False, 8, priority=None)
    buffer.add(np.zeros(2, np.uint8), 0, 0.0, False, 9, priority=0.5)
    buffer.add(np.zeros(2, np.uint8), 0, 0.0, False, 10, None)
    np.testing.assert_array_equal(buffer._store['extra'][:4], [7, 8, 9, 10])
    np.testing.assert_array_equal(buffer.get_priority(np.arange(4)),
                                  [3, 3, 0.5, 3])
    with self.assertRaisesRegex(ValueError, 'Add expects 6 elements'):
      buffer.add(np.zeros(2, np.uint8), 0, 0.0, False, priority=0.5)

  def test_bad_priorities_write_nothing(self):
    for bad in (float('nan'), float('inf'), -1.0, 'high', [1.0, 2.0]):
      buffer = _buffer(stack_size=3)
      with self.assertRaisesRegex(ValueError, 'priority'):
        buffer.add(np.zeros(2, np.uint8), 0, 0.0, False, priority=bad)
      self.assertTrue(buffer.is_empty())
      self.assertTrue(buffer.storage.episode_start)
      self.assertEqual(buffer.sum_tree.total_priority(), 0.0)


class InputValuesTest(parameterized.TestCase):
  """Issue 12: values the storage or the tree cannot hold are refused first.

  Both sum tree kernels run: their priority checks differ.
  """

  def _buffer(self, kernels, **kwargs):
    buffer = _buffer(kernels=kernels, **kwargs)
    self.assertEqual(buffer.sum_tree._kernels.name, kernels)
    return buffer

  def assert_refused(self, buffer, regex, function, *args):
    before = snapshot(buffer)
    with self.assertRaisesRegex(ValueError, regex):
      function(*args)
    assert_same_snapshot(self, before, snapshot(buffer))
    buffer.sum_tree.check_invariants()

  @parameterized.parameters('numpy', 'native')
  def test_rejected_add_writes_nothing(self, kernels):
    # Was an OverflowError, after the padding, the observation and the
    # priority were written.
    buffer = self._buffer(kernels, stack_size=4)
    obs = np.ones(2, np.uint8)
    self.assert_refused(buffer, r"'reward'.*10\*\*400.*overflows float32",
                        buffer.add, obs, 3, 10**400, False, 2.5)
    self.assertTrue(buffer.is_empty())
    self.assertEqual(buffer.sum_tree.total_priority(), 0.0)
    buffer.add(obs, 3, 1.0, False, 2.5)
    self.assertEqual(int(buffer.add_count), 4)

  @parameterized.product(kernels=['numpy', 'native'],
                         priority=[1e308, 3.5e38, 5e-324, 1e-46, 10**400])
  def test_priority_outside_float32(self, kernels, priority):
    # 1e308 read back as inf, 5e-324 as 0; 10**400 raised OverflowError.
    buffer = self._buffer(kernels, replay_capacity=32)
    _add(buffer, 10)
    regex = r'priorit.*0 or in \[1.4\d*e-45, 3.40282\d*e\+38\]'
    self.assert_refused(buffer, regex, buffer.add, np.ones(2, np.uint8), 0,
                        0.0, False, priority)
    for priorities in (priority, [priority, 1.0], np.array([priority, 1.0])
                       if priority != 10**400 else [priority, 1.0]):
      self.assert_refused(buffer, regex, buffer.set_priority,
                          np.array([3, 4]), priorities)

  @parameterized.parameters('numpy', 'native')
  def test_float32_range_edges_read_back(self, kernels):
    buffer = self._buffer(kernels)
    _add(buffer, 10)
    info = np.finfo(np.float32)
    edges = np.array([info.smallest_subnormal, info.max], np.float32)
    buffer.set_priority(np.array([3, 4]), edges.astype(np.float64))
    np.testing.assert_array_equal(buffer.get_priority(np.array([3, 4])),
                                  edges)
    cursor = buffer.cursor()
    buffer.add(np.ones(2, np.uint8), 0, 0.0, False, float(edges[0]))
    self.assertEqual(buffer.get_priority(np.array([cursor]))[0], edges[0])

  @parameterized.product(
      kernels=['numpy', 'native'],
      priority=['1e3', b'3', 1 + 0j, np.complex128(2.0), True,
                np.bool_(True)])
  def test_priorities_that_are_not_real_numbers(self, kernels, priority):
    # Strings and bytes were parsed, complex numbers lost their imaginary
    # part, bools counted as 1.
    buffer = self._buffer(kernels)
    _add(buffer, 10)
    regex = 'priorit.*should be real numbers'
    self.assert_refused(buffer, regex, buffer.add, np.ones(2, np.uint8), 0,
                        0.0, False, priority)
    for priorities in (priority, [priority], np.array([priority])):
      self.assert_refused(buffer, regex, buffer.set_priority, np.array([3]),
                          priorities)


class TableCasesTest(parameterized.TestCase):

  @parameterized.named_parameters((c.name, c) for c in replay_cases.CASES)
  def test_case(self, case):
    buffer = replay_cases.make_buffer(Buffer, case)
    priorities = [0.25 * (i + 1) for i in range(len(case.steps))]
    replay_cases.apply_steps(buffer, case.steps, priorities)
    indices = sorted(case.valid)
    batch = buffer.sample_transition_batch(indices=indices)
    for row, index in enumerate(indices):
      replay_cases.assert_transition(self, buffer, batch, row,
                                     case.transitions[index])
    np.testing.assert_array_equal(batch[-1], buffer.get_priority(indices))
    # Padding (observation id 0 with zero action) has priority 0.
    capacity = case.config['replay_capacity']
    written = min(int(buffer.add_count), capacity)
    padding = [i for i in range(written)
               if buffer._store['observation'][i] == 0]
    np.testing.assert_array_equal(buffer.get_priority(padding), 0.0)


class PriorityTest(parameterized.TestCase):

  def test_set_and_get_any_integer_dtype(self):
    buffer = _buffer()
    _add(buffer, 10)
    for dtype in (np.int8, np.uint16, np.int32, np.int64, np.uint64):
      buffer.set_priority(np.array([2, 3], dtype), np.array([5.0, 6.0]))
      np.testing.assert_array_equal(
          buffer.get_priority(np.array([2, 3], dtype)), [5.0, 6.0])
    buffer.set_priority([4, 4, 5], [1.0, 2.0, 3.0])  # Last wins.
    np.testing.assert_array_equal(buffer.get_priority([4, 5]), [2.0, 3.0])
    buffer.set_priority([6, 7], 0.75)  # A scalar broadcasts.
    np.testing.assert_array_equal(buffer.get_priority([6, 7]), [0.75, 0.75])
    self.assertEqual(buffer.sum_tree.max_recorded_priority, 6.0)
    buffer.sum_tree.check_invariants()

  @parameterized.named_parameters(
      ('nan', [1, 2], [1.0, float('nan')], ValueError,
       'priorities should be.*nan'),
      ('inf', [1, 2], [float('inf'), 1.0], ValueError, 'inf'),
      ('negative', [1, 2], [1.0, -0.5], ValueError, '-0.5'),
      ('length', [1, 2, 3], [1.0, 2.0], ValueError,
       r'priorities of shape \(2,\) do not match indices of shape \(3,\)'),
      ('out_of_range', [1, 16], [1.0, 2.0], IndexError,
       r'indices must be in \[0, 16\). Got: 16'),
      ('negative_index', [-1], [1.0], IndexError, '-1'),
      ('float_index', [1.0], [1.0], TypeError, 'integers'),
  )
  def test_set_priority_rejects_before_writing(self, indices, priorities,
                                               error, message):
    buffer = _buffer()
    _add(buffer, 10)
    before = buffer.get_priority(np.arange(16))
    with self.assertRaisesRegex(error, message):
      buffer.set_priority(indices, priorities)
    with self.assertRaises(ValueError):  # All are ValueErrors too.
      buffer.set_priority(indices, priorities)
    np.testing.assert_array_equal(buffer.get_priority(np.arange(16)), before)

  def test_get_priority_rejects_bad_indices(self):
    buffer = _buffer()
    with self.assertRaisesRegex(AssertionError, 'must be an array'):
      buffer.get_priority(3)  # As Dopamine; also a ValueError.
    with self.assertRaises(ValueError):
      buffer.set_priority(3, 1.0)
    with self.assertRaisesRegex(errors.InvalidIndexError, '16'):
      buffer.get_priority(np.array([16]))
    with self.assertRaises(ValueError):
      buffer.get_priority(np.array([0.5]))

  def test_sampling_probabilities_shape(self):
    buffer = _buffer()
    _add(buffer, 12)
    element = buffer.get_transition_elements()[-1]
    self.assertEqual(element, prb.ReplayElement('sampling_probabilities',
                                                (4,), np.float32))
    self.assertEqual(buffer.get_transition_elements(7)[-1].shape, (7,))
    batch = buffer.sample_transition_batch()
    self.assertEqual(batch[-1].shape, (4,))
    self.assertEqual(batch[-1].dtype, np.float32)
    np.testing.assert_array_equal(batch[-1], buffer.get_priority(batch[7]))


class SamplingTest(parameterized.TestCase):

  def _weights(self, buffer):
    capacity = buffer._replay_capacity
    weights = buffer.get_priority(np.arange(capacity)).astype(np.float64)
    weights[~buffer.is_valid_transition(np.arange(capacity))] = 0.0
    return weights

  @parameterized.named_parameters(('generator', 2024), ('python_random', None))
  def test_frequencies_follow_priorities(self, seed):
    # 40000 draws, chi-square at false-failure rate 1e-6 (stats_util). The
    # invalid slots' mass is redrawn, so the target is the priorities of
    # the valid slots, renormalized. Stratification only lowers the
    # variance of the counts, so the bound stays conservative.
    random.seed(5)
    buffer = _buffer(replay_capacity=48, stack_size=1,
                     rng=None if seed is None else np.random.default_rng(seed))
    rs = np.random.RandomState(1)
    _add(buffer, 60, priorities=rs.randint(0, 6, size=60) * 0.5)
    samples = np.concatenate([buffer.sample_index_batch(32)
                              for _ in range(1250)])
    stats_util.assert_matches_distribution(self, samples,
                                           self._weights(buffer))

  def test_python_random_seed_reproduces(self):
    buffer = _buffer()
    _add(buffer, 30, priorities=np.arange(30) % 4 + 0.5)
    random.seed(3)
    first = buffer.sample_transition_batch()
    random.seed(3)
    second = buffer.sample_transition_batch()
    for a, b in zip(first, second):
      np.testing.assert_array_equal(a, b)

  def test_never_returns_invalid_indices(self):
    # Put almost all the mass on the slots next to the cursor.
    buffer = _buffer(stack_size=4, update_horizon=3, replay_capacity=20,
                     rng=0)
    _add(buffer, 50, priorities=[1.0] * 50)
    # 7 invalid slots with 20 each against 13 valid ones with 1: a draw is
    # valid with probability ~0.085.
    buffer.set_priority(buffer.invalid_range.astype(np.int64), 20.0)
    for _ in range(200):
      indices = buffer.sample_index_batch(8)
      self.assertTrue(np.all(buffer.is_valid_transition(indices)))

  def test_max_sample_attempts(self):
    buffer = _buffer(max_sample_attempts=40, rng=0)
    _add(buffer, 30)
    valid = buffer.is_valid_transition(np.arange(16))
    buffer.set_priority(np.flatnonzero(valid), 0.0)
    with self.assertRaisesRegex(RuntimeError,
                                'Max sample attempts: Tried 40 times'):
      buffer.sample_index_batch(4)


class DopamineCompatibilityTest(absltest.TestCase):
  """Checkpoints in both directions with Dopamine's prioritized buffer."""

  CONFIG = dict(observation_shape=(2,), stack_size=2, replay_capacity=20,
                batch_size=4, update_horizon=2)

  def _fill(self, buffer, seed):
    rs = np.random.RandomState(seed)
    for i in range(35):
      buffer.add(rs.randint(0, 255, size=2).astype(np.uint8), i % 3,
                 float(i), rs.rand() < 0.15, float(rs.randint(1, 8)) / 4,
                 episode_end=rs.rand() < 0.05)
    buffer.add(np.ones(2, np.uint8), 1, 1.0, True, 0.75)

  def _assert_same(self, ours, theirs):
    indices = np.arange(20, dtype=np.int32)
    np.testing.assert_array_equal(ours.get_priority(indices),
                                  theirs.get_priority(indices))
    self.assertEqual(ours.sum_tree.total_priority(),
                     theirs.sum_tree._total_priority())
    self.assertEqual(float(ours.sum_tree.max_recorded_priority),
                     float(theirs.sum_tree.max_recorded_priority))
    replay_cases.assert_same_as_dopamine(self, ours, theirs)
    # Same stratified draws from the same Python random state.
    random.seed(17)
    theirs_draws = theirs.sum_tree.stratified_sample(32)
    random.seed(17)
    ours_draws = ours.sum_tree.stratified_sample(32)
    np.testing.assert_array_equal(ours_draws, theirs_draws)

  def test_ours_to_dopamine(self):
    directory = fixtures.temp_dir(self)
    ours = Buffer(**self.CONFIG)
    self._fill(ours, 1)
    ours.save(directory, 3)
    theirs = dopamine_prb.OutOfGraphPrioritizedReplayBuffer(**self.CONFIG)
    theirs.load(directory, 3)
    self.assertEqual(type(theirs.sum_tree).__module__,
                     'dopamine.tf.replay_memory.sum_tree')
    self._assert_same(ours, theirs)
    # Dopamine keeps working on the tree it loaded.
    theirs.set_priority(np.array([3, 5], np.int32), np.array([2.0, 0.25]))
    ours.set_priority(np.array([3, 5]), np.array([2.0, 0.25]))
    for buffer in (ours, theirs):
      buffer.add(np.full(2, 9, np.uint8), 2, 0.5, False, 1.25)
    self._assert_same(ours, theirs)

  def test_dopamine_to_ours(self):
    directory = fixtures.temp_dir(self)
    theirs = dopamine_prb.OutOfGraphPrioritizedReplayBuffer(**self.CONFIG)
    self._fill(theirs, 2)
    theirs.set_priority(np.array([4, 6], np.int32), np.array([3.5, 0.0]))
    theirs.save(directory, 5)
    ours = Buffer(**self.CONFIG)
    _add(ours, 4, priorities=[9.0] * 4)
    ours.load(directory, 5)
    self._assert_same(ours, theirs)
    ours.sum_tree.check_invariants()
    for buffer in (ours, theirs):
      buffer.add(np.full(2, 9, np.uint8), 2, 0.5, False, 1.25)
    self._assert_same(ours, theirs)


class ResidentBytesTest(absltest.TestCase):

  def test_nbytes_follows_the_memory_a_filling_memory_takes(self):
    rss_before = fixtures.resident_bytes()
    # 85 MB of frames allocated; 2,000 adds back about 17 MB of them.
    memory = prb.OutOfGraphPrioritizedReplayBuffer(
        (84, 84), 4, 12000, batch_size=32)
    frame = np.ones((84, 84), np.uint8)
    for t in range(2000):
      memory.add(frame, 0, 0.0, t % 100 == 99, priority=None)
    grown = fixtures.resident_bytes() - rss_before
    allocated = memory.storage.nbytes + memory.sum_tree.nbytes
    self.assertLess(memory.nbytes, allocated / 4)
    self.assertAlmostEqual(memory.nbytes, grown, delta=4 << 20)
    idle = memory.nbytes
    batch = memory.sample_transition_batch()  # The pool keeps its buffer.
    self.assertGreater(memory.nbytes, idle + 2 * batch[0].nbytes)

  def test_nbytes_counts_what_a_pending_save_keeps(self):
    for compress in (False, True):
      with self.subTest(compress=compress):
        memory = prb.OutOfGraphPrioritizedReplayBuffer(
            (84, 84), 4, 400, batch_size=32, compress_observations=compress)
        rng = np.random.default_rng(0)
        frames = rng.integers(0, 4, (50, 84, 84), dtype=np.uint8)
        for t in range(500):
          memory.add(frames[t % 50], 0, 0.0, False, priority=None)
        idle = memory.nbytes
        with memory._lock:  # pylint: disable=protected-access
          saving = memory.save(fixtures.temp_dir(self), 0, background=True)
          for t in range(200):  # Half the memory replaced.
            memory.add(frames[t % 50], 0, 0.0, False, priority=None)
          during = memory.nbytes
        saving.result(timeout=fixtures.DEADLINE_S)
        # Uncompressed: the 200 frames kept for the save (7 KB each);
        # compressed: the blocks they replaced (a quarter of the frames'
        # bytes or so). Back to where it was once the save is written.
        self.assertGreater(during - idle,
                           (200 * 84 * 84) if not compress else idle / 8)
        self.assertLess(abs(memory.nbytes - idle), idle / 20)


class CheckpointTest(parameterized.TestCase):

  def test_round_trip_restores_priorities_and_rng(self):
    directory = fixtures.temp_dir(self)
    buffer = _buffer(rng=np.random.default_rng(8))
    _add(buffer, 30, priorities=np.arange(30) % 5 * 0.5)
    buffer.save(directory, 1)
    expected = [buffer.sample_transition_batch() for _ in range(3)]
    restored = _buffer(rng=np.random.default_rng(99))
    # Batch layouts and pooled batch arrays made before the load: the
    # batches after it still read the loaded arrays and priorities.
    _add(restored, 20, seed=5)
    restored.sample_transition_batch()
    restored.load(directory, 1)
    self.assertIs(restored.sum_tree._rng, restored._rng)
    for batch in expected:
      for a, b in zip(batch, restored.sample_transition_batch()):
        np.testing.assert_array_equal(a, b)

  @parameterized.named_parameters(('other_capacity', 32, None),
                                  ('negative_priority', 16, -1.0))
  def test_bad_sum_tree_changes_nothing(self, capacity, priority_of_3):
    directory = fixtures.temp_dir(self)
    source = _buffer()
    _add(source, 20)
    source.save(directory, 2)
    other = _buffer(replay_capacity=capacity)
    _add(other, 20)
    state = other.sum_tree.get_state()
    if priority_of_3 is not None:
      state['nodes'][-1][3] = priority_of_3
    gzip_files.save_dopamine_sum_tree_gz(
        os.path.join(directory, 'sum_tree_ckpt.2.gz'), state)
    # As a Dopamine checkpoint (no recorded checksums), so that the tree's
    # own check is what refuses it.
    os.remove(os.path.join(directory, 'dopamine_per_state_ckpt.2.gz'))
    buffer = _buffer()
    _add(buffer, 5, seed=4, priorities=[2.0] * 5)
    before = snapshot(buffer)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                'sum_tree_ckpt.2.gz.*leaves'):
      buffer.load(directory, 2)
    assert_same_snapshot(self, before, snapshot(buffer))

  def test_missing_sum_tree(self):
    directory = fixtures.temp_dir(self)
    source = _buffer()
    _add(source, 20)
    source.save(directory, 2)
    os.remove(os.path.join(directory, 'sum_tree_ckpt.2.gz'))
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with self.assertRaisesRegex(tf.errors.NotFoundError, 'sum_tree'):
      _buffer().load(directory, 2)


if __name__ == '__main__':
  absltest.main()
