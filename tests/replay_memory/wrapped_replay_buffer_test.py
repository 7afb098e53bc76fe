"""Tests for the TensorFlow wrappers of the replay memories.

Graph mode (tf.compat.v1 sessions, as Dopamine's TF agents run), and eager
mode for `as_dataset`. Each graph-mode test class runs on the native ops
and, as its `...PyFuncTest` twin, on the `tf.numpy_function` ops: both must
behave alike, but for op names and types and error classes.
"""

import gc
import json
import subprocess
import sys
import threading

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from dopamine_per import errors
from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer
from tests.support import fixtures
from tests.support import graph_util

ReplayElement = circular_replay_buffer.ReplayElement

_NAMES = ['state', 'action', 'reward', 'next_state', 'next_action',
          'next_reward', 'terminal', 'indices']


def _fill(replay, count, seed=0, episode=25):
  """Adds `count` transitions whose observations encode their number."""
  rng = np.random.default_rng(seed)
  for i in range(count):
    observation = np.full((3, 3), i % 250, dtype=np.uint8)
    args = [observation, int(rng.integers(4)), float(rng.random()),
            int(i % episode == episode - 1)]
    if isinstance(replay.memory,
                  prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer):
      args.append(1.0)
    replay.add(*args)


def _assert_is_memorys_batch(memory, batch):
  """Asserts that `batch` (name -> array) is `memory`'s at its indices."""
  expected = memory.sample_transition_batch(indices=batch['indices'])
  for element, value in zip(memory.get_transition_elements(), expected):
    np.testing.assert_array_equal(batch[element.name], value,
                                  err_msg=element.name)


class GraphTestCase(graph_util.GraphTestCase):
  """A graph and session per test, and a wrapper factory (sampling through
  the native ops, or the `tf.numpy_function` ops if not use_native_ops)."""


  use_native_ops = True

  def wrapper(self, prioritized=True, **kwargs):
    config = dict(observation_shape=(3, 3), stack_size=2,
                  replay_capacity=100, batch_size=8, update_horizon=2,
                  use_native_ops=self.use_native_ops)
    config.update(kwargs)
    cls = (prioritized_replay_buffer.WrappedPrioritizedReplayBuffer
           if prioritized else circular_replay_buffer.WrappedReplayBuffer)
    return cls(**config)


class ConstructorTest(GraphTestCase):

  @parameterized.parameters(
      (dict(update_horizon=0), 'Update horizon must be positive'),
      (dict(replay_capacity=3, update_horizon=3),
       r'Update horizon \(3\) should be significantly smaller than replay '
       r'capacity \(3\)'),
  )
  def test_invalid_arguments(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      self.wrapper(**kwargs)

  @parameterized.parameters(-1, -0.1, 1.5, 2)
  def test_gamma_out_of_range_says_what_dopamine_says(self, gamma):
    # Dopamine's testConstructorWithOutOfBoundsDiscountFactor matches this
    # message; ours goes on to name the value.
    with self.assertRaisesRegex(
        ValueError, r'^Discount factor \(gamma\) must be in \[0, 1\]\. .*'
        r'got {}\b'.format(gamma)):
      self.wrapper(gamma=gamma)

  @parameterized.product(prioritized=[True, False],
                         gamma=[True, np.True_, np.array([0.5]), '0.9',
                                float('nan'), float('inf')])
  def test_gamma_is_checked_by_the_memory(self, prioritized, gamma):
    # Dopamine's range check lets these through; the memory refuses them
    # (issue 22), naming gamma.
    with self.assertRaisesRegex(errors.ArgumentError,
                                r'gamma must be a real number in \[0, 1\]'):
      self.wrapper(prioritized=prioritized, gamma=gamma)

  @parameterized.parameters(True, False)
  def test_every_argument_reaches_the_memory(self, prioritized):
    extra = [ReplayElement('log_prob', (2,), np.float16)]
    replay = self.wrapper(
        prioritized=prioritized, observation_shape=(5,), stack_size=3,
        replay_capacity=77, batch_size=6, update_horizon=4, gamma=0.5,
        max_sample_attempts=9, extra_storage_types=extra,
        observation_dtype=np.float32, terminal_dtype=np.bool_,
        action_shape=(2,), action_dtype=np.float64, reward_shape=(3,),
        reward_dtype=np.float64, checkpoint_duration=7, keep_every=3, rng=5)
    memory = replay.memory
    self.assertEqual(replay.batch_size, 6)
    self.assertEqual(
        [(e.name, tuple(e.shape), np.dtype(e.type))
         for e in memory.get_storage_signature()],
        [('observation', (5,), np.float32), ('action', (2,), np.float64),
         ('reward', (3,), np.float64), ('terminal', (), np.bool_),
         ('log_prob', (2,), np.float16)])
    self.assertEqual(
        (memory._stack_size, memory._replay_capacity, memory._batch_size,
         memory._update_horizon, memory._gamma, memory._max_sample_attempts,
         memory._checkpoint_duration, memory._keep_every),
        (3, 77, 6, 4, 0.5, 9, 7, 3))
    self.assertIsNotNone(memory._rng)

  def test_wrapped_memory_is_used(self):
    memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
        (3, 3), 2, 50, 4)
    replay = self.wrapper(wrapped_memory=memory)
    self.assertIs(replay.memory, memory)
    self.assertEqual(replay.transition['state'].shape.as_list(),
                     [4, 3, 3, 2])

  def test_nothing_is_built_at_import(self):
    code = ('import tensorflow as tf\n'
            'from dopamine_per.replay_memory import prioritized_replay_buffer\n'
            'g = tf.compat.v1.get_default_graph()\n'
            'print(len(g.get_operations()))\n')
    output = subprocess.run([sys.executable, '-c', code], check=True,
                            capture_output=True, text=True,
                            cwd=fixtures.REPO_ROOT)
    self.assertEqual(output.stdout.strip(), '0')


class SamplingOpsTest(GraphTestCase):

  @parameterized.parameters(True, False)
  def test_shapes_dtypes_and_names(self, prioritized):
    extra = [ReplayElement('extra', (2,), np.int16)]
    replay = self.wrapper(prioritized=prioritized, extra_storage_types=extra)
    expected = _NAMES + ['extra'] + (['sampling_probabilities']
                                     if prioritized else [])
    self.assertEqual(list(replay.transition), expected)
    for element in replay.memory.get_transition_elements():
      tensor = replay.transition[element.name]
      self.assertEqual(tensor.shape.as_list(), list(element.shape))
      self.assertEqual(tensor.dtype, tf.as_dtype(element.type))
      self.assertEqual(tensor.device, '/device:CPU:*')
    self.assertIs(replay.states, replay.transition['state'])
    self.assertIs(replay.next_rewards, replay.transition['next_reward'])
    self.assertIs(replay.indices, replay.transition['indices'])
    op = replay.transition['state'].op
    self.assertTrue(all(tensor.op is op
                        for tensor in replay.transition.values()))
    if self.use_native_ops:
      self.assertEqual(op.name, 'sample_replay/replay_sample')
      self.assertEqual(op.type, 'DopaminePerSampleTransitions')
    else:
      self.assertIn('replay_sample_py_func', op.name)
      self.assertEqual(op.type, 'PyFunc')  # Stateful: sampled every run.

  @parameterized.parameters(True, False)
  def test_each_run_samples_a_fresh_batch(self, prioritized):
    replay = self.wrapper(prioritized=prioritized, batch_size=32)
    _fill(replay, 90)
    batches = [self.session.run(replay.indices) for _ in range(3)]
    self.assertFalse(np.array_equal(batches[0], batches[1]))
    self.assertFalse(np.array_equal(batches[1], batches[2]))

  @parameterized.product(prioritized=[True, False], staging=[True, False])
  def test_one_run_is_one_consistent_batch(self, prioritized, staging):
    replay = self.wrapper(prioritized=prioritized, use_staging=staging)
    _fill(replay, 90)
    types = {op.type for op in self.graph.get_operations()}
    # Staged, the native op also hands a ticket to the op awaiting the
    # states it leaves to decode (native/deferred_states.h).
    self.assertEqual(('DopaminePerSampleTransitions' in types,
                      'PyFunc' in types),
                     (self.use_native_ops, not self.use_native_ops))
    self.assertEqual('DopaminePerAwaitStates' in types,
                     self.use_native_ops and staging)
    for _ in range(3):
      batch = self.session.run(replay.transition)
      _assert_is_memorys_batch(replay.memory, batch)

  @parameterized.parameters(
      # The memory's RuntimeError is an UnknownError through the py_func;
      # the native op says what it is.
      (1, 1.0, tf.errors.UnknownError,
       r'Cannot sample a batch with fewer than stack size \(2\) \+ '
       r'update_horizon \(2\) transitions'),
      (20, 0.0, tf.errors.InvalidArgumentError,
       'Cannot sample from an empty sum tree'))
  def test_sampling_error_surfaces_as_tf_error(self, adds, priority,
                                               py_func_error, message):
    replay = self.wrapper()
    _fill(replay, adds)
    replay.memory.set_priority(np.arange(100), priority)
    error = (tf.errors.FailedPreconditionError if self.use_native_ops else
             py_func_error)
    with self.assertRaisesRegex(error, message):
      self.session.run(replay.indices)

  @parameterized.parameters(True, False)
  def test_batches_larger_than_the_capacity(self, prioritized):
    replay = self.wrapper(prioritized=prioritized, replay_capacity=10,
                          batch_size=16)
    _fill(replay, 40)
    if not self.use_native_ops:
      # As in Dopamine, a batch may hold a transition more than once.
      _assert_is_memorys_batch(replay.memory,
                               self.session.run(replay.transition))
      return
    # The native op refuses them (a batch repeating transitions is a
    # configuration error), before drawing anything.
    with self.assertRaisesRegex(
        tf.errors.InvalidArgumentError,
        "batch_size 16 exceeds the replay memory's capacity 10"):
      self.session.run(replay.transition)

  def test_the_graph_keeps_the_memory_alive(self):
    # As a py_func holds its memory while its graph lives, so do the native
    # ops: a graph that outlives its wrapper still samples and sets
    # priorities.
    replay = self.wrapper()
    _fill(replay, 40)
    indices = replay.indices
    update = replay.tf_set_priority(indices, tf.ones([8]) * 0.5)
    del replay
    gc.collect()
    self.session.run(update)
    self.assertEqual(self.session.run(indices).shape, (8,))


class StagingTest(GraphTestCase):

  def test_runs_return_the_batch_staged_by_the_previous_run(self):
    replay = self.wrapper(use_staging=True, batch_size=16)
    _fill(replay, 90)
    self.session.run(replay.indices)  # Samples one batch, stages the next.
    only = self._only_slot_from_now_on(replay)
    staged = self.session.run(replay.indices)
    self.assertFalse(np.all(staged == only))  # Sampled before the change.
    np.testing.assert_array_equal(self.session.run(replay.indices),
                                  np.full(16, only))

  def _only_slot_from_now_on(self, replay, position=10):
    """Makes one valid slot the only one with a priority; returns it."""
    memory = replay.memory
    only = int(np.flatnonzero(memory.is_valid_transition(
        np.arange(memory._replay_capacity)))[position])
    priorities = np.zeros(memory._replay_capacity)
    priorities[only] = 1.0
    memory.set_priority(np.arange(memory._replay_capacity), priorities)
    return only

  def test_a_run_of_the_states_alone_stages_nothing(self):
    replay = self.wrapper(use_staging=True, batch_size=16)
    _fill(replay, 90)
    self.session.run(replay.indices)  # Stages a batch from all slots.
    only = self._only_slot_from_now_on(replay)
    self.session.run(replay.states)  # Takes it; stages nothing.
    # Nothing staged: this run samples its own batch (and stages the next).
    np.testing.assert_array_equal(self.session.run(replay.indices),
                                  np.full(16, only))

  def test_only_the_states_skip_the_wait_for_the_next_batch(self):
    # The networks start on the states at once; everything else waits for
    # the next batch to be staged, so a training step stages it.
    replay = self.wrapper(use_staging=True)

    def ancestors(tensor):
      seen, stack = set(), [tensor.op]
      while stack:
        op = stack.pop()
        if op.name not in seen:
          seen.add(op.name)
          stack.extend(t.op for t in op.inputs)
          stack.extend(op.control_inputs)
      return seen

    for name, tensor in replay.transition.items():
      staged = any(n.endswith('stage_next_batch') for n in ancestors(tensor))
      self.assertEqual(staged, name not in ('state', 'next_state'), name)

  def test_each_session_stages_its_own_batch(self):
    replay = self.wrapper(use_staging=True, batch_size=16)
    _fill(replay, 90)
    other = tf.compat.v1.Session(graph=self.graph)
    self.addCleanup(other.close)
    self.session.run(replay.indices)  # Stages a batch from all slots here.
    only = self._only_slot_from_now_on(replay)
    np.testing.assert_array_equal(other.run(replay.indices),
                                  np.full(16, only))
    self.assertFalse(np.all(self.session.run(replay.indices) == only))

  def test_staging_with_tf1_control_flow(self):
    # Dopamine's scripts call disable_v2_behavior(): the staging cond is then
    # a TF1 cond. A subprocess, since the switch is process-wide.
    code = (
        'import numpy as np, tensorflow as tf\n'
        'tf.compat.v1.disable_v2_behavior()\n'
        'from dopamine_per.replay_memory import prioritized_replay_buffer\n'
        'replay = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(\n'
        '    (3, 3), 2, use_staging=True, replay_capacity=100, batch_size=8,\n'
        '    update_horizon=2, use_native_ops=' + repr(self.use_native_ops) +
        ')\n'
        'types = {op.type for op in\n'
        '         tf.compat.v1.get_default_graph().get_operations()}\n'
        'assert ("DopaminePerSampleTransitions" in types, "PyFunc" in types)'
        ' == (' + repr(self.use_native_ops) + ', not ' +
        repr(self.use_native_ops) + '), types\n'
        'for i in range(90):\n'
        '  replay.add(np.full((3, 3), i, np.uint8), 0, 1.0, int(i % 25 == 24),\n'
        '             1.0)\n'
        'indices = replay.transition["indices"]\n'
        'train = replay.tf_set_priority(\n'
        '    indices, tf.cast(indices, tf.float32) + 0.5)\n'
        'with tf.compat.v1.Session() as sess:\n'
        '  for _ in range(4):\n'
        '    got, _ = sess.run([indices, train])\n'
        '    assert np.array_equal(replay.memory.get_priority(got),\n'
        '                          got + 0.5), got\n'
        '  valid = np.flatnonzero(replay.memory.is_valid_transition(\n'
        '      np.arange(100)))\n'
        '  only = int(valid[3])\n'
        '  priorities = np.zeros(100)\n'
        '  priorities[only] = 1.0\n'
        '  replay.memory.set_priority(np.arange(100), priorities)\n'
        '  staged = sess.run(indices)\n'
        '  fresh = sess.run(indices)\n'
        'print(int(np.all(staged == only)), int(np.all(fresh == only)))\n')
    output = subprocess.run([sys.executable, '-c', code], check=True,
                            capture_output=True, text=True,
                            cwd=fixtures.REPO_ROOT)
    self.assertEqual(output.stdout.split()[-2:], ['0', '1'])

  def test_graph_reads_the_frames_of_its_own_indices(self):
    # The next batch is sampled, into reused memory, while the graph still
    # computes on the current one: a run must see its own indices' frames.
    replay = self.wrapper(use_staging=True, batch_size=16)
    _fill(replay, 90)
    sums = tf.reduce_sum(tf.cast(replay.states, tf.int64), axis=[1, 2, 3])
    for _ in range(30):
      got, indices = self.session.run([sums, replay.indices])
      expected = replay.memory.get_observation_stack(indices).astype(
          np.int64).sum(axis=(1, 2, 3))
      np.testing.assert_array_equal(got, expected)

  def test_priority_update_in_the_training_step(self):
    # The usual agent graph: the step consumes a staged batch and writes the
    # priorities of exactly that batch.
    replay = self.wrapper(use_staging=True)
    _fill(replay, 90)
    loss = tf.cast(replay.transition['indices'], tf.float32) + 0.5
    train = replay.tf_set_priority(replay.transition['indices'], loss)
    for _ in range(4):
      indices, _ = self.session.run([replay.indices, train])
      np.testing.assert_array_equal(replay.memory.get_priority(indices),
                                    indices + 0.5)

  def test_load_reaches_the_run_after_the_staged_batch(self):
    # The staged batch lives in the session, out of load's reach (see
    # WrappedReplayBuffer.load): the next run returns it, the one after
    # samples the loaded contents.
    replay = self.wrapper(use_staging=True, batch_size=16)
    _fill(replay, 90)
    checkpoint_dir = fixtures.temp_dir(self)
    only = self._only_slot_from_now_on(replay)
    replay.save(checkpoint_dir, 0)
    replay.memory.set_priority(np.arange(100), 1.0)
    self.session.run(replay.indices)  # Stages a batch from all slots.
    replay.load(checkpoint_dir, 0)
    self.assertFalse(np.all(self.session.run(replay.indices) == only))
    np.testing.assert_array_equal(self.session.run(replay.indices),
                                  np.full(16, only))


class PriorityOpsTest(GraphTestCase):

  def test_set_and_get_priority(self):
    replay = self.wrapper()
    _fill(replay, 20)
    indices = np.arange(2, 9, dtype=np.int32)
    setter = replay.tf_set_priority(indices, np.arange(7.0))
    self.assertIsInstance(setter, tf.Operation)
    self.assertEqual(setter.outputs, [])
    fetched = replay.tf_get_priority(np.flip(indices))
    if self.use_native_ops:
      self.assertEqual(setter.name, 'prioritized_replay_set_priority')
      self.assertEqual(setter.type, 'DopaminePerSetPriority')
      self.assertEqual(fetched.op.name, 'prioritized_replay_get_priority')
      self.assertEqual(fetched.op.type, 'DopaminePerGetPriority')
    else:
      self.assertEqual(setter.name,
                       'prioritized_replay_set_priority_py_func')
      self.assertEqual(setter.type, 'PyFunc')
      self.assertIn('prioritized_replay_get_priority_py_func',
                    fetched.op.name)
      self.assertEqual(fetched.op.type, 'PyFunc')
    self.session.run(setter)
    self.assertEqual(fetched.shape.as_list(), [7])
    self.assertEqual(fetched.dtype, tf.float32)
    np.testing.assert_array_equal(self.session.run(fetched),
                                  np.arange(7.0)[::-1])

  @parameterized.product(
      index_dtype=[tf.int64, tf.int32, tf.int16, tf.uint8],
      priority_dtype=[tf.float32, tf.float64, tf.float16, tf.int32])
  def test_index_and_priority_dtypes(self, index_dtype, priority_dtype):
    # The memory takes any integer indices and any real priorities.
    replay = self.wrapper()
    _fill(replay, 20)
    indices = tf.constant([3, 4], dtype=index_dtype)
    priorities = tf.constant([2, 5], dtype=priority_dtype) / tf.constant(
        4, dtype=priority_dtype) if priority_dtype.is_floating else (
            tf.constant([2, 5], dtype=priority_dtype))
    self.session.run(replay.tf_set_priority(indices, priorities))
    np.testing.assert_array_equal(
        self.session.run(replay.tf_get_priority(indices)),
        [0.5, 1.25] if priority_dtype.is_floating else [2.0, 5.0])

  def test_a_scalar_priority_applies_to_every_index(self):
    replay = self.wrapper()
    _fill(replay, 20)
    indices = tf.constant([[3, 4], [5, 6]])
    self.session.run(replay.tf_set_priority(indices, 0.75))
    np.testing.assert_array_equal(
        self.session.run(replay.tf_get_priority(indices)),
        np.full((2, 2), 0.75))

  @parameterized.parameters(
      ([3, 4], [1.0, float('nan')], 'nan'),
      ([3, 4], [1.0, -2.0], '-2'),
      ([3, 100], [1.0, 1.0], r'\[0, 100\). Got: 100'),
      ([-1, 4], [1.0, 1.0], r'\[0, 100\). Got: -1'),
      ([3, 4, 5], [1.0, 1.0], 'do not match'),
  )
  def test_bad_priority_update_raises_and_writes_nothing(self, indices,
                                                         priorities, message):
    replay = self.wrapper()
    _fill(replay, 20)
    before = replay.memory.get_priority(np.arange(100))
    op = replay.tf_set_priority(tf.constant(indices, tf.int32),
                                tf.constant(priorities, tf.float32))
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message):
      self.session.run(op)
    np.testing.assert_array_equal(replay.memory.get_priority(np.arange(100)),
                                  before)

  def test_bad_index_to_get_raises(self):
    replay = self.wrapper()
    _fill(replay, 20)
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                r'\[0, 100\). Got: 100'):
      self.session.run(replay.tf_get_priority(tf.constant([3, 100])))


class ConcurrencyTest(GraphTestCase):

  def test_sampling_priorities_and_adds_at_once(self):
    replay = self.wrapper(use_staging=True, replay_capacity=64, batch_size=16)
    _fill(replay, 64)
    new_priorities = tf.random.uniform([16], 0.0, 2.0, seed=1)
    update = replay.tf_set_priority(replay.indices, new_priorities)
    probabilities = replay.transition['sampling_probabilities']
    errors = []
    seen = []

    def run(fetch, count):
      try:
        for _ in range(count):
          seen.append(self.session.run(fetch))
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)

    threads = [threading.Thread(target=run, args=(update, 150)),
               threading.Thread(target=run, args=(probabilities, 150)),
               threading.Thread(target=run, args=(replay.indices, 150))]
    for thread in threads:
      thread.start()
    _fill(replay, 300, seed=1)  # The agent keeps adding meanwhile.
    for thread in threads:
      thread.join()
    self.assertEqual(errors, [])
    replay.memory.sum_tree.check_invariants()
    for fetched in seen:
      if fetched is not None and fetched.dtype == np.float32:
        self.assertTrue(np.all(fetched > 0.0))  # Never a zero priority.
    # Every add landed, as in a memory filled without concurrent sampling.
    reference = self.wrapper(replay_capacity=64, batch_size=16)
    _fill(reference, 64)
    _fill(reference, 300, seed=1)
    self.assertEqual(int(replay.memory.add_count),
                     int(reference.memory.add_count))
    for name, array in reference.memory._store.items():
      np.testing.assert_array_equal(replay.memory._store[name], array)


class SamplingOpsPyFuncTest(SamplingOpsTest):
  use_native_ops = False


class StagingPyFuncTest(StagingTest):
  use_native_ops = False


class PriorityOpsPyFuncTest(PriorityOpsTest):
  use_native_ops = False


class ConcurrencyPyFuncTest(ConcurrencyTest):
  use_native_ops = False


class GinTest(absltest.TestCase):

  def test_gin_file_configures_the_wrapper(self):
    # A subprocess, so that no other module's registrations (Dopamine's
    # classes of the same names, imported by other tests) make the short
    # names ambiguous.
    gin_file = fixtures.repo_path('tests', 'replay_memory', 'testdata',
                            'wrapped_prioritized_replay.gin')
    code = (
        'import gin, json, sys\n'
        'from dopamine_per.replay_memory import prioritized_replay_buffer\n'
        'import tensorflow as tf\n'
        'gin.parse_config_file(sys.argv[1])\n'
        'with tf.Graph().as_default():\n'
        '  replay = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(\n'
        '      observation_shape=(4,), stack_size=1)\n'
        '  memory = replay.memory\n'
        '  print(json.dumps([memory._replay_capacity, replay.batch_size,\n'
        '                    memory._batch_size, memory._max_sample_attempts,\n'
        '                    replay._staging_area is not None,\n'
        '                    replay.transition["state"].shape.as_list()]))\n'
        'try:\n'
        '  gin.parse_config("WrappedPrioritizedReplayBuffer.gamma = 0.5")\n'
        'except ValueError as e:\n'
        '  print("denied:", e)\n')
    output = subprocess.run([sys.executable, '-c', code, gin_file],
                            check=True, capture_output=True, text=True,
                            cwd=fixtures.REPO_ROOT)
    lines = output.stdout.strip().splitlines()
    self.assertEqual(json.loads(lines[0]),
                     [5000, 64, 64, 17, True, [64, 4, 1]])
    self.assertRegex(lines[1], 'denied:.*gamma')


class DatasetTest(parameterized.TestCase):
  """The eager TF2 path: batches as a tf.data.Dataset."""

  @parameterized.product(prioritized=[True, False],
                         use_native_ops=[True, False])
  def test_element_spec_and_batches(self, prioritized, use_native_ops):
    cls = (prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer
           if prioritized else circular_replay_buffer.OutOfGraphReplayBuffer)
    memory = cls((3, 3), 2, 100, 8, update_horizon=2)
    for i in range(60):
      args = [np.full((3, 3), i, np.uint8), i % 3, 1.0, int(i % 20 == 19)]
      memory.add(*(args + [None] if prioritized else args))
    dataset = memory.as_dataset(use_native_ops=use_native_ops)
    for element in memory.get_transition_elements():
      spec = dataset.element_spec[element.name]
      self.assertEqual(spec.shape.as_list(), list(element.shape))
      self.assertEqual(spec.dtype, tf.as_dtype(element.type))
    batches = list(dataset.take(3).as_numpy_iterator())
    self.assertLen(batches, 3)
    for batch in batches:
      _assert_is_memorys_batch(memory, batch)
    small = memory.as_dataset(batch_size=5, use_native_ops=use_native_ops)
    self.assertEqual(small.element_spec['state'].shape[0], 5)
    batch = next(iter(small))
    self.assertEqual(batch['state'].shape[0], 5)
    self.assertEqual(batch['indices'].shape, (5,))

  @parameterized.parameters(True, False)
  def test_the_dataset_keeps_the_memory_alive(self, use_native_ops):
    # A dataset outliving every other reference to its memory still samples.
    memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
        (3, 3), 2, 100, 8)
    for i in range(60):
      memory.add(np.full((3, 3), i, np.uint8), 0, 1.0, 0, None)
    dataset = memory.as_dataset(use_native_ops=use_native_ops)
    del memory
    gc.collect()
    self.assertEqual(next(iter(dataset))['indices'].shape, (8,))


if __name__ == '__main__':
  absltest.main()
