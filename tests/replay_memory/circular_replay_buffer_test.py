"""Tests for dopamine_per.replay_memory.circular_replay_buffer."""

import collections
import errno
import gzip
import io
import json
import os
import pickle
import random
import re
import shutil
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
from dopamine.tf.replay_memory import circular_replay_buffer as dopamine_crb
import numpy as np
import tensorflow as tf

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import safe_pickle
from dopamine_per.file_io import transaction
from dopamine_per.replay_memory import circular_replay_buffer as crb
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from tests.support import fixtures
from tests.support import replay_cases
from tests.support import stats_util

ReplayElement = crb.ReplayElement
snapshot = replay_cases.snapshot
assert_same_snapshot = replay_cases.assert_same_snapshot


def _npy_gz(array):
  raw = io.BytesIO()
  np.save(raw, array)
  return gzip.compress(raw.getvalue())


class ModuleFunctionsTest(absltest.TestCase):

  def test_invalid_range_matches_dopamine(self):
    for cursor, capacity, stack, horizon in [(0, 10, 4, 1), (5, 10, 1, 3),
                                             (9, 10, 3, 3), (2, 7, 2, 5)]:
      np.testing.assert_array_equal(
          crb.invalid_range(cursor, capacity, stack, horizon),
          dopamine_crb.invalid_range(cursor, capacity, stack, horizon))

  def test_modulo_range_matches_dopamine(self):
    np.testing.assert_array_equal(
        crb.modulo_range(8, 5, 10), list(dopamine_crb.modulo_range(8, 5, 10)))

  def test_constants(self):
    self.assertEqual(crb.STORE_FILENAME_PREFIX, '$store$_')


class TableCasesTest(parameterized.TestCase):
  """The hand-computed trajectories of replay_cases."""

  @parameterized.named_parameters((c.name, c) for c in replay_cases.CASES)
  def test_case(self, case):
    buffer = replay_cases.make_buffer(crb.OutOfGraphReplayBuffer, case)
    replay_cases.apply_steps(buffer, case.steps)
    capacity = case.config['replay_capacity']
    np.testing.assert_array_equal(
        np.flatnonzero(buffer.is_valid_transition(np.arange(capacity))),
        sorted(case.valid))
    for index in range(capacity):
      self.assertEqual(buffer.is_valid_transition(index),
                       index in case.valid)
    indices = sorted(case.transitions)
    self.assertEqual(indices, sorted(case.valid))
    batch = buffer.sample_transition_batch(indices=indices)
    for row, index in enumerate(indices):
      replay_cases.assert_transition(self, buffer, batch, row,
                                     case.transitions[index])
    names = [e.name for e in buffer.get_transition_elements(len(indices))]
    np.testing.assert_array_equal(batch[names.index('indices')], indices)

  @parameterized.named_parameters(
      (c.name, c) for c in replay_cases.CASES if c.dopamine_valid is not None)
  def test_case_matches_dopamine(self, case):
    ours = replay_cases.make_buffer(crb.OutOfGraphReplayBuffer, case)
    theirs = replay_cases.make_buffer(dopamine_crb.OutOfGraphReplayBuffer,
                                      case)
    replay_cases.apply_steps(ours, case.steps)
    replay_cases.apply_steps(theirs, case.steps)
    capacity = case.config['replay_capacity']
    self.assertEqual(
        [i for i in range(capacity) if theirs.is_valid_transition(i)],
        sorted(case.dopamine_valid))
    common = sorted(set(case.valid) & set(case.dopamine_valid))
    ours_batch = ours.sample_transition_batch(indices=common)
    theirs_batch = theirs.sample_transition_batch(len(common), indices=common)
    for element, a, b in zip(ours.get_transition_elements(len(common)),
                             ours_batch, theirs_batch):
      self.assertEqual(a.dtype, b.dtype, element.name)
      np.testing.assert_array_equal(a, b, err_msg=element.name)


def _buffer(**kwargs):
  config = dict(observation_shape=(2,), stack_size=2, replay_capacity=10,
                batch_size=2)
  config.update(kwargs)
  return crb.OutOfGraphReplayBuffer(**config)


class AddTest(absltest.TestCase):

  def test_counters(self):
    buffer = _buffer(stack_size=1, replay_capacity=3)
    self.assertTrue(buffer.is_empty())
    self.assertFalse(buffer.is_full())
    self.assertIsInstance(buffer.add_count, np.ndarray)
    self.assertEqual(buffer.add_count.shape, ())
    np.testing.assert_array_equal(buffer.invalid_range, np.zeros(1))
    for _ in range(4):
      buffer.add(np.ones(2, np.uint8), 1, 1.0, False)
    self.assertTrue(buffer.is_full())
    self.assertFalse(buffer.is_empty())
    self.assertEqual(buffer.cursor(), 1)
    np.testing.assert_array_equal(buffer.invalid_range,
                                  crb.invalid_range(1, 3, 1, 1))

  def test_accepted_conversions(self):
    buffer = _buffer(observation_dtype=np.float32, stack_size=1)
    buffer.add([1, 2], np.int64(3), 1, np.bool_(False))
    buffer.add(np.array([1.5, 2.5]), np.uint8(4), np.float64(0.5), 0)
    buffer.add((3, 4), 5, True, 1)
    np.testing.assert_array_equal(buffer._store['observation'][:3],
                                  [[1, 2], [1.5, 2.5], [3, 4]])
    np.testing.assert_array_equal(buffer._store['action'][:3], [3, 4, 5])
    np.testing.assert_array_equal(buffer._store['terminal'][:3], [0, 0, 1])

  def test_signatures(self):
    extra = ReplayElement('extra', (3,), np.float32)
    buffer = _buffer(stack_size=3, extra_storage_types=[extra])
    names = [e.name for e in buffer.get_add_args_signature()]
    self.assertEqual(names, ['observation', 'action', 'reward', 'terminal',
                             'extra'])
    self.assertEqual(buffer.get_storage_signature(),
                     buffer.get_add_args_signature())
    elements = buffer.get_transition_elements()
    self.assertEqual([e.name for e in elements],
                     ['state', 'action', 'reward', 'next_state', 'next_action',
                      'next_reward', 'terminal', 'indices', 'extra'])
    self.assertEqual(elements[0].shape, (2, 2, 3))
    self.assertEqual(elements[-1].shape, (2, 3))
    self.assertEqual(buffer.get_transition_elements(5)[0].shape, (5, 2, 3))

  def test_get_observation_and_terminal_stacks(self):
    buffer = _buffer(observation_shape=(), observation_dtype=np.int32,
                     replay_capacity=5)
    for i in range(1, 5):
      buffer.add(i, 0, 0.0, i == 2)
    # 0:p 1:1 2:2T 3:p 4:3, then 4 overwrites slot 0: 0:4 1:1 2:2T 3:p 4:3.
    self.assertEqual(buffer.cursor(), 1)
    np.testing.assert_array_equal(buffer.get_observation_stack(0), [3, 4])
    np.testing.assert_array_equal(
        buffer.get_observation_stack(np.array([4, 2])), [[0, 3], [1, 2]])
    np.testing.assert_array_equal(buffer.get_terminal_stack(3), [1, 0])
    np.testing.assert_array_equal(
        buffer.get_range(buffer._store['observation'], -1, 1), [3, 4])

  def test_get_range_and_stack_errors(self):
    buffer = _buffer(stack_size=1)
    buffer.add(np.zeros(2, np.uint8), 0, 0.0, False)
    with self.assertRaisesRegex(ValueError, 'has not been added'):
      buffer.get_range(buffer._store['reward'], 0, 2)
    with self.assertRaisesRegex(ValueError, 'larger than start_index'):
      buffer.get_range(buffer._store['reward'], 1, 1)
    with self.assertRaisesRegex(ValueError, 'has not been added'):
      buffer.get_observation_stack(3)
    with self.assertRaisesRegex(ValueError, r'\[0, 10\)'):
      buffer.get_observation_stack(10)

  def test_construction_is_lazy(self):
    # Storage is reserved, not touched: constructing a 7 GB Atari memory
    # makes (almost) nothing resident. Measured in memory, not in time.
    before = fixtures.resident_bytes()
    buffer = crb.OutOfGraphReplayBuffer((84, 84), 4, 1_000_000, 32)
    self.assertLess(fixtures.resident_bytes() - before, 64 << 20)
    frame = np.full((84, 84), 3, np.uint8)
    for _ in range(3):
      buffer.add(frame, 1, 1.0, False)
    self.assertEqual(buffer.get_observation_stack(3)[0, 0].tolist(),
                     [0, 0, 0, 3])
    del buffer


class BadInputTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('shape_not_tuple', dict(observation_shape=2), 'observation_shape'),
      ('too_small', dict(replay_capacity=3, update_horizon=2),
       'not enough capacity'),
      ('stack_size', dict(stack_size=0), 'stack_size'),
      ('batch_size', dict(batch_size=0), 'batch_size'),
      ('horizon', dict(update_horizon=0), 'update_horizon'),
      ('capacity_float', dict(replay_capacity=10.0), 'replay_capacity'),
      ('duration', dict(checkpoint_duration=0), 'checkpoint_duration'),
      ('keep_every', dict(keep_every=0), 'keep_every'),
      ('rng_bool', dict(rng=True), 'rng'),
      ('duplicate_extra', dict(extra_storage_types=[
          ReplayElement('reward', (), np.float32)]), 'Duplicate'),
  )
  def test_constructor(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      _buffer(**kwargs)

  @parameterized.named_parameters(
      ('observation_shape', (np.zeros(3, np.uint8), 0, 0.0, False),
       r"'observation' has shape \(3,\), expected \(2,\)"),
      ('observation_scalar', (1, 0, 0.0, False),
       r"'observation' is the scalar 1, expected shape \(2,\)"),
      ('observation_fraction', (np.array([0.0, 0.5], np.float32), 0, 0.0,
                                False),
       r"'observation' holds 0.5 \(dtype float32\), which cannot be stored "
       'as uint8'),
      ('observation_nan', (np.array([np.nan, 0.0]), 0, 0.0, False),
       "'observation' holds nan"),
      ('observation_float_out_of_range', (np.array([0.0, 256.0]), 0, 0.0,
                                          False),
       "'observation' holds 256.0"),
      ('observation_complex', (np.array([1j, 0.0]), 0, 0.0, False),
       r"'observation' holds 1j"),
      ('terminal_fraction', (np.zeros(2, np.uint8), 0, 0.0, 0.5),
       "'terminal' = 0.5 .* cannot be stored as uint8"),
      ('observation_out_of_range', (np.array([1, 256]), 0, 0.0, False),
       "'observation' holds 256 .* out of range for uint8"),
      ('action_float', (np.zeros(2, np.uint8), 1.5, 0.0, False),
       "'action' = 1.5 .* cannot be stored as int32"),
      ('action_array', (np.zeros(2, np.uint8), [1, 2], 0.0, False),
       r"'action' has shape \(2,\), expected \(\)"),
      ('reward_string', (np.zeros(2, np.uint8), 0, 'a', False),
       "'reward' has dtype <U1"),
      ('reward_object', (np.zeros(2, np.uint8), 0, object(), False),
       "'reward' = <object object .* is not numeric"),
      ('terminal_out_of_range', (np.zeros(2, np.uint8), 0, 0.0, 300),
       r"'terminal' = 300 is out of range for uint8 \[0, 255\]"),
      ('too_many', (np.zeros(2, np.uint8), 0, 0.0, False, 1),
       'Add expects 4 elements .*, received 5'),
  )
  def test_add_rejects_before_writing(self, args, message):
    buffer = _buffer()
    for _ in range(2):  # At an episode start (no padding written), then not.
      before = snapshot(buffer)
      with self.assertRaisesRegex(ValueError, message):
        buffer.add(*args)
      assert_same_snapshot(self, before, snapshot(buffer))
      buffer.add(np.ones(2, np.uint8), 1, 1.0, False)

  def test_add_rejects_priority_for_plain_buffer(self):
    buffer = _buffer()
    with self.assertRaisesRegex(ValueError, 'Add expects 4 elements'):
      buffer.add(np.zeros(2, np.uint8), 0, 0.0, False, priority=1.0)
    self.assertTrue(buffer.is_empty())

  def test_sampling_too_early(self):
    buffer = _buffer(update_horizon=2)
    with self.assertRaisesRegex(RuntimeError, 'Cannot sample a batch'):
      buffer.sample_index_batch(2)
    buffer.add(np.zeros(2, np.uint8), 0, 0.0, False)
    buffer.add(np.zeros(2, np.uint8), 0, 0.0, False)
    with self.assertRaisesRegex(RuntimeError, 'Cannot sample a batch'):
      buffer.sample_transition_batch()

  def test_max_sample_attempts(self):
    buffer = _buffer(stack_size=1, max_sample_attempts=50)
    for _ in range(8):  # Every transition ends an episode on a time limit.
      buffer.add(np.zeros(2, np.uint8), 0, 0.0, False, episode_end=True)
    with self.assertRaisesRegex(RuntimeError,
                                'Max sample attempts: Tried 50 times'):
      buffer.sample_index_batch(4)

  @parameterized.named_parameters(
      ('out_of_range', [1, 99], r'indices\[1\] = 99 .* outside \[0, 10\)'),
      ('negative', [-1], r'indices\[0\] = -1'),
      ('padding', [0], r'indices\[0\] = 0 .* padding of the first episode'),
      ('near_cursor', [6], r'indices\[0\] = 6 .* not all written'),
      ('stack_crosses_episode', [3],
       r'indices\[0\] = 3 .* frame stack crosses the end of an episode'),
      ('float', [1.0], 'indices must be integers'),
      ('two_dimensional', [[1]], '1-D'),
  )
  def test_explicit_indices_are_validated(self, indices, message):
    buffer = _buffer()
    # 0:p 1:a 2:bT 3:p 4:c 5:d 6:e, cursor 7.
    for i in range(5):
      buffer.add(np.full(2, i, np.uint8), 0, 0.0, i == 1)
    with self.assertRaisesRegex(ValueError, message):
      buffer.sample_transition_batch(indices=indices)

  def test_explicit_indices_batch_size(self):
    buffer = _buffer(stack_size=1)
    for i in range(5):
      buffer.add(np.full(2, i, np.uint8), 0, 0.0, False)
    self.assertEqual(buffer.sample_transition_batch(
        indices=np.array([0, 1, 2], np.uint16))[0].shape, (3, 2, 1))
    with self.assertRaisesRegex(ValueError, 'batch_size is 2 but 3'):
      buffer.sample_transition_batch(batch_size=2, indices=[0, 1, 2])
    with self.assertRaisesRegex(ValueError, 'batch_size'):
      buffer.sample_index_batch(0)


class SamplingTest(absltest.TestCase):

  def _filled(self, rng=None, capacity=40, steps=100):
    buffer = crb.OutOfGraphReplayBuffer(
        (), 2, capacity, 8, update_horizon=2, observation_dtype=np.int32,
        rng=rng)
    rs = np.random.RandomState(3)
    for i in range(steps):
      buffer.add(i + 1, 0, 0.0, rs.rand() < 0.1,
                 episode_end=rs.rand() < 0.05)
    return buffer

  def test_uniform_over_valid_transitions(self):
    buffer = self._filled(rng=np.random.default_rng(7))
    valid = buffer.is_valid_transition(np.arange(40))
    samples = np.concatenate(
        [buffer.sample_index_batch(64) for _ in range(500)])
    stats_util.assert_matches_distribution(self, samples, valid.astype(float))

  def test_np_random_seed_reproduces(self):
    buffer = self._filled()
    np.random.seed(11)
    first = [buffer.sample_index_batch(8) for _ in range(5)]
    np.random.seed(11)
    second = [buffer.sample_index_batch(8) for _ in range(5)]
    np.testing.assert_array_equal(first, second)

  def test_rng_seed_reproduces_and_ignores_global_state(self):
    a = self._filled(rng=5)
    b = self._filled(rng=5)
    np.random.seed(1)
    first = a.sample_transition_batch()
    np.random.seed(2)
    second = b.sample_transition_batch()
    for x, y in zip(first, second):
      np.testing.assert_array_equal(x, y)

  def test_kept_batches_stay_as_sampled(self):
    # Batches' arrays are handed out again only once nothing refers to them
    # (storage.BufferPool.carved): whatever part of a batch is kept, later
    # samples do not write into it.
    buffer = self._filled(rng=2)
    valid = np.flatnonzero(buffer.is_valid_transition(np.arange(40)))
    first, second = valid[:8], valid[-8:]
    expected = tuple(a.copy() for a in buffer.sample_transition_batch(
        indices=first))
    for keep in (lambda b: b, lambda b: b[0], lambda b: b[3][2:],
                 lambda b: b[7]):
      kept = keep(buffer.sample_transition_batch(indices=first))
      for _ in range(5):
        buffer.sample_transition_batch(indices=second)
      if isinstance(kept, tuple):
        for array, wanted in zip(kept, expected):
          np.testing.assert_array_equal(array, wanted)
      else:
        np.testing.assert_array_equal(kept, keep(expected))
      del kept

  def test_elements_of_a_subclass_come_from_its_hook(self):

    class WithSteps(crb.OutOfGraphReplayBuffer):

      def get_transition_elements(self, batch_size=None):
        elements = super().get_transition_elements(batch_size)
        size = len(elements[0].shape) and elements[0].shape[0]
        return elements + [ReplayElement('step', (size,), np.int64)]

      def _transition_element(self, element, indices):
        if element.name == 'step':
          return indices.astype(np.int64) * 10
        return super()._transition_element(element, indices)

    buffer = WithSteps((), 2, 40, 8, update_horizon=2,
                       observation_dtype=np.int32, rng=3)
    plain = self._filled(rng=3, steps=0)
    for i in range(30):
      buffer.add(i + 1, 0, 0.0, False)
      plain.add(i + 1, 0, 0.0, False)
    batch = buffer.sample_transition_batch(indices=[5, 9, 12])
    np.testing.assert_array_equal(batch[-1], [50, 90, 120])
    for mine, theirs in zip(batch, plain.sample_transition_batch(
        indices=[5, 9, 12])):
      np.testing.assert_array_equal(mine, theirs)

  def test_extras_of_python_objects(self):
    buffer = crb.OutOfGraphReplayBuffer(
        (2,), 1, 10, 2, extra_storage_types=[
            ReplayElement('note', (), object)])
    for i in range(6):
      buffer.add(np.zeros(2, np.uint8), 0, 0.0, False, {'step': i})
    for _ in range(2):  # The second batch reuses the first's memory.
      batch = buffer.sample_transition_batch(indices=[1, 4])
      self.assertEqual(batch[-1].dtype, object)
      self.assertEqual(list(batch[-1]), [{'step': 1}, {'step': 4}])


class ReferenceModelTest(parameterized.TestCase):
  """Seeded random add/sample sequences against ReferenceBuffer.

  After each add: the padding, terminals and episode ends written (and
  cleared when overwritten), the counters, validity and transitions.
  """

  @parameterized.parameters(range(12))
  def test_random_sequence(self, seed):
    rs = np.random.RandomState(seed)
    stack, horizon = 1 + seed % 3, 1 + (seed * 5) % 4
    capacity = stack + horizon + int(rs.randint(1, 12))
    gamma = 0.9
    buffer = crb.OutOfGraphReplayBuffer(
        (), stack, capacity, 4, update_horizon=horizon, gamma=gamma,
        observation_dtype=np.int32, rng=seed)
    reference = replay_cases.ReferenceBuffer(stack, horizon, capacity, gamma)
    for step in replay_cases.random_steps(rs, 3 * capacity + 10):
      buffer.add(step['observation'], step['action'], step['reward'],
                 step['terminal'], episode_end=step['episode_end'])
      reference.add(step['observation'], step['action'], step['reward'],
                    step['terminal'], step['episode_end'])
      replay_cases.check_against_reference(self, buffer, reference)


class DopamineEquivalenceTest(parameterized.TestCase):
  """Same adds as Dopamine's buffer: identical batches for the same indices."""

  @parameterized.parameters((1, 1, 0), (4, 1, 1), (1, 3, 2), (3, 5, 3),
                            (2, 10, 4), (1, 12, 5))
  def test_random_adds(self, stack, horizon, seed):
    rs = np.random.RandomState(seed)
    config = dict(observation_shape=(3,), stack_size=stack,
                  replay_capacity=37, batch_size=4, update_horizon=horizon,
                  gamma=0.97)
    ours = crb.OutOfGraphReplayBuffer(**config)
    theirs = dopamine_crb.OutOfGraphReplayBuffer(**config)
    for _ in range(120):
      observation = rs.randint(0, 255, size=3).astype(np.uint8)
      args = (observation, int(rs.randint(4)),
              np.float32(rs.randn() * 10 ** rs.randint(-3, 4)),
              rs.rand() < 0.1)
      episode_end = rs.rand() < 0.05
      ours.add(*args, episode_end=episode_end)
      theirs.add(*args, episode_end=episode_end)
    ours_valid = set(np.flatnonzero(ours.is_valid_transition(np.arange(37))))
    theirs_valid = {i for i in range(37) if theirs.is_valid_transition(i)}
    # Every disagreement is one of the documented deviations.
    for index in ours_valid - theirs_valid:
      self._assert_time_limit_end_after_terminal(ours, index)
    for index in theirs_valid - ours_valid:
      self.assertIn('frame stack crosses the end of an episode',
                    ours._invalid_reason(index))
    replay_cases.assert_same_as_dopamine(self, ours, theirs)

  def _assert_time_limit_end_after_terminal(self, buffer, index):
    """Dopamine rejects these; the return is cut by the terminal first."""
    horizon = buffer._update_horizon
    slots = crb.modulo_range(index, horizon, buffer._replay_capacity)
    terminal = buffer._store['terminal'][slots] != 0
    time_limit_ends = buffer.storage.episode_end[slots] & ~terminal
    self.assertTrue(terminal.any())
    self.assertTrue(time_limit_ends.any())
    self.assertGreater(np.flatnonzero(time_limit_ends).min(),
                       np.argmax(terminal))


# The checkpoint tests' memories: small, as Dopamine's constructor takes them.
_SMALL_MEMORY = dict(observation_shape=(2,), stack_size=2, replay_capacity=16,
                     batch_size=4, update_horizon=2)


def _filled(cls=crb.OutOfGraphReplayBuffer, steps=30, seed=0, **kwargs):
  """A memory of `cls` (`_SMALL_MEMORY`, then kwargs), `steps` adds in.

  The adds (observations, terminals and episode ends) are drawn from `seed`.
  """
  memory = cls(**dict(_SMALL_MEMORY, **kwargs))
  rs = np.random.RandomState(seed)
  for i in range(steps):
    memory.add(rs.randint(0, 255, size=2).astype(np.uint8), i % 3, float(i),
               rs.rand() < 0.15, episode_end=rs.rand() < 0.05)
  return memory


class CheckpointTest(parameterized.TestCase):

  def test_round_trip(self):
    directory = fixtures.temp_dir(self)
    buffer = _filled(rng=3)
    buffer.add(np.zeros(2, np.uint8), 0, 0.0, False)  # Mid-episode.
    buffer.save(directory, 7)
    self.assertEqual(
        sorted(os.listdir(directory)),
        sorted('{}_ckpt.7.gz'.format(name) for name in [
            '$store$_observation', '$store$_action', '$store$_reward',
            '$store$_terminal', 'add_count', 'invalid_range',
            'episode_end_indices', memory_checkpoint.DOPAMINE_PER_STATE_NAME]))
    restored = _filled(steps=3, seed=9, rng=4)
    restored.load(directory, 7)
    assert_same_snapshot(self, snapshot(buffer), snapshot(restored))
    self.assertFalse(restored.storage.episode_start)
    for x, y in zip(buffer.sample_transition_batch(),
                    restored.sample_transition_batch()):
      np.testing.assert_array_equal(x, y)

  def test_ours_to_dopamine(self):
    directory = fixtures.temp_dir(self)
    ours = _filled(steps=40)
    ours.add(np.ones(2, np.uint8), 1, 1.0, True)  # End on an episode end.
    ours.save(directory, 2)
    theirs = dopamine_crb.OutOfGraphReplayBuffer(**_SMALL_MEMORY)
    theirs.load(directory, 2)
    replay_cases.assert_same_as_dopamine(self, ours, theirs)
    # Both continue identically.
    for i in range(5):
      for buffer in (ours, theirs):
        buffer.add(np.full(2, i, np.uint8), 1, 0.5, i == 3)
    replay_cases.assert_same_as_dopamine(self, ours, theirs)

  def test_dopamine_to_ours(self):
    # Dopamine saves no episode start: it is derived from the last add.
    directory = fixtures.temp_dir(self)
    theirs = _filled(dopamine_crb.OutOfGraphReplayBuffer, steps=40, seed=5)
    theirs.add(np.zeros(2, np.uint8), 0, 0.0, False)  # Mid-episode.
    theirs.save(directory, 3)
    theirs.add(np.ones(2, np.uint8), 1, 1.0, True)
    theirs.save(directory, 4)
    ours = _filled(steps=3)
    ours.load(directory, 3)
    self.assertFalse(ours.storage.episode_start)
    ours.load(directory, 4)
    replay_cases.assert_same_as_dopamine(self, ours, theirs)
    self.assertTrue(ours.storage.episode_start)
    for i in range(5):
      for buffer in (ours, theirs):
        buffer.add(np.full(2, i, np.uint8), 1, 0.5, i == 3)
    replay_cases.assert_same_as_dopamine(self, ours, theirs)

  def test_missing_episode_end_indices_is_tolerated(self):
    directory = fixtures.temp_dir(self)
    buffer = _filled()
    buffer.save(directory, 3)
    os.remove(os.path.join(directory, 'episode_end_indices_ckpt.3.gz'))
    restored = _filled(steps=0)
    with self.assertLogs('absl', level='WARNING') as logs:
      restored.load(directory, 3)
    self.assertIn('expected for old checkpoints', '\n'.join(logs.output))
    terminals = set(np.flatnonzero(buffer._store['terminal']).tolist())
    self.assertEqual(restored.episode_end_indices, terminals)

  @parameterized.named_parameters(
      ('truncated_store', '$store$_terminal',
       lambda data: data[:len(data) // 2], 'corrupt or truncated'),
      ('garbage_pickle', 'episode_end_indices',
       lambda data: gzip.compress(b'garbage'), 'corrupt or truncated'),
      ('unsafe_pickle', 'episode_end_indices',
       lambda data: gzip.compress(pickle.dumps(collections.Counter('ab'))),
       'refusing to unpickle global collections.Counter'),
      ('episode_end_out_of_range', 'episode_end_indices',
       lambda data: gzip.compress(pickle.dumps({99})), 'episode end index 99'),
      ('wrong_shape', '$store$_observation',
       lambda data: _npy_gz(np.zeros((16, 3), np.uint8)),
       r'shape \(16, 3\), expected \(16, 2\)'),
      ('wrong_dtype', '$store$_reward',
       lambda data: _npy_gz(np.zeros(16, np.float64)),
       'dtype float64, expected float32'),
      ('bad_add_count', 'add_count',
       lambda data: _npy_gz(np.array(-4)), 'add_count'),
      ('bad_invalid_range', 'invalid_range',
       lambda data: _npy_gz(np.arange(5)), 'differently configured'),
      ('flipped_byte', '$store$_action',
       lambda data: data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 1])
       + data[len(data) // 2 + 1:], 'corrupt|CRC|invalid|malformed'),
      ('bad_state', memory_checkpoint.DOPAMINE_PER_STATE_NAME,
       lambda data: gzip.compress(pickle.dumps({'a': 1})),
       'not a dopamine_per state'),
  )
  def test_bad_file_raises_and_changes_nothing(self, name, corrupt, message):
    # With our state file, its recorded checksums catch any change; without
    # it (a Dopamine checkpoint), the file's own checks must.
    for with_manifest in (True, False):
      if (not with_manifest and
          name == memory_checkpoint.DOPAMINE_PER_STATE_NAME):
        continue
      directory = fixtures.temp_dir(self)
      _filled().save(directory, 3)
      if not with_manifest:
        os.remove(os.path.join(directory, '{}_ckpt.3.gz'.format(
            memory_checkpoint.DOPAMINE_PER_STATE_NAME)))
      path = os.path.join(directory, '{}_ckpt.3.gz'.format(name))
      with open(path, 'rb') as f:
        data = f.read()
      with open(path, 'wb') as f:
        f.write(corrupt(data))
      buffer = _filled(steps=5, seed=2)
      before = snapshot(buffer)
      expected = message
      if with_manifest and name != memory_checkpoint.DOPAMINE_PER_STATE_NAME:
        # Whichever check reads the bad bytes first.
        expected = '({}|checksum differs)'.format(message)
      with self.assertRaisesRegex(atomic_files.CheckpointError,
                                  '{}.*{}'.format(re.escape(path), expected)):
        buffer.load(directory, 3)
      assert_same_snapshot(self, before, snapshot(buffer))

  def test_pickle_that_would_run_code_is_refused(self):
    directory = fixtures.temp_dir(self)
    marker = os.path.join(directory, 'code_ran')

    class Exploit(object):

      def __reduce__(self):
        return (os.system, ('touch ' + marker,))

    buffer = _filled()
    buffer.save(directory, 3)
    os.remove(os.path.join(directory, '{}_ckpt.3.gz'.format(
        memory_checkpoint.DOPAMINE_PER_STATE_NAME)))  # As Dopamine's.
    with open(os.path.join(directory, 'episode_end_indices_ckpt.3.gz'),
              'wb') as f:
      f.write(gzip.compress(pickle.dumps(Exploit())))
    target = _filled(steps=5, seed=2)
    before = snapshot(target)
    with self.assertRaisesRegex(safe_pickle.UnsafePickleError,
                                r'episode_end_indices_ckpt\.3\.gz.*system'):
      target.load(directory, 3)
    self.assertFalse(os.path.exists(marker))
    assert_same_snapshot(self, before, snapshot(target))

  def test_file_from_another_checkpoint_is_refused(self):
    # Well-formed, right shape and dtype, but not the file this checkpoint
    # wrote: only the recorded checksum can tell.
    directory = fixtures.temp_dir(self)
    buffer = _filled()
    buffer.save(directory, 3)
    _filled(steps=7, seed=5).save(directory, 4)
    shutil.copy(os.path.join(directory, '$store$_reward_ckpt.4.gz'),
                os.path.join(directory, '$store$_reward_ckpt.3.gz'))
    before = snapshot(buffer)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                r'reward_ckpt\.3\.gz.*checksum differs'):
      buffer.load(directory, 3)
    assert_same_snapshot(self, before, snapshot(buffer))

  @parameterized.parameters(
      # Stale 1, 2 and 4 deleted; 0 and 3 are multiples of keep_every.
      (dict(checkpoint_duration=2, keep_every=3), {0, 3, 5, 6}),
      (dict(), {3, 4, 5, 6}))
  def test_garbage_collection(self, config, kept):
    directory = fixtures.temp_dir(self)
    buffer = _filled(**config)
    for iteration in range(7):
      buffer.save(directory, iteration)
    suffixes = {int(f.split('.')[-2]) for f in os.listdir(directory)}
    self.assertEqual(suffixes, kept)
    for suffix in suffixes:  # Every kept checkpoint is complete.
      _filled(steps=0, **config).load(directory, suffix)
    self.assertLen(os.listdir(directory), 4 * 8)

  def test_keep_every_writes_complete_checkpoints(self):
    # Dopamine returns from save() after the first file whenever the stale
    # iteration is a multiple of keep_every; we write everything.
    config = dict(_SMALL_MEMORY, checkpoint_duration=2, keep_every=2)
    dopamine_dir, our_dir = fixtures.temp_dir(self), fixtures.temp_dir(self)
    theirs = dopamine_crb.OutOfGraphReplayBuffer(**config)
    ours = crb.OutOfGraphReplayBuffer(**config)
    for buffer in (theirs, ours):
      buffer.add(np.zeros(2, np.uint8), 0, 0.0, False)
    theirs.save(dopamine_dir, 4)
    ours.save(our_dir, 4)
    self.assertLen(os.listdir(dopamine_dir), 1)  # Dopamine's bug.
    self.assertLen(os.listdir(our_dir), 8)
    crb.OutOfGraphReplayBuffer(**config).load(our_dir, 4)

def _memory(steps=30, seed=0, **kwargs):
  """A plain `_filled` memory with a generator, whose state it checkpoints."""
  return _filled(steps=steps, seed=seed, rng=3, **kwargs)


def _leftovers(directory):
  """Temporaries and journals in `directory`: none after a finished save."""
  return sorted(name for name in os.listdir(directory)
                if name.endswith('.tmp') or
                name.startswith(memory_checkpoint.JOURNAL_NAME))


# Files of a plain memory's checkpoint, the state file, and the journal:
# what a save writes, in order.
_WRITES = len(memory_checkpoint.checkpoint_files(_memory(0))) + 2


class StorageViewsTest(absltest.TestCase):
  """docs/compat.md: `episode_end_indices` and `_store` are the storage's."""

  def test_views_are_read_only_and_follow_the_storage(self):
    memory = _memory()
    self.assertIs(memory.episode_end_indices,
                  memory.storage.episode_end_indices)
    self.assertIs(memory._store, memory.storage.arrays)  # pylint: disable=protected-access
    for name in ('episode_end_indices', '_store'):
      with self.assertRaises(AttributeError):
        setattr(memory, name, {})
    written_to = memory.storage.arrays['reward']
    memory._store['reward'] = np.zeros_like(written_to)  # pylint: disable=protected-access
    shape = memory.get_storage_signature()[0].shape
    memory.add(np.zeros(shape), 0, 5.0, False)
    slot = (memory.storage.cursor() - 1) % memory.replay_capacity
    # `add` wrote to the storage's array, not to the replaced entry.
    self.assertEqual(written_to[slot], 5.0)
    self.assertEqual(memory._store['reward'][slot], 0.0)  # pylint: disable=protected-access


class _ResaveTestCase(parameterized.TestCase):
  """Checkpoint 4 of `old` saved; `new`, another memory, to save over it."""

  def setUp(self):
    super().setUp()
    self.directory = fixtures.temp_dir(self)
    self.old = _memory(seed=0)
    self.old.save(self.directory, 4)
    self.new = _memory(seed=1, steps=41)

  def assert_loads(self, memory, number=4):
    restored = _memory(steps=3, seed=9)
    restored.load(self.directory, number)
    assert_same_snapshot(self, snapshot(memory), snapshot(restored))

  def digests(self, staged=True):
    """The directory's files (staged `.tmp` ones too if `staged`)."""
    return {name: atomic_files.file_digest(os.path.join(self.directory, name))
            for name in os.listdir(self.directory)
            if staged or not name.endswith('.tmp')}

  def failing_replace(self, failing):
    """Patches `atomic_files.replace` to fail at its `failing`-th call."""
    real_replace = atomic_files.replace
    calls = []

    def replace(source, destination):
      calls.append(destination)
      if len(calls) == failing:
        raise OSError(errno.EIO, 'I/O error')
      return real_replace(source, destination)

    return mock.patch.object(atomic_files, 'replace', side_effect=replace)


class AtomicResaveTest(_ResaveTestCase):
  """Issue 22, point 1: saving checkpoint N again is all or nothing."""

  @parameterized.parameters(range(1, _WRITES + 1))
  def test_error_writing_any_file_keeps_the_old_checkpoint(self, failing):
    real_stage_write = atomic_files.stage_write
    calls = []

    def stage_write(path, write):
      calls.append(path)
      if len(calls) != failing:
        return real_stage_write(path, write)

      def disk_full(f):
        f.write(b'partial')
        raise OSError(errno.ENOSPC, 'No space left on device')
      return real_stage_write(path, disk_full)

    before = self.digests()
    with mock.patch.object(atomic_files, 'stage_write',
                           side_effect=stage_write):
      with self.assertRaisesRegex(OSError, 'No space'):
        self.new.save(self.directory, 4)
    self.assertEqual(self.digests(), before)  # Nothing left, nothing changed.
    self.assert_loads(self.old)
    self.new.save(self.directory, 4)
    self.assert_loads(self.new)

  def test_error_renaming_the_journal_keeps_the_old_checkpoint(self):
    before = self.digests()
    with self.failing_replace(1):  # The journal's rename is the first.
      with self.assertRaises(OSError):
        self.new.save(self.directory, 4)
    self.assertEqual(self.digests(), before)
    self.assert_loads(self.old)

  @parameterized.parameters(0, 1, 4, _WRITES - 2)
  def test_cut_short_after_the_journal_is_the_new_checkpoint(self, renames):
    """The journal written, `renames` files renamed, then an I/O error."""
    self._interrupt_after_journal(renames)
    self.assertIn(memory_checkpoint.journal_filename(4),
                  os.listdir(self.directory))
    self.assertEqual(
        memory_checkpoint.latest_checkpoint_iteration(self.directory), 4)
    before = self.digests()
    self.assert_loads(self.new)  # Read through the journal.
    self.assertEqual(self.digests(), before)  # Without writing anything.
    # The next save finishes it, then writes its own.
    newer = _memory(seed=2, steps=50)
    newer.save(self.directory, 5)
    self.assertEqual(_leftovers(self.directory), [])
    self.assert_loads(self.new)
    self.assert_loads(newer, 5)

  def _interrupt_after_journal(self, renames):
    """`new`'s save of 4 fails after its journal and `renames` renames."""
    with self.failing_replace(renames + 2):
      with self.assertRaises(OSError):
        self.new.save(self.directory, 4)

  def test_damaged_file_of_a_pending_journal_is_refused(self):
    self._interrupt_after_journal(2)
    record = transaction.pending(self.directory,
                                 memory_checkpoint.journal_filename(4))
    for entry in record.entries[1:3]:  # One renamed, one still staged.
      path = record.path_of(self.directory, entry.target)
      with open(path, 'r+b') as f:
        f.seek(20)
        byte = f.read(1)
        f.seek(20)
        f.write(bytes([byte[0] ^ 1]))
      memory = _memory(steps=3, seed=9)
      before = snapshot(memory)
      with self.assertRaisesRegex(atomic_files.CheckpointError,
                                  re.escape(path)):
        memory.load(self.directory, 4)
      assert_same_snapshot(self, before, snapshot(memory))
      with open(path, 'r+b') as f:
        f.seek(20)
        f.write(byte)

  def test_malformed_journal_is_refused_and_kept(self):
    self._interrupt_after_journal(1)
    journal = os.path.join(self.directory,
                           memory_checkpoint.journal_filename(4))
    with open(journal, 'wb') as f:
      f.write(b'[1, 2]')
    before = self.digests()
    with self.assertRaisesRegex(atomic_files.CheckpointError, 'malformed'):
      _memory().load(self.directory, 4)
    with self.assertRaisesRegex(atomic_files.CheckpointError, 'malformed'):
      self.new.save(self.directory, 5)
    self.assertEqual(self.digests(), before)

  def test_dopamine_reads_an_interrupted_save_once_rolled_forward(self):
    self._interrupt_after_journal(1)
    self.assertEqual(memory_checkpoint.roll_forward(self.directory), [4])
    self.assertEqual(_leftovers(self.directory), [])
    theirs = dopamine_crb.OutOfGraphReplayBuffer(**_SMALL_MEMORY)
    theirs.load(self.directory, 4)
    replay_cases.assert_same_as_dopamine(self, self.new, theirs)

  def test_resave_through_tf_io_gfile(self):
    directory = 'ram://dopamine_per_resave_{}'.format(random.getrandbits(32))
    tf.io.gfile.makedirs(directory)
    self.old.save(directory, 4)
    self.directory = directory
    self._interrupt_after_journal(2)
    self.assertEqual(
        memory_checkpoint.latest_checkpoint_iteration(directory), 4)
    self.assert_loads(self.new)
    self.old.save(directory, 4)
    self.assertEqual(
        [name for name in tf.io.gfile.listdir(directory)
         if 'tmp' in name or name.startswith(memory_checkpoint.JOURNAL_NAME)],
        [])
    self.assert_loads(self.old)

  def test_resave_writes_the_bytes_of_a_first_save(self):
    # Dopamine's bytes (gzip with mtime 0): the same whether checkpoint 4
    # is new or written over an older one.
    first = fixtures.temp_dir(self)
    self.new.save(first, 4)
    self.new.save(self.directory, 4)
    for name in os.listdir(first):
      with open(os.path.join(first, name), 'rb') as a, open(
          os.path.join(self.directory, name), 'rb') as b:
        self.assertEqual(a.read(), b.read(), name)
    with open(os.path.join(first, '$store$_reward_ckpt.4.gz'), 'rb') as f:
      data = f.read()
    self.assertEqual(data[4:8], b'\0\0\0\0')  # gzip's mtime.
    raw = io.BytesIO()
    np.save(raw, self.new._store['reward'], allow_pickle=False)
    self.assertEqual(gzip.decompress(data), raw.getvalue())


class TwoPhaseSaveTest(_ResaveTestCase):
  """`prepare_save`, `commit_save`, `abort_save`, `prune` (issue 22)."""

  def test_prepare_changes_nothing_visible_and_commit_switches(self):
    before = self.digests(staged=False)
    record = memory_checkpoint.prepare_save(self.new, self.directory, 4)
    self.assertLen(record.entries, _WRITES - 1)
    self.assertEqual(self.digests(staged=False), before)
    self.assert_loads(self.old)
    # As another process would get it.
    record = transaction.Record.from_data(
        json.loads(json.dumps(record.to_data())))
    memory_checkpoint.commit_save(self.new, self.directory, 4, record)
    self.assertEqual(_leftovers(self.directory), [])
    self.assert_loads(self.new)
    # Idempotent: committed already, nothing to do.
    after = self.digests(staged=False)
    memory_checkpoint.commit_save(self.new, self.directory, 4, record)
    self.assertEqual(self.digests(staged=False), after)

  def test_abort_deletes_what_was_staged(self):
    before = self.digests(staged=False)
    record = memory_checkpoint.prepare_save(self.new, self.directory, 4)
    memory_checkpoint.abort_save(self.directory, record)
    self.assertEqual(_leftovers(self.directory), [])
    self.assertEqual(self.digests(staged=False), before)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                'staged files .* are gone'):
      memory_checkpoint.commit_save(self.new, self.directory, 4, record)
    self.assertEqual(self.digests(staged=False), before)
    self.assert_loads(self.old)

  def test_commit_completes_after_an_interrupted_commit(self):
    record = memory_checkpoint.prepare_save(self.new, self.directory, 4)
    with self.failing_replace(4):
      with self.assertRaises(OSError):
        memory_checkpoint.commit_save(self.new, self.directory, 4, record)
    with self.assertRaisesRegex(ValueError, 'it was committed'):
      memory_checkpoint.abort_save(self.directory, record)
    self.assert_loads(self.new)
    memory_checkpoint.commit_save(self.new, self.directory, 4, record)
    self.assertEqual(_leftovers(self.directory), [])
    self.assert_loads(self.new)

  def test_a_record_of_another_checkpoint_is_refused(self):
    record = memory_checkpoint.prepare_save(self.new, self.directory, 4)
    with self.assertRaisesRegex(ValueError, 'Not a record of checkpoint 5'):
      memory_checkpoint.commit_save(self.new, self.directory, 5, record)
    self.assertEqual(
        memory_checkpoint.latest_checkpoint_iteration(self.directory), 4)
    self.assert_loads(self.old)

  def test_prune_alone_deletes_the_stale_checkpoint(self):
    memory = _memory(checkpoint_duration=1)
    for number in (5, 6):
      record = memory_checkpoint.prepare_save(memory, self.directory, number)
      memory_checkpoint.commit_save(memory, self.directory, number, record,
                                    prune=False)
    self.assertIn('add_count_ckpt.5.gz', os.listdir(self.directory))
    memory_checkpoint.prune(memory, self.directory, 6)
    self.assertNotIn('add_count_ckpt.5.gz', os.listdir(self.directory))
    self.assert_loads(memory, 6)

  def test_missing_directory(self):
    missing = os.path.join(self.directory, 'missing')
    with self.assertLogs('absl', level='WARNING') as logs:
      self.new.save(missing, 4)
      record = memory_checkpoint.prepare_save(self.new, missing, 4)
    self.assertIsNone(record)
    self.assertFalse(os.path.exists(missing))
    self.assertLen([line for line in logs.output if 'does not exist' in line],
                   2)
    memory_checkpoint.commit_save(self.new, self.directory, 4, None)
    memory_checkpoint.abort_save(self.directory, None)
    self.assert_loads(self.old)

  def test_an_attribute_named_like_the_journal_is_refused(self):
    self.new.dopamine_per_journal = 1
    before = self.digests(staged=False)
    with self.assertRaisesRegex(ValueError, 'dopamine_per_journal'):
      self.new.save(self.directory, 4)
    self.assertEqual(self.digests(staged=False), before)


class MissingFileErrorTest(absltest.TestCase):
  """Issue 22, point 9, where TensorFlow is loaded (see tf_free_import_test)."""

  def test_missing_file_raises_not_found_and_changes_nothing(self):
    directory = fixtures.temp_dir(self)
    _memory().save(directory, 3)
    path = os.path.join(directory, '$store$_reward_ckpt.3.gz')
    os.remove(path)
    memory = _memory(steps=5, seed=2)
    before = snapshot(memory)
    with self.assertRaises(tf.errors.NotFoundError) as raised:
      memory.load(directory, 3)
    assert_same_snapshot(self, before, snapshot(memory))
    error = raised.exception
    self.assertIsInstance(error, atomic_files.CheckpointNotFoundError)
    self.assertIsInstance(error, FileNotFoundError)
    self.assertIsInstance(error, atomic_files.CheckpointError)
    self.assertEqual(error.filename, path)
    self.assertEqual(error.errno, errno.ENOENT)
    self.assertEqual(str(error), 'Missing file: ' + path)
    self.assertEqual(error.message, 'Missing file: ' + path)
    self.assertEqual(error.error_code, tf.errors.NOT_FOUND)
    # As Ray carries a shard's error to the learner; and as a shard names
    # itself in it (type(error)(None, None, message)).
    copy = pickle.loads(pickle.dumps(error))
    self.assertIsInstance(copy, tf.errors.NotFoundError)
    self.assertEqual((str(copy), copy.filename), (str(error), path))
    self.assertEqual(str(type(error)(None, None, 'shard 1: x')),
                     'shard 1: x')

  def test_an_error_from_a_process_without_tensorflow(self):
    # What a process that never imported TensorFlow raises: unpickled here,
    # where it is loaded, it is TensorFlow's error too.
    plain = atomic_files.CheckpointNotFoundError('Missing file: x', 'x')
    self.assertNotIsInstance(plain, tf.errors.NotFoundError)
    copy = pickle.loads(pickle.dumps(plain))
    self.assertIsInstance(copy, tf.errors.NotFoundError)
    self.assertIsInstance(copy, atomic_files.CheckpointNotFoundError)
    self.assertEqual((str(copy), copy.filename), ('Missing file: x', 'x'))


if __name__ == '__main__':
  absltest.main()
