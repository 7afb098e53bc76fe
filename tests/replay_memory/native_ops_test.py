"""Tests for the native TensorFlow ops on a replay memory (native_ops).

The guarantees tested: docs/reliability.md's native ops sections. The
registration: native_memory_test; under AddressSanitizer:
native_sanitizer_test.
"""

import gc
import gzip
import json
import os
import pickle
import subprocess
import sys
import threading
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from dopamine_per.native import core
from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from dopamine_per.replay_memory.graph import native_ops
from tests.support import fixtures
from tests.support import graph_util
from tests.support import stats_util

ReplayElement = circular_replay_buffer.ReplayElement
Prioritized = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer
Uniform = circular_replay_buffer.OutOfGraphReplayBuffer

_INDICES = 7  # Position of 'indices' in a batch.


def make_memory(prioritized=True, **config):
  """A small memory of float32 CartPole-like observations (by default)."""
  kwargs = dict(observation_shape=(4,), observation_dtype=np.float32,
                stack_size=2, replay_capacity=40, batch_size=8, rng=0)
  kwargs.update(config)
  return (Prioritized if prioritized else Uniform)(**kwargs)


def _random_value(element, rng):
  dtype, shape = np.dtype(element.type), tuple(element.shape)
  if dtype.kind == 'f':
    return rng.standard_normal(shape).astype(dtype)
  if dtype.kind == 'b':
    return rng.random(shape) < 0.5
  return rng.integers(0, 256 if dtype.itemsize == 1 else 1000,
                      shape).astype(dtype)


def fill(memory, count, seed=0, terminal_rate=0.05, end_rate=0.05,
         priorities=(0.0, 0.5, 1.0, 2.5)):
  """Adds `count` random transitions, some terminal, some ending episodes."""
  rng = np.random.default_rng(seed)
  signature = memory.get_storage_signature()
  for _ in range(count):
    values = [_random_value(element, rng) for element in signature]
    values[3] = np.dtype(signature[3].type).type(rng.random() < terminal_rate)
    kwargs = dict(episode_end=bool(rng.random() < end_rate))
    if isinstance(memory, Prioritized):
      kwargs['priority'] = float(rng.choice(priorities))
    memory.add(*values, **kwargs)


def bind(memory):
  native = native_ops.binding(memory, True)
  assert native is not None, 'the native ops are unavailable'
  return native


def valid_slots(memory):
  return np.flatnonzero(memory.is_valid_transition(
      np.arange(memory.replay_capacity)))


def assert_same_batch(test, elements, got, want):
  """Every element of `got` (tensors) has `want`'s dtype, shape and bytes."""
  test.assertLen(got, len(elements))
  test.assertLen(want, len(elements))
  for element, tensor, expected in zip(elements, got, want):
    value = tensor.numpy() if hasattr(tensor, 'numpy') else np.asarray(tensor)
    name = element.name
    test.assertEqual(expected.dtype, np.dtype(element.type), name)
    test.assertEqual(expected.shape, tuple(element.shape), name)
    test.assertEqual((value.dtype, value.shape),
                     (expected.dtype, expected.shape), name)
    if value.tobytes() != expected.tobytes():
      test.fail('{} differs:\n{}\n!=\n{}'.format(name, value, expected))


def tree_state(memory):
  """What a failed op must not change."""
  return (memory.sum_tree._flat.copy(), memory.sum_tree.total_priority(),
          memory.sum_tree.max_recorded_priority, int(memory.add_count))


# name, configuration, adds, fill's keyword arguments.
_LAYOUTS = (
    ('atari', dict(observation_shape=(84, 84), observation_dtype=np.uint8,
                   stack_size=4, update_horizon=3, replay_capacity=120,
                   batch_size=32), 150, {}),
    ('cartpole_stack1', dict(stack_size=1), 30, {}),
    ('cartpole_stack3_n3', dict(stack_size=3, update_horizon=3), 35, {}),
    ('n_step_7', dict(stack_size=1, update_horizon=7, replay_capacity=60),
     55, {}),
    ('episode_ends', dict(stack_size=2, update_horizon=3, replay_capacity=60),
     55, dict(terminal_rate=0.15, end_rate=0.15)),
    ('wrapped', dict(stack_size=4, update_horizon=2, replay_capacity=30), 97,
     {}),
    ('extras', dict(extra_storage_types=[
        ReplayElement('logits', (3,), np.float32),
        ReplayElement('count', (), np.int32)]), 60, {}),
    ('vector_actions', dict(action_shape=(2,), action_dtype=np.float32), 60,
     {}),
    ('uint8_terminals', dict(terminal_dtype=np.uint8, update_horizon=3), 60,
     dict(terminal_rate=0.2)),
    ('bool_terminals', dict(terminal_dtype=np.bool_, update_horizon=3), 60,
     dict(terminal_rate=0.2)),
    ('int32_terminals', dict(terminal_dtype=np.int32, update_horizon=3), 60,
     dict(terminal_rate=0.2)),
)


class SameBatchesTest(parameterized.TestCase):
  """The ops' batches are the NumPy memory's, bit for bit (eagerly)."""

  @parameterized.named_parameters(
      ('{}_{}'.format(name, 'prioritized' if prioritized else 'uniform'),
       config, adds, rates, prioritized)
      for name, config, adds, rates in _LAYOUTS
      for prioritized in (True, False))
  def test_same_batches_as_numpy(self, config, adds, rates, prioritized):
    memory = make_memory(prioritized, **config)
    fill(memory, adds, seed=adds, **rates)
    if adds > memory.replay_capacity:
      self.assertTrue(memory.is_full())  # Stacks cross the wrap.
    native = bind(memory)
    elements = memory.get_transition_elements()
    for _ in range(3):
      batch = native_ops.sample(native, elements)
      indices = batch[_INDICES].numpy()
      self.assertTrue(np.all(memory.is_valid_transition(indices)), indices)
      assert_same_batch(self, elements, batch,
                        memory.sample_transition_batch(indices=indices))
    valid = valid_slots(memory)  # The sampled ones among them.
    every = memory.get_transition_elements(len(valid))
    assert_same_batch(
        self, every,
        native_ops.transitions_at(native, every, tf.constant(valid, tf.int64)),
        memory.sample_transition_batch(indices=valid))

  @parameterized.named_parameters(
      ('no_state', ('state',)), ('no_next_state', ('next_state',)),
      ('no_states', ('state', 'next_state')))
  def test_a_layout_without_states(self, left_out):
    # A subclass's layout may leave states out: the op fills the rest and
    # writes no state (Atari frames: the interleave that fetches ahead).
    memory = make_memory(observation_shape=(84, 84),
                         observation_dtype=np.uint8, stack_size=4,
                         update_horizon=3)
    fill(memory, 60, seed=8)
    native = bind(memory)
    every = memory.get_transition_elements()
    kept = [i for i, e in enumerate(every) if e.name not in left_out]
    elements = [every[i] for i in kept]
    names = [e.name for e in elements]
    for batch in (native_ops.sample(native, elements),
                  native_ops.transitions_at(native, elements,
                                            valid_slots(memory)[:8])):
      indices = batch[names.index('indices')].numpy()
      want = memory.sample_transition_batch(indices=indices)
      assert_same_batch(self, elements, batch, [want[i] for i in kept])


class SamplingDistributionTest(graph_util.GraphTestCase):
  """Graph-mode frequencies: chi-square at p=1e-6 (stats_util), seeded.

  The prioritized memory draws one slot per stratum (less variance than the
  multinomial the test assumes, so the bound is conservative) and redraws
  invalid ones independently: slot i comes up with probability
  p_i / (sum of the valid slots' priorities).
  """

  def test_prioritized_frequencies_follow_the_priorities(self):
    memory = make_memory(True, observation_shape=(1,), stack_size=1,
                         replay_capacity=32, rng=7)
    fill(memory, 40, terminal_rate=0.0, end_rate=0.0)  # Cursor at 8.
    priorities = 1.0 + np.arange(32) % 5
    memory.set_priority(np.arange(32), priorities)
    indices = native_ops.sample(bind(memory),
                                memory.get_transition_elements(32))[_INDICES]
    samples = np.concatenate([self.session.run(indices) for _ in range(800)])
    weights = np.where(memory.is_valid_transition(np.arange(32)), priorities,
                       0.0)
    self.assertEqual(np.count_nonzero(weights == 0), 2)  # 7 and 8: redrawn.
    stats_util.assert_matches_distribution(self, samples, weights)
    # The test has power: the uniform distribution fails it.
    counts = np.bincount(samples, minlength=32)[weights > 0]
    self.assertGreater(
        stats_util.chi_square_statistic(counts, np.full(30, 1 / 30)),
        stats_util.chi_square_threshold(29))

  def test_uniform_frequencies_are_uniform_over_valid_slots(self):
    memory = make_memory(False, observation_shape=(1,), stack_size=2,
                         update_horizon=2, replay_capacity=32, rng=7)
    fill(memory, 45, seed=3, terminal_rate=0.1, end_rate=0.1)
    valid = memory.is_valid_transition(np.arange(32))
    # Some slots in the range drawn from are invalid: they are redrawn.
    self.assertLess(np.count_nonzero(valid), 32 - 2 - 2 + 1)
    indices = native_ops.sample(bind(memory),
                                memory.get_transition_elements(32))[_INDICES]
    samples = np.concatenate([self.session.run(indices) for _ in range(500)])
    stats_util.assert_matches_distribution(self, samples,
                                           valid.astype(np.float64))


class PriorityTest(graph_util.GraphTestCase):
  """Priorities written on one side read back on the other."""

  def setUp(self):
    super().setUp()
    self.memory, self.plain = make_memory(rng=2), make_memory(rng=2)
    for memory in (self.memory, self.plain):
      fill(memory, 30, seed=2)
    self.native = bind(self.memory)

  def assert_same_trees(self):
    slots = np.arange(40)
    np.testing.assert_array_equal(self.memory.get_priority(slots),
                                  self.plain.get_priority(slots))
    self.assertEqual(self.memory.sum_tree.total_priority(),
                     self.plain.sum_tree.total_priority())
    self.assertEqual(self.memory.sum_tree.max_recorded_priority,
                     self.plain.sum_tree.max_recorded_priority)
    self.memory.sum_tree.check_invariants()

  @parameterized.product(index_dtype=[tf.int32, tf.int64],
                         priority_dtype=[tf.float32, tf.float64])
  def test_graph_writes_read_back_in_python(self, index_dtype,
                                            priority_dtype):
    indices = tf.compat.v1.placeholder(index_dtype, [None])
    priorities = tf.compat.v1.placeholder(priority_dtype, [None])
    update = native_ops.set_priority(self.native, indices, priorities)
    writes = [([3, 7, 11], [0.5, 7.25, 0.0]), ([7, 20, 7], [1.5, 2.0, 3.0]),
              (np.arange(40), np.linspace(0.0, 4.0, 40))]
    for slots, values in writes:
      values = np.asarray(values, priority_dtype.as_numpy_dtype)
      self.session.run(update, {indices: slots, priorities: values})
      self.plain.set_priority(np.asarray(slots), values)
      self.assert_same_trees()
    self.assertEqual(self.memory.sum_tree.max_recorded_priority, 7.25)

  def test_python_writes_read_back_in_the_graph(self):
    slots = tf.constant(np.arange(40))
    read = native_ops.get_priority(self.native, slots)
    total = native_ops.total_priority(self.native)
    self.assertEqual((read.dtype, total.dtype), (tf.float32, tf.float64))
    for values in (np.linspace(0.0, 9.0, 40), np.full(40, 0.125)):
      self.memory.set_priority(np.arange(40), values)
      got, got_total = self.session.run([read, total])
      np.testing.assert_array_equal(got,
                                    self.memory.get_priority(np.arange(40)))
      self.assertEqual(got_total, self.memory.sum_tree.total_priority())
    fill(self.memory, 3, seed=9)  # add writes priorities too.
    self.assertEqual(self.session.run(total),
                     self.memory.sum_tree.total_priority())


class ConcurrencyTest(graph_util.GraphTestCase):
  """Python adds while two threads sample and set priorities in a session.

  Each transition encodes its position p in the memory's stream (padding
  included): every observation entry is p + 1 (the padding's are 0), the
  action (p + 1) % 5, the reward p + 1 and the extra 'position' p + 1; with
  gamma 1 every element of a batch row follows from its last frame, so a
  row read while an add or a priority update ran halfway would not add up.
  """

  _CAPACITY, _STACK, _HORIZON, _ACTIONS, _BATCH = 64, 3, 3, 5, 16
  _PRIORITIES = (0.5, 1.0, 2.0, 3.0)

  def _check_rows(self, batches):
    stack, horizon = self._STACK, self._HORIZON
    value = lambda position: np.where(position >= stack - 1, position + 1, 0)
    batch = {name: np.concatenate([b[name] for b in batches])
             for name in batches[0]}
    last = batch['state'][:, 0, -1].astype(np.int64)
    position = last - 1
    np.testing.assert_array_equal(position % self._CAPACITY,
                                  batch['indices'])
    frames = np.arange(1 - stack, 1)
    np.testing.assert_array_equal(
        batch['state'],
        np.broadcast_to(value(position[:, None] + frames)[:, None, :],
                        batch['state'].shape))
    np.testing.assert_array_equal(
        batch['next_state'],
        np.broadcast_to(value(position[:, None] + horizon + frames)[:, None],
                        batch['next_state'].shape))
    np.testing.assert_array_equal(batch['action'], last % self._ACTIONS)
    np.testing.assert_array_equal(batch['position'], last)
    np.testing.assert_array_equal(batch['next_action'],
                                  (last + horizon) % self._ACTIONS)
    np.testing.assert_array_equal(batch['next_reward'], last + horizon)
    np.testing.assert_array_equal(
        batch['reward'], horizon * last + horizon * (horizon - 1) // 2)
    np.testing.assert_array_equal(batch['terminal'], 0)
    self.assertTrue(np.all(np.isin(batch['sampling_probabilities'],
                                   self._PRIORITIES)))

  def test_adds_samples_and_updates_in_parallel(self):
    memory = make_memory(
        observation_shape=(8,), stack_size=self._STACK,
        update_horizon=self._HORIZON, replay_capacity=self._CAPACITY,
        batch_size=self._BATCH, gamma=1.0,
        extra_storage_types=[ReplayElement('position', (), np.int64)])
    native = bind(memory)
    names = [e.name for e in memory.get_transition_elements()]
    added = [0]

    def add():
      value = added[0] + self._STACK  # Its position + 1.
      memory.add(np.full(8, value, np.float32), value % self._ACTIONS,
                 float(value), False, np.int64(value), priority=1.0)
      added[0] += 1

    for _ in range(self._CAPACITY + 5):
      add()
    first = dict(zip(names, native_ops.sample(
        native, memory.get_transition_elements())))
    second = dict(zip(names, native_ops.sample(
        native, memory.get_transition_elements())))
    choice = tf.random.uniform([self._BATCH], 0, 4, tf.int32)
    update = native_ops.set_priority(
        native, second['indices'],
        tf.gather(tf.constant(self._PRIORITIES, tf.float32), choice))
    stop, failures = threading.Event(), []
    sampled = {'first': [], 'second': []}

    def run(fetches, key):
      try:
        while not stop.is_set():
          sampled[key].append(self.session.run(fetches)[0])
      except Exception as e:  # pylint: disable=broad-except
        failures.append(e)

    def python_side():
      rng = np.random.default_rng(0)
      try:
        while not stop.is_set():
          add()
          if added[0] % 16 == 0:
            memory.set_priority(rng.integers(0, self._CAPACITY, 4),
                                rng.choice(self._PRIORITIES, 4))
      except Exception as e:  # pylint: disable=broad-except
        failures.append(e)

    threads = [threading.Thread(target=run, args=([first], 'first')),
               threading.Thread(target=run, args=([second, update],
                                                  'second')),
               threading.Thread(target=python_side)]
    start = added[0]
    for thread in threads:
      thread.start()
    # Until the adds have wrapped the memory and both ops sampled batches
    # meanwhile (or something failed): counted, not timed.
    try:
      fixtures.wait_until(
          lambda: failures or (added[0] - start > 2 * self._CAPACITY and all(
              len(batches) > 20 for batches in sampled.values())),
          message='the threads did not wrap the memory and sample')
    finally:
      stop.set()
    for thread in threads:
      thread.join(fixtures.DEADLINE_S)
    self.assertFalse(any(thread.is_alive() for thread in threads),
                     'a thread is stuck')
    self.assertEqual(failures, [])
    memory.sum_tree.check_invariants()
    self.assertGreater(added[0] - start, self._CAPACITY)  # Wrapped meanwhile.
    for key, batches in sampled.items():
      self.assertGreater(len(batches), 10, key)
      self._check_rows(batches)


class CheckpointTest(absltest.TestCase):

  def test_bound_memory_saves_the_numpy_memorys_files(self):
    config = dict(replay_capacity=30, stack_size=2, update_horizon=2, rng=3)
    bound, plain = make_memory(**config), make_memory(**config)
    for memory in (bound, plain):
      fill(memory, 45, seed=4)
    native = bind(bound)
    slots = np.array([1, 5, 9, 5, 29])
    values = np.array([0.25, 3.0, 0.0, 7.5, 1e-3], np.float32)
    native_ops.set_priority(native, slots, values)
    plain.set_priority(slots, values)
    native_ops.sample(native, bound.get_transition_elements())
    bound_dir, plain_dir = fixtures.temp_dir(self), fixtures.temp_dir(self)
    bound.save(bound_dir, 3)
    plain.save(plain_dir, 3)
    names = sorted(os.listdir(plain_dir))
    self.assertEqual(sorted(os.listdir(bound_dir)), names)
    self.assertIn('sum_tree_ckpt.3.gz', names)
    for name in names:
      contents = []
      for directory in (bound_dir, plain_dir):
        path = os.path.join(directory, name)
        with open(path, 'rb') as f:
          raw = f.read()
        contents.append(gzip.decompress(raw) if name.endswith('.gz') else raw)
      if name.startswith(memory_checkpoint.DOPAMINE_PER_STATE_NAME):
        # dopamine_per's own state: the same, but for the ops' generator.
        bound_state, plain_state = (pickle.loads(c) for c in contents)
        self.assertIsInstance(bound_state.pop('sampler_state'), str)
        self.assertIsNone(plain_state.pop('sampler_state'))
        self.assertEqual(bound_state, plain_state)
        continue
      self.assertEqual(contents[0], contents[1], name)

    # Loaded into a bound memory (holding other transitions): the ops read
    # the loaded arrays, which load registered.
    loaded = make_memory(**config)
    fill(loaded, 12, seed=5)
    loaded_native = bind(loaded)
    before = loaded.storage.arrays['observation']
    loaded.load(bound_dir, 3)
    self.assertIsNot(loaded.storage.arrays['observation'], before)
    valid = valid_slots(plain)
    np.testing.assert_array_equal(valid_slots(loaded), valid)
    elements = loaded.get_transition_elements(len(valid))
    assert_same_batch(self, elements,
                      native_ops.transitions_at(loaded_native, elements,
                                                valid),
                      plain.sample_transition_batch(indices=valid))
    np.testing.assert_array_equal(
        native_ops.get_priority(loaded_native, np.arange(30)),
        plain.get_priority(np.arange(30)))
    self.assertEqual(float(native_ops.total_priority(loaded_native)),
                     plain.sum_tree.total_priority())
    batch = native_ops.sample(loaded_native, loaded.get_transition_elements())
    assert_same_batch(
        self, loaded.get_transition_elements(), batch,
        plain.sample_transition_batch(indices=batch[_INDICES].numpy()))
    native_ops.set_priority(loaded_native, [2], [6.0])
    self.assertEqual(loaded.get_priority(np.array([2])).tolist(), [6.0])
    loaded.sum_tree.check_invariants()


_FALLBACK_SCRIPT = r'''
import json
import sys
import numpy as np
import tensorflow as tf
from dopamine_per.replay_memory import prioritized_replay_buffer


def wrapper(**kwargs):
  return prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
      (2,), 1, replay_capacity=20, batch_size=4, observation_dtype=np.float32,
      **kwargs)


with tf.Graph().as_default():
  plain = wrapper(use_native_ops=False)
  print('plain built', file=sys.stderr, flush=True)
  first, second = wrapper(), wrapper()
  for replay in (plain, first, second):
    for i in range(10):
      replay.add(np.full(2, i, np.float32), 0, 1.0, False, 1.0)
  update = first.tf_set_priority(first.indices, tf.fill([4], 2.0))
  with tf.compat.v1.Session() as session:
    batch, _ = session.run([first.transition, update])
    plain_batch = session.run(plain.transition)
print(json.dumps(dict(
    types=[r.transition['state'].op.type for r in (plain, first, second)],
    update=update.type,
    priorities=first.memory.get_priority(batch['indices']).tolist(),
    shape=list(plain_batch['state'].shape),
    native=[r._native is None for r in (plain, first, second)])))
'''


class _OwnDraw(Prioritized):

  def _draw(self, count):
    return super()._draw(count)


class FallbackTest(graph_util.GraphTestCase):

  def test_without_a_compiler(self):
    cache = fixtures.temp_dir(self)
    result = subprocess.run(
        [sys.executable, '-c', _FALLBACK_SCRIPT], capture_output=True,
        text=True, timeout=300, cwd=fixtures.REPO_ROOT,
        env=fixtures.subprocess_env(DOPAMINE_PER_NATIVE_CACHE=cache,
                                    CXX='/nonexistent/compiler'))
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    output = json.loads(result.stdout.strip().splitlines()[-1])
    plain, wrappers = result.stderr.split('plain built')
    self.assertNotIn('samples through', plain)  # use_native_ops=False.
    self.assertEqual(wrappers.count('samples through'), 1)  # Once for both.
    self.assertRegex(wrappers, "samples through tf.numpy_function.*no C[+][+] "
                     "compiler: '/nonexistent/compiler' is not on PATH")
    self.assertEqual(output['types'], ['PyFunc'] * 3)
    self.assertEqual(output['update'], 'PyFunc')
    self.assertEqual(output['priorities'], [2.0] * 4)
    self.assertEqual(output['shape'], [4, 2, 1])
    self.assertEqual(output['native'], [True] * 3)
    self.assertEqual(os.listdir(cache), [])  # Nothing was built.

  @parameterized.named_parameters(
      ('reward_vector', dict(reward_shape=(2,)), r'rewards of shape \(2,\)'),
      ('horizon_9', dict(update_horizon=9), 'update_horizon 9'),
      ('own_draw', dict(cls=_OwnDraw),
       r"_OwnDraw\._draw overrides the library's method"))
  def test_unsupported_memory(self, config, reason):
    config = dict(config)
    cls = config.pop('cls', Prioritized)
    kwargs = dict(observation_shape=(4,), stack_size=1, replay_capacity=30,
                  batch_size=4, observation_dtype=np.float32)

    def wrapper():
      memory = cls(**kwargs, **config)
      fill(memory, 25)
      return prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
          (4,), 1, update_horizon=memory.update_horizon,
          wrapped_memory=memory)

    with mock.patch.object(native_ops, '_warned', set()):
      with self.assertLogs('absl', 'WARNING') as logs:
        first = wrapper()
      self.assertLen(logs.output, 1)
      self.assertRegex(logs.output[0], 'samples through tf.numpy_function.*'
                       + reason)
      with self.assertNoLogs('absl', 'WARNING'):
        second = wrapper()
      with self.assertNoLogs('absl', 'WARNING'):
        quiet = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
            (4,), 1, wrapped_memory=make_memory(), use_native_ops=False)
    for replay in (first, second, quiet):
      self.assertEqual(replay.transition['state'].op.type, 'PyFunc')
    self.assertLen(self.session.run(first.transition)['indices'], 4)


class BadInputTest(parameterized.TestCase):
  """Eagerly: an InvalidArgumentError naming the input; nothing changes."""

  def setUp(self):
    super().setUp()
    self.memory = make_memory(replay_capacity=20, update_horizon=2)
    fill(self.memory, 12, seed=1, terminal_rate=0.0, end_rate=0.0)
    self.memory.set_priority(np.arange(20), 1.0 + np.arange(20) % 3)
    self.native = bind(self.memory)
    self.elements = self.memory.get_transition_elements(2)

  def assert_refused(self, function, message,
                     error=tf.errors.InvalidArgumentError):
    before = tree_state(self.memory)
    with self.assertRaisesRegex(error, message):
      function()
    after = tree_state(self.memory)
    np.testing.assert_array_equal(after[0], before[0])
    self.assertEqual(after[1:], before[1:])

  @parameterized.parameters(20, -1, 2**31 - 1)
  def test_indices_out_of_range(self, index):
    message = r'indices must be in \[0, 20\). Got: {}'.format(index)
    self.assert_refused(lambda: native_ops.set_priority(
        self.native, [3, index], [2.0, 2.0]), message + r' \(indices\[1\]\)')
    self.assert_refused(lambda: native_ops.get_priority(
        self.native, [index]), message)
    self.assert_refused(lambda: native_ops.transitions_at(
        self.native, self.elements, [5, index]),
                        r'indices\[1\] = {} is not a valid'.format(index))

  # 1e-310, a float64 subnormal, was taken for 0 and written: TensorFlow
  # runs kernels with subnormals flushed.
  @parameterized.parameters((np.nan, 'nan'), (np.inf, 'inf'),
                            (-np.inf, '-inf'), (-1.0, r'-1\.0'),
                            (1e-300, '1e-300'), (1e-310, '1e-310'),
                            (1e39, r'1e\+39'))
  def test_bad_priorities(self, value, shown):
    # set_priority's message (probe_test.PriorityErrorTextTest).
    self.assert_refused(
        lambda: native_ops.set_priority(self.native, [1, 2, 3],
                                        np.array([5.0, value, 1.0])),
        r'priorities should be nonnegative and finite: 0 or in '
        r'\[1\.401298464324817e-45, 3\.4028235e\+38\] \(the positive range '
        r'of float32\)\. Got {}'.format(shown))

  def test_wrong_shapes(self):
    self.assert_refused(lambda: native_ops.set_priority(
        self.native, [1, 2, 3], [1.0, 2.0]),
                        r'priorities of shape \[2\] do not match indices of '
                        r'shape \[3\]; nothing was written')
    self.assert_refused(lambda: native_ops.transitions_at(
        self.native, self.elements, [[3, 4], [5, 6]]),
                        r'indices must be a vector, got shape \[2,2\]')
    self.assert_refused(lambda: native_ops.transitions_at(
        self.native, self.elements, np.zeros(0, np.int32)),
                        'indices must not be empty')
    # The outputs' static shapes must hold (they did not: fixed here).
    self.assert_refused(lambda: native_ops.transitions_at(
        self.native, self.elements, [3, 4, 5]),
                        'indices has 3 elements but element state has a '
                        'batch of 2')

  def test_wrong_dtypes(self):
    # Eagerly TF checks the attribute (InvalidArgumentError); building a
    # graph, the argument (TypeError). Either way before the kernel runs.
    message = 'not in (the )?list of allowed values'
    for build in (lambda: native_ops.set_priority(self.native, [1.0], [1.0]),
                  lambda: native_ops.get_priority(self.native, [1.0]),
                  lambda: native_ops.transitions_at(
                      self.native, self.elements, [1.0, 2.0]),
                  lambda: native_ops.set_priority(self.native, [1], [1])):
      self.assert_refused(build, message)
      with tf.Graph().as_default():
        with self.assertRaisesRegex(TypeError, message):
          build()

  def test_invalid_transitions(self):
    # Cursor at 13 (12 adds after one padding slot), horizon 2, stack 2.
    self.assertEqual(int(self.memory.add_count), 13)
    for slot in (0, 11, 12, 15):  # Padding; not all written; never written.
      self.assert_refused(lambda slot=slot: native_ops.transitions_at(
          self.native, self.elements, [4, slot]),
                          r'indices\[1\] = {} is not a valid transition'
                          .format(slot))
    memory = make_memory(replay_capacity=20, update_horizon=2)
    fill(memory, 27, terminal_rate=0.0, end_rate=0.0)  # Cursor at 8.
    native = bind(memory)
    for slot in (6, 7, 8):  # Across the cursor.
      with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                  r'indices\[0\] = {} is not'.format(slot)):
        native_ops.transitions_at(native, self.elements, [slot, 3])
    # Slot 8 ends an episode; the next starts with padding at 9.
    memory.add(np.zeros(4, np.float32), 0, 0.0, False, 1.0, episode_end=True)
    fill(memory, 4, terminal_rate=0.0, end_rate=0.0)  # Cursor at 15.
    self.assertFalse(memory.is_valid_transition(9))  # Its stack crosses 8.
    self.assertTrue(memory.is_valid_transition(10))
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                r'indices\[0\] = 9 is not'):
      native_ops.transitions_at(native, self.elements, [9, 10])
    self.assertLen(native_ops.transitions_at(native, self.elements,
                                             [10, 3])[0], 2)

  def test_priority_ops_on_a_uniform_memory(self):
    memory = make_memory(False)
    fill(memory, 10)
    native = bind(memory)
    for function in (lambda: native_ops.set_priority(native, [1], [1.0]),
                     lambda: native_ops.get_priority(native, [1]),
                     lambda: native_ops.total_priority(native)):
      with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                  'is not a prioritized memory'):
        function()

  @parameterized.parameters(True, False)
  def test_too_few_transitions(self, prioritized):
    memory = make_memory(prioritized, replay_capacity=20, update_horizon=2)
    native = bind(memory)
    elements = memory.get_transition_elements(4)
    message = (r'Cannot sample a batch with fewer than stack size \(2\) \+ '
               r'update_horizon \(2\) transitions')
    for adds in (0, 1, 1):  # Padding, then 2 adds: cursor 3, none valid.
      fill(memory, adds, terminal_rate=0.0, end_rate=0.0, priorities=(1.0,))
      with self.assertRaisesRegex(tf.errors.FailedPreconditionError,
                                  message):
        native_ops.sample(native, elements)
    fill(memory, 1, terminal_rate=0.0, end_rate=0.0, priorities=(1.0,))
    self.assertLen(native_ops.sample(native, elements)[0], 4)

  def test_zero_priorities_and_exhausted_attempts(self):
    self.memory.set_priority(np.arange(20), 0.0)
    self.assert_refused(lambda: native_ops.sample(self.native, self.elements),
                        'Cannot sample from an empty sum tree',
                        tf.errors.FailedPreconditionError)
    self.memory.set_priority(np.array([12]), np.array([1.0]))  # Invalid.
    self.assert_refused(lambda: native_ops.sample(self.native, self.elements),
                        'Max sample attempts: Tried 1000 times but only '
                        'sampled 0 valid indices. Batch size is 2',
                        tf.errors.FailedPreconditionError)


class DeletedMemoryTest(graph_util.GraphTestCase):

  def test_ops_on_a_deleted_memory_fail_cleanly(self):
    memory = make_memory()
    fill(memory, 20, terminal_rate=0.0, end_rate=0.0)
    native = bind(memory)
    ops = [native_ops.sample(native, memory.get_transition_elements()),
           native_ops.transitions_at(native,
                                     memory.get_transition_elements(1), [5]),
           native_ops.set_priority(native, [1], [1.0]),
           native_ops.get_priority(native, [1]),
           native_ops.total_priority(native)]
    self.session.run(ops[:2])
    gc.collect()  # Earlier tests' memories: unregistered now, not below.
    count = core.load().per_memory_count()
    del memory
    gc.collect()
    self.assertEqual(core.load().per_memory_count(), count - 1)
    for op in ops:
      with self.assertRaisesRegex(
          tf.errors.FailedPreconditionError,
          'dopamine_per replay memory {} does not exist'.format(native.id)):
        self.session.run(op)


class EagerModesTest(parameterized.TestCase):
  """tf.function and XLA (sessions and tf.data: wrapped_replay_buffer_test).
  """

  def test_tf_function(self):
    memory = make_memory()
    fill(memory, 50)
    native = bind(memory)
    elements = memory.get_transition_elements()

    @tf.function
    def sample():
      return native_ops.sample(native, elements)

    @tf.function
    def update(indices, value):
      native_ops.set_priority(native, indices,
                              tf.fill(tf.shape(indices), value))
      return (native_ops.get_priority(native, indices),
              native_ops.total_priority(native))

    for _ in range(3):
      batch = sample()
      indices = batch[_INDICES].numpy()
      assert_same_batch(self, elements, batch,
                        memory.sample_transition_batch(indices=indices))
      priorities, total = update(batch[_INDICES], np.float32(4.0))
      np.testing.assert_array_equal(priorities, np.full(8, 4.0))
      self.assertEqual(float(total), memory.sum_tree.total_priority())
    memory.sum_tree.check_invariants()

  def test_xla_refuses_the_op(self):
    memory = make_memory()
    fill(memory, 20)
    native = bind(memory)

    @tf.function(jit_compile=True)
    def sample():
      return native_ops.sample(native, memory.get_transition_elements())

    with self.assertRaisesRegex(
        tf.errors.InvalidArgumentError,
        "No registered 'DopaminePerSampleTransitions' OpKernel for "
        'XLA_CPU_JIT'):
      sample()


if __name__ == '__main__':
  absltest.main()
