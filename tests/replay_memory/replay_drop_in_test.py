"""Dopamine code runs unchanged on our replay memories (issue 11, points 1-4).

Each case is written from Dopamine 4.1.2's documented behaviour and, where
it can be, checked against Dopamine's own memory (installed as dopamine-rl,
`--no-deps`): values with an exact integer value are stored, errors where
Dopamine asserts are AssertionErrors (and ValueErrors), Dopamine's hooks
exist, and every public attribute is checkpointed.
"""

import os
import threading
import warnings

from absl.testing import absltest
from absl.testing import parameterized
from dopamine.tf.replay_memory import circular_replay_buffer as dopamine_crb
from dopamine.tf.replay_memory import prioritized_replay_buffer as dopamine_prb
from dopamine.tf.replay_memory import sum_tree as dopamine_sum_tree
import numpy as np
import tensorflow as tf

from dopamine_per import errors
from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.replay_memory import circular_replay_buffer as crb
from dopamine_per.replay_memory import prioritized_replay_buffer as prb
from dopamine_per.replay_memory import sum_tree
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from tests.support import fixtures
from tests.support import replay_cases

_SHAPE = (3, 3)


def _memory(cls=crb.OutOfGraphReplayBuffer, **kwargs):
  kwargs.setdefault('observation_shape', _SHAPE)
  kwargs.setdefault('stack_size', 2)
  kwargs.setdefault('replay_capacity', 20)
  kwargs.setdefault('batch_size', 4)
  return cls(**kwargs)


class ExactValuesTest(parameterized.TestCase):
  """Point 1: values that convert exactly are stored; others are refused."""

  @parameterized.named_parameters(
      ('float64_zeros', np.zeros(_SHAPE)),
      ('float32_integral', np.arange(9, dtype=np.float32).reshape(_SHAPE)),
      ('float_extremes', np.array([[0.0, 255.0, -0.0]] * 3)),
      ('complex_real', np.full(_SHAPE, 7 + 0j)),
      ('int64', np.full(_SHAPE, 255, np.int64)),
  )
  def test_exact_observations_are_stored_as_dopamine_stores_them(self, frame):
    ours, theirs = _memory(), _memory(dopamine_crb.OutOfGraphReplayBuffer)
    with warnings.catch_warnings():
      warnings.simplefilter('error')  # Ours stores without a warning.
      ours.add(frame, 1.0, 2, 0.0)  # Float action and terminal, int reward.
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')  # Dopamine warns on complex values.
      theirs.add(frame, 1.0, 2, 0.0)
    for name in ('observation', 'action', 'reward', 'terminal'):
      # Dopamine's unwritten slots are uninitialized: compare the two added.
      np.testing.assert_array_equal(ours._store[name][:2],
                                    theirs._store[name][:2], err_msg=name)
      self.assertEqual(ours._store[name].dtype, theirs._store[name].dtype)
    np.testing.assert_array_equal(ours._store['observation'][1],
                                  np.real(frame).astype(np.uint8))

  # More in circular_replay_buffer_test's test_add_rejects_before_writing.
  @parameterized.named_parameters(
      ('negative', np.full(_SHAPE, -1.0), r'holds -1.0'),
      ('inf', np.full(_SHAPE, np.inf), 'holds inf'),
      ('strings', np.full(_SHAPE, '1'), 'has dtype <U1'),
      ('objects', np.full(_SHAPE, None), 'has dtype object'),
  )
  def test_inexact_observation_is_refused_and_nothing_written(self, frame,
                                                              message):
    memory = _memory()
    memory.add(np.ones(_SHAPE, np.uint8), 0, 0.0, False)
    before = replay_cases.snapshot(memory)
    with self.assertRaisesRegex(
        ValueError, r"add\(\): argument 'observation' .*{}".format(message)):
      memory.add(frame, 0, 0.0, False)
    replay_cases.assert_same_snapshot(self, before, replay_cases.snapshot(memory))

  @parameterized.named_parameters(
      ('terminal_float', dict(terminal=1.0), None),
      ('terminal_numpy_float', dict(terminal=np.float64(0.0)), None),
      ('action_float', dict(action=3.0), None),
      ('reward_int_array', dict(reward=np.array(2, np.int64)), None),
      ('terminal_nan', dict(terminal=np.float32(np.nan)), "'terminal' holds"),
      ('action_fraction', dict(action=np.float64(2.5)), "'action' holds 2.5"),
      ('action_huge', dict(action=2.0**31), "'action' = 2147483648.0"),
  )
  def test_scalars(self, overrides, message):
    memory = _memory()
    args = dict(observation=np.zeros(_SHAPE, np.uint8), action=0, reward=0.0,
                terminal=False)
    args.update(overrides)
    if message is None:
      memory.add(**args)
      self.assertEqual(int(memory.add_count), 2)  # Padding, then the add.
      return
    with self.assertRaisesRegex(ValueError, message):
      memory.add(**args)
    self.assertEqual(int(memory.add_count), 0)  # Not even the padding.

  def test_float_into_bool_storage(self):
    memory = _memory(extra_storage_types=[
        crb.ReplayElement('flag', (2,), np.bool_)])
    memory.add(np.zeros(_SHAPE), 0, 0.0, False, np.array([0.0, 1.0]))
    self.assertEqual(memory._store['flag'][1].tolist(), [False, True])
    with self.assertRaisesRegex(ValueError, "'flag' holds 2.0"):
      memory.add(np.zeros(_SHAPE), 0, 0.0, False, np.array([0.0, 2.0]))

  def test_same_dtype_path_is_unchanged(self):
    memory = _memory()
    frame = np.arange(9, dtype=np.uint8).reshape(_SHAPE)
    memory.add(frame, 0, 0.0, False)
    # Stored by value, not by reference, and no conversion was cached.
    frame[0, 0] = 99
    self.assertEqual(memory._store['observation'][1, 0, 0], 0)
    self.assertEqual(memory._add_specs[0].casts, {})


class AssertionCompatibleErrorsTest(parameterized.TestCase):
  """Point 2: where Dopamine asserts, we raise AssertionError + ValueError.

  Each case runs on Dopamine's memory first (to show that it asserts there)
  and then on ours.
  """

  def _filled(self, module, cls_name='OutOfGraphPrioritizedReplayBuffer'):
    memory = getattr(module, cls_name)(
        observation_shape=(2,), stack_size=1, replay_capacity=10,
        batch_size=2)
    for step in range(4):
      memory.add(np.zeros(2, np.uint8), 0, 0.0, step == 3, 1.0)
    return memory

  @parameterized.named_parameters(
      ('observation_shape_int',
       lambda m: m.OutOfGraphReplayBuffer(84, 1, 10, 2)),
      ('invalid_range_cursor', lambda m: m.invalid_range(10, 10, 1, 1)),
  )
  def test_circular_module(self, call):
    with self.assertRaises(AssertionError):
      call(dopamine_crb)
    with self.assertRaises(errors.ArgumentError) as raised:
      call(crb)
    self.assertIsInstance(raised.exception, ValueError)
    self.assertIsInstance(raised.exception, AssertionError)

  @parameterized.named_parameters(
      ('get_range_empty', lambda m: m.get_range(m._store['reward'], 3, 3)),
      ('get_range_reversed', lambda m: m.get_range(m._store['reward'], 3, 1)),
      ('get_range_unwritten', lambda m: m.get_range(m._store['reward'], 0, 8)),
      ('batch_size_mismatch',
       lambda m: m.sample_transition_batch(batch_size=3, indices=[0, 1])),
      ('get_priority_scalar', lambda m: m.get_priority(np.int32(1))),
      ('set_priority_float_indices',
       lambda m: m.set_priority(np.array([1.0]), np.array([1.0]))),
  )
  def test_memory_methods(self, call):
    with self.assertRaises(AssertionError):
      call(self._filled(dopamine_prb))
    memory = self._filled(prb)
    before = replay_cases.snapshot(memory)
    with self.assertRaises(ValueError) as raised:
      call(memory)
    self.assertIsInstance(raised.exception, AssertionError)
    replay_cases.assert_same_snapshot(self, before,
                                      replay_cases.snapshot(memory))

  def test_sum_tree_capacity(self):
    with self.assertRaises(AssertionError):
      dopamine_sum_tree.SumTree(2.5)
    with self.assertRaises(errors.ArgumentError):
      sum_tree.SumTree(2.5)
    with self.assertRaisesRegex(ValueError, 'positive'):
      sum_tree.SumTree(0)  # Dopamine: a ValueError too.


class HooksTest(parameterized.TestCase):
  """Point 3: Dopamine's hooks exist and behave as Dopamine's."""

  @parameterized.parameters(crb.OutOfGraphReplayBuffer,
                            dopamine_crb.OutOfGraphReplayBuffer)
  def test_check_add_types(self, cls):
    memory = _memory(cls)
    memory._check_add_types(np.zeros(_SHAPE, np.uint8), 0, 0.0, 0)
    self.assertEqual(int(memory.add_count), 0)  # Checks only.
    with self.assertRaisesRegex(ValueError, 'Add expects 4 elements'):
      memory._check_add_types(np.zeros(_SHAPE, np.uint8), 0, 0.0)
    with self.assertRaisesRegex(ValueError, 'shape'):
      memory._check_add_types(np.zeros((2, 2), np.uint8), 0, 0.0, 0)
    with self.assertRaisesRegex(ValueError, 'Add expects 4 elements'):
      memory._check_args_length(1, 2, 3)

  def test_check_add_types_of_prioritized_memory_takes_the_priority(self):
    memory = _memory(prb.OutOfGraphPrioritizedReplayBuffer)
    memory._check_add_types(np.zeros(_SHAPE, np.uint8), 0, 0.0, 0, 1.0)
    memory._check_add_types(np.zeros(_SHAPE, np.uint8), 0, 0.0, 0, None)
    with self.assertRaisesRegex(ValueError, 'Add expects 5 elements'):
      memory._check_add_types(np.zeros(_SHAPE, np.uint8), 0, 0.0, 0)
    with self.assertRaisesRegex(ValueError, 'priority'):
      memory._check_add_types(np.zeros(_SHAPE, np.uint8), 0, 0.0, 0, -1.0)

  @parameterized.parameters(crb.OutOfGraphReplayBuffer,
                            prb.OutOfGraphPrioritizedReplayBuffer)
  def test_overridden_check_add_types_runs_before_anything_is_written(
      self, base):

    class NonNegativeRewards(base):

      def _check_add_types(self, *args):
        if args[2] < 0:
          raise ValueError('negative reward {}'.format(args[2]))
        super()._check_add_types(*args)

    memory = _memory(NonNegativeRewards)
    extra = (1.0,) if base is prb.OutOfGraphPrioritizedReplayBuffer else ()
    memory.add(np.zeros(_SHAPE, np.uint8), 0, 1.0, False, *extra)
    before = replay_cases.snapshot(memory)
    with self.assertRaisesRegex(ValueError, 'negative reward -1.0'):
      memory.add(np.zeros(_SHAPE, np.uint8), 0, -1.0, False, *extra)
    replay_cases.assert_same_snapshot(self, before,
                                      replay_cases.snapshot(memory))

  def test_add_count_is_assignable(self):
    ours = _memory(replay_capacity=10, stack_size=1)
    theirs = _memory(dopamine_crb.OutOfGraphReplayBuffer, replay_capacity=10,
                     stack_size=1)
    for memory in (ours, theirs):
      for step in range(10):
        memory.add(np.full(_SHAPE, step, np.uint8), step, 0.0, False)
      memory.add_count = np.array(25)  # As Dopamine's tests do.
      self.assertEqual(memory.cursor(), 5)
      self.assertTrue(memory.is_full())
    ours.add_count = 3
    self.assertEqual(int(ours.add_count), 3)
    self.assertEqual(ours.add_count.dtype, np.int64)
    ours.add(np.full(_SHAPE, 9, np.uint8), 0, 0.0, False)
    self.assertEqual(ours._store['observation'][3, 0, 0], 9)

  @parameterized.named_parameters(
      ('negative', -1), ('float', 2.0), ('bool', True), ('string', '3'),
      ('vector', np.array([1, 2])), ('too_large', 2**64), ('none', None))
  def test_add_count_refuses_bad_values(self, value):
    memory = _memory()
    memory.add_count = 4
    with self.assertRaisesRegex(ValueError, 'add_count must be an integer'):
      memory.add_count = value
    self.assertEqual(int(memory.add_count), 4)

  def test_other_hooks(self):
    memory = _memory(prb.OutOfGraphPrioritizedReplayBuffer)
    arrays = memory._create_batch_arrays(3)
    elements = memory.get_transition_elements(3)
    self.assertEqual([a.shape for a in arrays], [e.shape for e in elements])
    self.assertEqual([a.dtype for a in arrays],
                     [np.dtype(e.type) for e in elements])
    self.assertEqual(memory._generate_filename('/d', 'add_count', 7),
                     os.path.join('/d', 'add_count_ckpt.7.gz'))
    self.assertEqual(
        sorted(memory._return_checkpointable_elements()),
        sorted(['$store$_observation', '$store$_action', '$store$_reward',
                '$store$_terminal', 'add_count', 'invalid_range',
                'episode_end_indices', 'sum_tree']))


class _Counting(prb.OutOfGraphPrioritizedReplayBuffer):
  """A user's subclass with public state of every plain kind."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.visits = np.zeros(self._replay_capacity, np.int32)
    self.episodes = 0
    self.name = 'run'
    self.blob = b''
    self.last = None
    self.enabled = True
    self.history = {'returns': [], 'tags': set(), 'pair': (0, 0.0)}


def _counting(**kwargs):
  return _Counting(observation_shape=_SHAPE, stack_size=2,
                   replay_capacity=20, batch_size=4, **kwargs)


def _fill(memory, steps=12):
  for step in range(steps):
    memory.add(np.full(_SHAPE, step, np.uint8), step % 3, float(step),
               step % 5 == 4, 1.0 + step)


class PublicAttributesTest(parameterized.TestCase):
  """Point 4: public attributes are saved and restored, as in Dopamine."""

  def _changed(self):
    memory = _counting()
    _fill(memory)
    memory.visits[[2, 5]] = [3, 8]
    memory.episodes = 2
    memory.name = 'seed 3'
    memory.blob = b'\x00\xff'
    memory.last = 4.5
    memory.enabled = False
    memory.history['returns'].extend([1.5, 2.5])
    memory.history['tags'].add('warm')
    memory.history['pair'] = (1, np.float32(0.5))
    return memory

  def _assert_same_attributes(self, a, b):
    np.testing.assert_array_equal(a.visits, b.visits)
    self.assertEqual(a.visits.dtype, b.visits.dtype)
    for name in ('episodes', 'name', 'blob', 'last', 'enabled', 'history'):
      self.assertEqual(getattr(a, name), getattr(b, name), name)

  def test_round_trip(self):
    path = fixtures.temp_dir(self)
    saved = self._changed()
    saved.save(path, 3)
    for name in ('visits', 'episodes', 'name', 'blob', 'last', 'enabled',
                 'history'):
      self.assertTrue(os.path.exists(
          os.path.join(path, '{}_ckpt.3.gz'.format(name))), name)
    loaded = _counting()
    loaded.load(path, 3)
    self._assert_same_attributes(saved, loaded)
    replay_cases.assert_same_snapshot(self, replay_cases.snapshot(saved),
                                      replay_cases.snapshot(loaded))

  def test_dopamine_reads_ours_and_we_read_dopamine(self):

    class DopamineCounting(dopamine_prb.OutOfGraphPrioritizedReplayBuffer):

      def __init__(self):
        super().__init__(observation_shape=_SHAPE, stack_size=2,
                         replay_capacity=20, batch_size=4)
        self.visits = np.zeros(20, np.int32)
        self.episodes = 0
        self.history = {}

    path = fixtures.temp_dir(self)
    ours = self._changed()
    ours.save(path, 1)
    theirs = DopamineCounting()
    theirs.load(path, 1)
    np.testing.assert_array_equal(theirs.visits, ours.visits)
    self.assertEqual(theirs.episodes, 2)
    self.assertEqual(theirs.history, ours.history)

    theirs.visits[7] = 11
    theirs.episodes = 5
    theirs.history = {'k': [1, 2]}
    theirs.save(path, 2)
    loaded = _counting()
    for name in ('name', 'blob', 'last', 'enabled'):
      delattr(loaded, name)  # Attributes Dopamine's subclass does not have.
    loaded.load(path, 2)
    self.assertEqual(loaded.visits[7], 11)
    self.assertEqual(loaded.episodes, 5)
    self.assertEqual(loaded.history, {'k': [1, 2]})

  def test_object_attribute_is_refused_and_nothing_written(self):
    path = fixtures.temp_dir(self)
    memory = self._changed()
    memory.save(path, 1)
    before = sorted(os.listdir(path))
    memory.history['lock'] = threading.Lock()
    with self.assertRaisesRegex(
        TypeError, r"attribute 'history' of _Counting holds a "
        r"_thread.lock at \['lock'\]"):
      memory.save(path, 2)
    self.assertEqual(sorted(os.listdir(path)), before)
    self.assertEqual(memory_checkpoint.latest_checkpoint_iteration(path), 1)

  def test_other_non_plain_values_are_refused(self):
    memory = _counting()
    for value in (lambda: 0, object(), np.array([None]), [1, ({2: print},)],
                  np.ma.masked_array([1])):
      memory.last = value
      with self.assertRaisesRegex(TypeError, "attribute 'last'"):
        memory.save(fixtures.temp_dir(self), 1)

  def test_reserved_name_is_refused(self):
    memory = _counting()
    setattr(memory, 'dopamine_per_state', 1)
    with self.assertRaisesRegex(ValueError, "'dopamine_per_state'"):
      memory.save(fixtures.temp_dir(self), 1)
    delattr(memory, 'dopamine_per_state')
    setattr(memory, '../escape', 1)
    path = fixtures.temp_dir(self)
    with self.assertRaisesRegex(ValueError, "'../escape'"):
      memory.save(path, 1)
    self.assertEqual(os.listdir(path), [])

  @parameterized.named_parameters(
      ('missing', os.remove, tf.errors.NotFoundError),
      # Plain data, but not what the state file records.
      ('tampered', lambda path: gzip_files.save_pickle_gz(path, 99),
       atomic_files.CheckpointError))
  def test_bad_attribute_file_is_refused_and_changes_nothing(self, damage,
                                                             error):
    path = fixtures.temp_dir(self)
    self._changed().save(path, 1)
    damage(os.path.join(path, 'episodes_ckpt.1.gz'))
    memory = _counting()
    with self.assertRaises(error):
      memory.load(path, 1)
    self.assertEqual(memory.episodes, 0)
    self.assertEqual(int(memory.add_count), 0)

  def test_attribute_pickle_must_be_plain_data(self):
    path = fixtures.temp_dir(self)
    memory = self._changed()
    memory.save(path, 1)
    # A Dopamine-written checkpoint (no state file) whose attribute is a
    # pickled sum tree: the safe reader builds a stand-in, not plain data.
    os.remove(os.path.join(path, 'dopamine_per_state_ckpt.1.gz'))
    gzip_files.save_dopamine_sum_tree_gz(
        os.path.join(path, 'last_ckpt.1.gz'), memory.sum_tree.get_state())
    fresh = _counting()
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'last_ckpt.1.gz: an attribute must be plain'):
      fresh.load(path, 1)
    self.assertIsNone(fresh.last)

  def test_garbage_collection_removes_attribute_files(self):
    path = fixtures.temp_dir(self)
    memory = _counting(checkpoint_duration=1)
    _fill(memory)
    memory.save(path, 0)
    memory.save(path, 1)
    names = os.listdir(path)
    self.assertIn('visits_ckpt.1.gz', names)
    self.assertNotIn('visits_ckpt.0.gz', names)
    self.assertFalse([n for n in names if n.endswith('.0.gz')])


if __name__ == '__main__':
  absltest.main()
