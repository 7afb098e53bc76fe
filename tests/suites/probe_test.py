"""What an adversarial probe broke at the Python/native seam (issue 32).

Each test reproduces one finding of the probe and fails on the code it ran
against; docs/reliability.md ("The native seam") says what each guarantees.
Crashes are caught in a subprocess.
"""

import random
import subprocess
import sys
import textwrap
from unittest import mock

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.native import native_memory
from dopamine_per.replay_memory import circular_replay_buffer as crb
from dopamine_per.replay_memory import prioritized_replay_buffer as prb
from dopamine_per.replay_memory import sum_tree
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from dopamine_per.replay_memory.memory import add_checks
from tests.support import fixtures
from tests.support import graph_util
from tests.support import replay_cases

ReplayElement = crb.ReplayElement


def _wrapped(cls=prb.WrappedPrioritizedReplayBuffer, **kwargs):
  config = dict(observation_shape=(2,), stack_size=1, replay_capacity=16,
                batch_size=4, observation_dtype=np.float32)
  config.update(kwargs)
  return cls(**config)


def _fill(memory, count=10):
  for step in range(count):
    memory.add(np.full((2,), step, np.float32), step % 3, float(step),
               False, *([1.0 + step] if hasattr(memory, 'sum_tree') else []))


def _prioritized(count=10, **kwargs):
  """A prioritized memory, `count` adds in (priorities 1.0, 2.0, ...)."""
  memory = _wrapped(prb.OutOfGraphPrioritizedReplayBuffer, **kwargs)
  _fill(memory, count)
  return memory


class MaxRecordedPriorityTest(parameterized.TestCase):
  """`sum_tree.max_recorded_priority` is assignable, and checked."""

  # NaN, inf and negative priorities were written by the next add(None);
  # below 1.0 or the largest priority (10.0), `load` refused the checkpoint.
  @parameterized.parameters(float('nan'), float('inf'), -1.0, 'x', None,
                            0.5, 9.5)
  def test_a_value_that_would_break_a_checkpoint_is_refused(self, value):
    memory = _prioritized()
    before = memory.sum_tree.max_recorded_priority
    with self.assertRaisesRegex(ValueError, 'max_recorded_priority'):
      memory.sum_tree.max_recorded_priority = value
    self.assertEqual(memory.sum_tree.max_recorded_priority, before)

  def test_an_assigned_priority_is_what_new_transitions_get_and_save_keeps(
      self):
    memory = _prioritized()
    memory.sum_tree.max_recorded_priority = 12.5
    memory.add(np.zeros(2, np.float32), 0, 0.0, False, None)
    self.assertEqual(memory.get_priority(np.array([10]))[0], 12.5)
    directory = fixtures.temp_dir(self)
    memory.save(directory, 0)
    restored = _prioritized()
    restored.load(directory, 0)  # Refused a NaN it was given before.
    self.assertEqual(restored.sum_tree.max_recorded_priority, 12.5)


class ExtraNamesTest(parameterized.TestCase):
  """An extra element cannot take a name the batch uses for its own."""

  @parameterized.product(name=sorted(add_checks.TRANSITION_NAMES),
                         prioritized=[False, True])
  def test_a_transition_name_is_refused(self, name, prioritized):
    cls = (prb.OutOfGraphPrioritizedReplayBuffer if prioritized else
           crb.OutOfGraphReplayBuffer)
    with self.assertRaisesRegex(ValueError,
                                "extra_storage_types: the name '{}'".format(
                                    name)):
      cls((2,), 1, 16, 4, extra_storage_types=[
          ReplayElement(name, (), np.int32)])

  def test_an_op_asked_for_a_malformed_extra_fails_cleanly(self):
    # The op parsed 'extra:<digits>' with std::stoul inside the kernel: a
    # non-number aborted the process. Run where an abort cannot hurt.
    script = textwrap.dedent("""
        import numpy as np
        import tensorflow as tf
        from dopamine_per.replay_memory import circular_replay_buffer as crb
        from dopamine_per.replay_memory.graph import native_ops
        tf.compat.v1.disable_eager_execution()
        memory = crb.OutOfGraphReplayBuffer((2,), 1, 16, 4)
        for step in range(8):
          memory.add(np.zeros(2, np.float32), 0, 0.0, False)
        native = native_ops.binding(memory, True)
        elements = [crb.ReplayElement(name, (4,), np.int32)
                    for name in ('indices', 'extra:x', 'extra:',
                                 'extra:99999999999999999999')]
        for element in elements[1:]:
          try:
            ops = native_ops.sample(native, [elements[0], element])
            with tf.compat.v1.Session() as session:
              session.run(ops)
          except tf.errors.InvalidArgumentError as e:
            assert 'unknown transition element' in e.message, e.message
            print('refused', element.name)
        """)
    result = subprocess.run([sys.executable, '-c', script],
                            capture_output=True, text=True, timeout=240,
                            env=fixtures.subprocess_env(), check=False)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertEqual(result.stdout.split('\n')[:3], [
        'refused extra:x', 'refused extra:',
        'refused extra:99999999999999999999'])


class ByteOrderTest(graph_util.GraphTestCase):
  """Elements declared in the other byte order come out with their values."""

  @parameterized.parameters(True, False)
  def test_the_graph_returns_the_values_added(self, use_native_ops):
    replay = crb.WrappedReplayBuffer(
        observation_shape=(2,), stack_size=1, replay_capacity=16,
        batch_size=4, observation_dtype='>i4', action_dtype='>i2',
        extra_storage_types=[ReplayElement('weight', (), '>f8')],
        use_native_ops=use_native_ops)
    for step in range(10):
      replay.add(np.full((2,), 1000 + step), step, 0.0, False,
                 np.float64(step) / 4)
    batch = self.session.run(replay.transition)
    indices = batch['indices']
    np.testing.assert_array_equal(batch['state'][:, :, 0],
                                  np.stack([1000 + indices] * 2, axis=1))
    np.testing.assert_array_equal(batch['action'], indices)
    np.testing.assert_array_equal(batch['weight'], indices / 4)


class _OwnPriorities(prb.OutOfGraphPrioritizedReplayBuffer):
  """A user's subclass whose priority methods count their calls."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.calls = []

  def set_priority(self, indices, priorities):
    self.calls.append('set')
    super().set_priority(indices, 2 * np.asarray(priorities))

  def get_priority(self, indices):
    self.calls.append('get')
    return super().get_priority(indices)


class PriorityOverridesTest(graph_util.GraphTestCase):
  """The graph's priority ops call a subclass's own methods."""

  def test_tf_set_and_get_priority_call_the_overrides(self):
    memory = _OwnPriorities((2,), 1, 16, 4, observation_dtype=np.float32)
    _fill(memory)
    replay = prb.WrappedPrioritizedReplayBuffer(
        observation_shape=(2,), stack_size=1, wrapped_memory=memory,
        replay_capacity=16, batch_size=4)
    indices = tf.constant([1, 2], tf.int32)
    update = replay.tf_set_priority(indices, tf.constant([1.5, 3.0]))
    read = replay.tf_get_priority(indices)
    self.session.run(update)
    np.testing.assert_array_equal(self.session.run(read), [3.0, 6.0])
    self.assertEqual(memory.calls, ['set', 'get'])


class ForeignGraphTest(graph_util.GraphTestCase):
  """A graph's ops never sample another process's memory."""

  def test_an_imported_graph_finds_no_memory_of_the_importing_process(self):
    replay = _wrapped(crb.WrappedReplayBuffer)
    _fill(replay.memory)
    target = replay.indices.name
    self.assertEqual(self.session.run(replay.indices).shape, (4,))
    graph_file = fixtures.temp_dir(self) + '/graph.pb'
    with open(graph_file, 'wb') as f:
      f.write(self.graph.as_graph_def().SerializeToString())
    memory_id = replay.memory.native_memory().id
    # The importing process registers memories until one has the id the
    # graph's ops name (ids count from 1 in every process), filled with
    # other rewards.
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import tensorflow as tf
        from dopamine_per.replay_memory import circular_replay_buffer as crb
        from dopamine_per.replay_memory.graph import native_ops
        tf.compat.v1.disable_eager_execution()
        native_ops.load()
        graph_file, target, memory_id = sys.argv[1], sys.argv[2], int(
            sys.argv[3])
        memories = []
        while True:
          memory = crb.OutOfGraphReplayBuffer((2,), 1, 16, 4,
                                              observation_dtype=np.float32)
          for step in range(10):
            memory.add(np.zeros(2, np.float32), 0, 100.0, False)
          memories.append(memory)
          if memory.native_memory().id >= memory_id:
            break
        graph_def = tf.compat.v1.GraphDef()
        with open(graph_file, 'rb') as f:
          graph_def.ParseFromString(f.read())
        with tf.Graph().as_default():
          indices, = tf.compat.v1.import_graph_def(
              graph_def, return_elements=[target], name='')
          with tf.compat.v1.Session() as session:
            try:
              session.run(indices)
            except tf.errors.InvalidArgumentError as e:
              print('refused:', e.message.split('dopamine_per replay memory'
                                                )[1].split(':')[0])
            else:
              print('sampled a memory of this process')
        """)
    result = subprocess.run(
        [sys.executable, '-c', script, graph_file, target, str(memory_id)],
        capture_output=True, text=True, timeout=240,
        env=fixtures.subprocess_env(), check=False)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertEqual(
        result.stdout.strip(),
        'refused:  {} of this op is not in this process'.format(memory_id))


class SeedTest(parameterized.TestCase):
  """Binding a memory without `rng` draws from no global generator, and
  seeds the ops' generator as the global generators were seeded."""

  def test_binding_does_not_draw_from_pythons_random(self):
    memory = crb.OutOfGraphReplayBuffer((2,), 1, 16, 4)
    state = random.getstate(), np.random.get_state()[1].tolist()
    memory.native_memory()
    self.assertEqual((random.getstate(), np.random.get_state()[1].tolist()),
                     state)

  def test_a_seeded_run_draws_the_same_stream_again(self):
    # As the Runner seeds a run (random.seed, np.random.seed): the ops'
    # generator of a memory without rng starts where it did in a run
    # seeded alike, and elsewhere in a run seeded otherwise.
    code = textwrap.dedent("""
        import random, sys
        import numpy as np
        random.seed(int(sys.argv[1]))
        np.random.seed(int(sys.argv[1]))
        from dopamine_per.replay_memory import circular_replay_buffer as crb
        memory = crb.OutOfGraphReplayBuffer((2,), 1, 16, 4)
        memory.native_memory()
        print(memory.native.sampler_state())
        """)
    states = [subprocess.run([sys.executable, '-c', code, str(seed)],
                             check=True, capture_output=True, text=True,
                             timeout=120).stdout for seed in (3, 3, 4)]
    self.assertTrue(states[0].strip())
    self.assertEqual(states[0], states[1])
    self.assertNotEqual(states[0], states[2])

  def test_the_stream_does_not_depend_on_memories_made_before(self):
    def seeded_state(made_before):
      for _ in range(made_before):
        crb.OutOfGraphReplayBuffer((2,), 1, 16, 4).native_memory()
        random.random()
      random.seed(5)
      np.random.seed(5)
      memory = crb.OutOfGraphReplayBuffer((2,), 1, 16, 4)
      return memory.native_memory().sampler_state()

    self.assertEqual(seeded_state(0), seeded_state(3))
    self.assertEqual(seeded_state(0), seeded_state(0))


class ReplacedTreeTest(graph_util.GraphTestCase):
  """A sum tree assigned after the ops were built is the one they read."""

  def test_the_graph_reads_the_new_tree(self):
    replay = _wrapped()
    _fill(replay.memory)
    indices = tf.constant([1, 2], tf.int32)
    read = replay.tf_get_priority(indices)
    tree = sum_tree.SumTree(16)
    tree.set(np.arange(10), np.full(10, 7.0))
    replay.memory.sum_tree = tree
    np.testing.assert_array_equal(self.session.run(read), [7.0, 7.0])
    self.session.run(replay.tf_set_priority(indices, tf.constant([2.5, 3.0])))
    np.testing.assert_array_equal(tree.get(np.array([1, 2])), [2.5, 3.0])

  def test_a_tree_of_another_capacity_is_refused(self):
    memory = _prioritized()
    tree = memory.sum_tree
    with self.assertRaisesRegex(ValueError, 'SumTree of capacity 16'):
      memory.sum_tree = sum_tree.SumTree(8)
    self.assertIs(memory.sum_tree, tree)


class ResumedSamplerTest(graph_util.GraphTestCase):
  """A resumed run's graph samples continue the saved run's stream."""

  def _replay(self, rng):
    return _wrapped(replay_capacity=64, batch_size=8, rng=rng)

  @parameterized.parameters(None, 7)
  def test_resumed_graph_samples_are_the_uninterrupted_ones(self, seed):
    rng = lambda: None if seed is None else np.random.default_rng(seed)
    first = self._replay(rng())
    _fill(first.memory, 40)
    for _ in range(3):
      self.session.run(first.indices)
    directory = fixtures.temp_dir(self)
    first.save(directory, 0)
    uninterrupted = [self.session.run(first.indices).tolist()
                     for _ in range(4)]
    resumed = self._replay(rng())  # Its ops are built (bound) before load.
    resumed.load(directory, 0)
    self.assertEqual([self.session.run(resumed.indices).tolist()
                      for _ in range(4)], uninterrupted)
    # Bound only after the load (its ops built later): the same.
    memory = _prioritized(0, replay_capacity=64, batch_size=8, rng=rng())
    memory.load(directory, 0)
    later = prb.WrappedPrioritizedReplayBuffer(
        observation_shape=(2,), stack_size=1, wrapped_memory=memory,
        replay_capacity=64, batch_size=8)
    self.assertEqual([self.session.run(later.indices).tolist()
                      for _ in range(4)], uninterrupted)

  @parameterized.parameters('', '1 2 3', 'x' * 7000, 5,
                            ' '.join(['1'] * 312 + ['313']), 'GOOD\0 7')
  def test_a_bad_sampler_state_refuses_the_checkpoint(self, state):
    replay = self._replay(None)
    _fill(replay.memory, 20)
    if isinstance(state, str):  # A good state with junk after a NUL.
      state = state.replace('GOOD', replay.memory.native.sampler_state())
    directory = fixtures.temp_dir(self)
    replay.save(directory, 0)
    with mock.patch.object(native_memory.NativeMemory, 'sampler_state',
                           return_value=state):
      replay.save(directory, 1)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                'sampler_state'):
      replay.load(directory, 1)
    replay.load(directory, 0)  # The good one loads.


class CapacityTest(parameterized.TestCase):
  """Capacities whose slots int32 indices cannot hold are refused."""

  @parameterized.parameters(crb.OutOfGraphReplayBuffer,
                            prb.OutOfGraphPrioritizedReplayBuffer)
  def test_capacity_past_int32_is_refused_before_allocating(self, cls):
    with self.assertRaisesRegex(ValueError,
                                r'replay_capacity must be <= 2147483647, got '
                                r'2147483648'):
      cls((2,), 1, 2**31, 4)

  def test_the_largest_capacity_is_accepted(self):
    # Lazily backed storage: nothing of 2**31 - 1 slots is touched yet.
    memory = crb.OutOfGraphReplayBuffer((), 1, 2**31 - 1, 4,
                                        observation_dtype=np.uint8)
    self.assertEqual(memory.replay_capacity, 2**31 - 1)


def _rewrite_in_fortran_order(directory, name, suffix):
  """Rewrites a storage file as a valid Fortran-order `.npy`, same values.

  Its digest is recorded in the dopamine_per state file, as a save that
  wrote it would have: only what the file holds can tell it apart.
  """
  stored = memory_checkpoint.STORE_FILENAME_PREFIX + name
  path = gzip_files.checkpoint_filename(directory, stored, suffix)
  array = np.asfortranarray(gzip_files.load_npy_gz(path))
  assert not array.flags.c_contiguous, 'np.save would write C order'
  digest = gzip_files.save_npy_gz(path, array)
  state_path = gzip_files.checkpoint_filename(
      directory, memory_checkpoint.DOPAMINE_PER_STATE_NAME, suffix)
  state = gzip_files.load_pickle_gz(state_path)
  state['files'][stored] = tuple(digest)
  gzip_files.save_pickle_gz(state_path, state)


class LoadBothFacesTest(graph_util.GraphTestCase):
  """A load is all or nothing for Python and the graph's native ops alike.

  A valid Fortran-order `.npy` was installed, then refused by the ops'
  re-registration: Python sampled the new data and the graph the old.
  """

  _CONFIG = dict(observation_shape=(2,), stack_size=1, replay_capacity=16,
                 batch_size=4, observation_dtype=np.float32, rng=7,
                 extra_storage_types=[ReplayElement('weight', (3,),
                                                    np.float32)])

  def _replay(self, prioritized, first_reward):
    """A Wrapped memory bound to the native ops, 10 adds of its own data."""
    cls = (prb.WrappedPrioritizedReplayBuffer if prioritized else
           crb.WrappedReplayBuffer)
    replay = cls(use_native_ops=True, **self._CONFIG)
    # Registered with the ops (no fallback to tf.numpy_function).
    self.assertIsNotNone(replay.memory.native_memory())
    for step in range(10):
      value = first_reward + step
      replay.memory.add(
          np.full((2,), value, np.float32), step % 3, float(value), False,
          np.full((3,), value, np.float32),
          priority=float(1 + step % 4) if prioritized else None)
    return replay

  def _assert_faces_agree(self, replay, rewards):
    """Graph batches are Python's at their indices, with rewards in
    `rewards` (whose data each face samples)."""
    memory = replay.memory
    names = [e.name for e in memory.get_transition_elements()]
    for _ in range(5):
      graph = self.session.run(replay.transition)
      python = dict(zip(names, memory.sample_transition_batch(
          indices=graph['indices'])))
      for name in names:
        np.testing.assert_array_equal(graph[name], python[name],
                                      err_msg=name)
      self.assertContainsSubset(set(graph['reward'].tolist()), set(rewards))

  def _checkpoint(self, prioritized, fortran_order):
    """A checkpoint of rewards 0..9, its 2-D arrays in Fortran order if
    `fortran_order`."""
    directory = fixtures.temp_dir(self)
    self._replay(prioritized, 0).memory.save(directory, 1)
    for name in ('observation', 'weight') if fortran_order else ():
      _rewrite_in_fortran_order(directory, name, 1)
    return directory

  @parameterized.parameters(True, False)
  def test_fortran_order_arrays_load_for_both_faces(self, prioritized):
    directory = self._checkpoint(prioritized, fortran_order=True)
    replay = self._replay(prioritized, 100)
    self._assert_faces_agree(replay, range(100, 110))
    replay.memory.load(directory, 1)  # Was an UnsupportedMemoryError.
    self._assert_faces_agree(replay, range(10))
    reference = self._replay(prioritized, 0).memory  # What was saved.
    indices = np.arange(9)
    for got, want in zip(
        replay.memory.sample_transition_batch(indices=indices),
        reference.sample_transition_batch(indices=indices)):
      np.testing.assert_array_equal(got, want)

  @parameterized.parameters(
      (True, RuntimeError('injected'), atomic_files.CheckpointError,
       'the native ops cannot take the loaded arrays .RuntimeError: '
       'injected.; the memory is as it was before the load'),
      (False, RuntimeError('injected'), atomic_files.CheckpointError, ''),
      (True, KeyboardInterrupt(), KeyboardInterrupt, ''))
  def test_a_failed_rebind_leaves_both_faces_as_they_were(
      self, prioritized, error, raised, message):
    directory = self._checkpoint(prioritized, fortran_order=False)
    replay = self._replay(prioritized, 100)
    memory = replay.memory
    self._assert_faces_agree(replay, range(100, 110))
    arrays = dict(memory.storage.arrays)
    before = replay_cases.snapshot(memory)
    total = memory.sum_tree.total_priority() if prioritized else None
    with mock.patch.object(native_memory.NativeMemory, 'bind',
                           side_effect=error):
      with self.assertRaisesRegex(raised, message):
        memory.load(directory, 1)
    replay_cases.assert_same_snapshot(self, before,
                                      replay_cases.snapshot(memory))
    for name, array in arrays.items():  # What the ops still read.
      self.assertIs(memory.storage.arrays[name], array, name)
    if prioritized:
      self.assertEqual(memory.sum_tree.total_priority(), total)
      memory.sum_tree.check_invariants()
    self._assert_faces_agree(replay, range(100, 110))
    # Adds go on where they were, for both faces.
    memory.add(np.full((2,), 110, np.float32), 0, 110.0, False,
               np.full((3,), 110, np.float32),
               priority=1.0 if prioritized else None)
    self.assertEqual(memory.add_count, 11)
    self._assert_faces_agree(replay, range(100, 111))


# float32's largest value as NumPy prints it and the docs state it: a float64
# a little above that value, 3.4028234663852886e38, to which it rounds.
_LARGEST = 3.4028235e38


def _wrapping(memory, use_native_ops=True):
  replay = _wrapped(wrapped_memory=memory, use_native_ops=use_native_ops)
  assert (replay.transition['indices'].op.type ==
          ('DopaminePerSampleTransitions' if use_native_ops else
           'PyFunc')), replay.transition['indices'].op.type
  return replay


def _python_error(memory, priorities):
  """The message of set_priority's ValueError for slots 1, 2, 3."""
  try:
    memory.set_priority(np.array([1, 2, 3]), priorities)
  except ValueError as e:
    return str(e)
  raise AssertionError('set_priority took {!r}'.format(priorities))


class PriorityErrorTextTest(graph_util.GraphTestCase):
  """A bad priority raises set_priority's message on every path."""

  # The native op wrote its own text ('0 or in [1.4013e-45, 3.40282e+38].
  # Got -1 (priorities[1]); nothing was written'), and took 1e-310, a
  # float64 subnormal, for 0 and wrote it: TensorFlow runs kernels with
  # subnormals flushed. The negative values try each form of Python's repr.
  @parameterized.parameters(
      *[(True, np.float64, value) for value in (
          float('nan'), float('inf'), -float('inf'), 1e39, 1e-300, 1e-310,
          5e-324, 1e-46, np.nextafter(_LARGEST, np.inf), -1.0, -0.1, -1 / 3,
          -1234.5678, -0.0001, -1e-05, -1e15, -1e16, -2.5e-200)],
      *[(True, np.float32, value) for value in np.float32([-0.5, 'inf',
                                                           'nan'])],
      *[(False, np.float64, value) for value in (-1.0, float('nan'), 1e39)])
  def test_each_op_raises_the_memorys_message(self, native, dtype, value):
    memory = _prioritized()
    replay = _wrapping(memory, use_native_ops=native)
    priorities = np.array([5.0, value, 1.0], dtype)
    text = _python_error(memory, priorities)
    update = replay.tf_set_priority(tf.constant([1, 2, 3]),
                                    tf.constant(priorities))
    self.assertEqual(update.type == 'DopaminePerSetPriority', native)
    before = memory.get_priority(np.arange(16))
    with self.assertRaises(tf.errors.InvalidArgumentError) as raised:
      self.session.run(update)
    # A line of TensorFlow's message is the memory's (tf.numpy_function's
    # after the exception's type).
    self.assertIn(text if native else 'ValueError: ' + text,
                  raised.exception.message.split('\n'))
    np.testing.assert_array_equal(memory.get_priority(np.arange(16)), before)


class LargestPriorityTest(graph_util.GraphTestCase):
  """3.4028235e38, the largest priority the docs state, is accepted."""

  # A Python float or a float64 of it was refused (it is above float32's
  # largest value, 3.4028234663852886e38); a float32 of it was taken.
  @parameterized.product(kernels=['numpy', 'native'],
                         kind=[float, np.float64, np.float32])
  def test_set_priority_and_add_take_it(self, kernels, kind):
    memory = _prioritized(kernels=kernels)
    value = kind(_LARGEST)
    memory.set_priority(np.array([1, 2]), value)
    memory.set_priority(np.array([3]), np.array([value]))
    memory.add(np.zeros(2, np.float32), 0, 0.0, False, priority=value)
    memory.sum_tree.max_recorded_priority = value
    np.testing.assert_array_equal(memory.get_priority(np.array([1, 2, 3, 10])),
                                  np.full(4, np.finfo(np.float32).max))
    memory.sum_tree.check_invariants()

  @parameterized.parameters(tf.float32, tf.float64)
  def test_the_native_op_takes_it(self, dtype):
    memory = _prioritized()
    replay = _wrapping(memory)
    slots = tf.constant([1, 2])
    self.session.run(replay.tf_set_priority(
        slots, tf.constant([_LARGEST, 1.0], dtype)))
    np.testing.assert_array_equal(self.session.run(replay.tf_get_priority(
        slots)), [np.finfo(np.float32).max, 1.0])
    memory.sum_tree.check_invariants()

  def test_the_next_float64_is_refused_on_every_path(self):
    memory = _prioritized()
    too_large = np.nextafter(_LARGEST, np.inf)
    text = _python_error(memory, too_large)
    self.assertIn('3.4028235e+38] (the positive range of float32). Got '
                  '3.4028235000000003e+38', text)
    with self.assertRaisesRegex(ValueError, 'priority should be'):
      memory.add(np.zeros(2, np.float32), 0, 0.0, False, too_large)
    # The native op: PriorityErrorTextTest, whose values include it.

  def test_a_tree_of_them_sums_and_samples(self):
    # The float64 total of 16 such leaves, about 5.4e39, is far from
    # overflowing: the overflow check (for float64 trees) never fires here.
    memory = _prioritized(20)
    replay = _wrapping(memory)
    self.session.run(replay.tf_set_priority(
        tf.range(16), tf.fill([16], tf.constant(_LARGEST, tf.float64))))
    self.assertAlmostEqual(memory.sum_tree.total_priority() / _LARGEST, 16.0,
                           places=12)
    memory.sum_tree.check_invariants()
    batch = self.session.run(replay.transition)
    np.testing.assert_array_equal(batch['sampling_probabilities'],
                                  np.full(4, np.finfo(np.float32).max))


class SubnormalPriorityTest(graph_util.GraphTestCase):
  """Priorities below float32's smallest normal keep their value."""

  # In (2**-149, 2**-126) they are valid, but TensorFlow runs kernels with
  # subnormals flushed to 0: the native op wrote a float32 one as 0, and
  # tf_get_priority and sampling_probabilities read any as 0.
  _TINY = np.array([5, 2**22, 1], np.float32) * np.finfo(
      np.float32).smallest_subnormal

  @parameterized.parameters(tf.float32, tf.float64)
  def test_the_native_ops_keep_them(self, dtype):
    memory = _prioritized()
    replay = _wrapping(memory)
    slots = np.array([1, 2, 3])
    memory.set_priority(np.arange(16), 0.0)  # Only these can be sampled.
    self.session.run(replay.tf_set_priority(
        tf.constant(slots), tf.constant(self._TINY, dtype)))
    np.testing.assert_array_equal(memory.get_priority(slots), self._TINY)
    np.testing.assert_array_equal(
        self.session.run(replay.tf_get_priority(tf.constant(slots))),
        self._TINY)
    batch = self.session.run(replay.transition)
    np.testing.assert_array_equal(batch['sampling_probabilities'],
                                  memory.get_priority(batch['indices']))
    self.assertTrue(np.all(batch['sampling_probabilities'] > 0))

  def test_the_py_func_fallback_reads_them_as_0(self):
    # As docs/compat.md says: its NumPy code runs on TensorFlow's threads,
    # with subnormals flushed.
    memory = _prioritized()
    replay = _wrapping(memory, use_native_ops=False)
    self.session.run(replay.tf_set_priority(tf.constant([1]),
                                            tf.constant(self._TINY[:1])))
    self.assertEqual(memory.get_priority(np.array([1]))[0], 0.0)
    memory.set_priority(np.array([2]), self._TINY[:1])  # Out of the graph.
    self.assertEqual(memory.get_priority(np.array([2]))[0], self._TINY[0])
    self.assertEqual(
        self.session.run(replay.tf_get_priority(tf.constant([2])))[0], 0.0)

if __name__ == '__main__':
  tf.compat.v1.disable_eager_execution()
  parameterized.absltest.main()
