"""Tests for a replay memory's registration with the native library.

`native_memory.NativeMemory` and a memory's `native_memory()`, without
TensorFlow: registering once, unregistering when the memory goes, the lock
the memory then shares with the ops (re-entrant, excluding other threads,
waited for by `add` and `set_priority`), re-registering after `load`, and
which memories the ops can sample (`unsupported_reason`). The ops on a
registered memory: native_ops_test.
"""

import gc
import subprocess
import sys
import threading
import time

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.native import core
from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import native_memory
from dopamine_per.replay_memory import prioritized_replay_buffer
from tests.support import fixtures

ReplayElement = circular_replay_buffer.ReplayElement
Prioritized = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer
Uniform = circular_replay_buffer.OutOfGraphReplayBuffer

# How long a test waits to see that a thread is (still) blocked.
_BLOCKED_S = 0.2


def _memory(prioritized=True, cls=None, **config):
  kwargs = dict(observation_shape=(2,), stack_size=2, replay_capacity=20,
                batch_size=4, observation_dtype=np.float32)
  kwargs.update(config)
  if cls is None:
    cls = Prioritized if prioritized else Uniform
  return cls(**kwargs)


def _add(memory, count, start=0):
  for i in range(start, start + count):
    args = [np.full(2, i, np.float32), i % 3, float(i), False]
    if isinstance(memory, Prioritized):
      args.append(1.0)
    memory.add(*args)


def _count():
  return core.load().per_memory_count()


def _hold_garbage(test_case):
  """Frees earlier tests' memories now, and none until the test ends.

  Counts of registered memories then change only by what the test does.
  """
  gc.collect()
  gc.disable()
  test_case.addCleanup(gc.enable)


class _OwnDraw(Prioritized):
  """Draws otherwise than the ops would."""

  def _draw(self, count):
    return np.zeros(count, dtype=np.int64)


class _OwnBatch(Uniform):

  def sample_transition_batch(self, batch_size=None, indices=None):
    return super().sample_transition_batch(batch_size, indices)


class _OwnAdd(Prioritized):
  """Changes nothing that sampling reads: the ops can sample it."""

  def add(self, *args, **kwargs):
    super().add(*args, **kwargs)


class RegistrationTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    _hold_garbage(self)

  @parameterized.parameters(True, False)
  def test_registers_once_and_shares_its_lock(self, prioritized):
    memory = _memory(prioritized)
    before = _count()
    native = memory.native_memory()
    self.assertIsInstance(native, native_memory.NativeMemory)
    self.assertIs(memory.native_memory(), native)
    self.assertEqual(_count(), before + 1)
    self.assertIs(memory._lock, native.lock)
    if prioritized:
      self.assertIs(memory._priority_lock, native.lock)
    self.assertEqual(native.storage_names[:4],
                     ['observation', 'action', 'reward', 'terminal'])

  def test_ids_are_never_reused(self):
    first = _memory().native_memory().id
    gc.collect()  # The first memory is gone, and unregistered.
    second = _memory().native_memory().id
    third = _memory().native_memory().id
    self.assertLess(first, second)
    self.assertLess(second, third)

  @parameterized.parameters(True, False)
  def test_deleting_the_memory_unregisters_it(self, prioritized):
    before = _count()
    memory = _memory(prioritized)
    _add(memory, 5)
    native = memory.native_memory()
    self.assertEqual(_count(), before + 1)
    del memory
    gc.collect()
    self.assertEqual(_count(), before)
    native.close()  # Again: nothing happens.
    self.assertEqual(_count(), before)

  def test_close_unregisters_and_the_memory_still_works(self):
    memory = _memory()
    native = memory.native_memory()
    before = _count()
    native.close()
    self.assertEqual(_count(), before - 1)
    # The lock stays usable (it was freed with the registration, issue
    # found here): the Python memory keeps working alone, loads included.
    _add(memory, 10)
    memory.set_priority(np.array([3]), np.array([2.0]))
    self.assertEqual(memory.get_priority(np.array([3])).tolist(), [2.0])
    self.assertLen(memory.sample_transition_batch(4)[0], 4)
    directory = fixtures.temp_dir(self)
    memory.save(directory, 1)
    memory.load(directory, 1)
    self.assertEqual(native._kept, [], 'a closed memory was bound again')
    self.assertEqual(_count(), before - 1)

  def test_the_lock_outlives_the_memory(self):
    memory = _memory()
    lock = memory.native_memory().lock
    before = _count()
    del memory
    gc.collect()
    self.assertEqual(_count(), before - 1)
    with lock:
      with lock:
        pass

  def test_the_memory_works_as_before_with_the_native_lock(self):
    bound, plain = _memory(rng=1), _memory(rng=1)
    bound.native_memory()
    for memory in (bound, plain):
      _add(memory, 25)
      memory.set_priority(np.arange(20), 1.0 + np.arange(20) % 3)
    for got, want in zip(bound.sample_transition_batch(6),
                         plain.sample_transition_batch(6)):
      np.testing.assert_array_equal(got, want)
    bound.sum_tree.check_invariants()

  def test_load_registers_the_loaded_arrays(self):
    saved = _memory()
    _add(saved, 15, start=100)
    directory = fixtures.temp_dir(self)
    saved.save(directory, 0)
    memory = _memory()
    _add(memory, 5)
    native = memory.native_memory()
    old = memory.storage.arrays['observation']
    memory.load(directory, 0)
    new = memory.storage.arrays['observation']
    self.assertIsNot(new, old)
    # The registered pointers are the new arrays' (what the ops read; the
    # ops' view of a loaded memory: native_ops_test).
    self.assertTrue(any(kept is new for kept in native._kept))
    self.assertFalse(any(kept is old for kept in native._kept))
    self.assertIs(memory._lock, native.lock)
    np.testing.assert_array_equal(memory.storage.arrays['observation'],
                                  saved.storage.arrays['observation'])

  def test_registering_does_not_import_tensorflow(self):
    code = ('import sys\n'
            'import numpy as np\n'
            'from dopamine_per.replay_memory import prioritized_replay_buffer\n'
            'memory = prioritized_replay_buffer.'
            'OutOfGraphPrioritizedReplayBuffer((2,), 1, 10, 2)\n'
            'memory.native_memory()\n'
            'memory.add(np.zeros(2, np.uint8), 0, 0.0, False, 1.0)\n'
            'print("tensorflow" in sys.modules)\n')
    result = subprocess.run([sys.executable, '-c', code],
                            capture_output=True, text=True, timeout=120,
                            env=fixtures.subprocess_env(),
                            cwd=fixtures.REPO_ROOT, check=False)
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    self.assertEqual(result.stdout.strip(), 'False')


class NativeLockTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.memory = _memory()
    _add(self.memory, 10)
    self.lock = self.memory.native_memory().lock

  def _in_thread(self, function):
    """Runs `function` in a thread; returns (thread, event set when done)."""
    done = threading.Event()
    errors = []

    def run():
      try:
        function()
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)
      done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    self.addCleanup(thread.join, fixtures.DEADLINE_S)
    self.addCleanup(lambda: self.assertEqual(errors, []))
    return thread, done

  def test_reentrant_in_one_thread(self):
    with self.lock:
      with self.lock:
        self.assertTrue(self.lock.acquire())
        self.lock.release()
      _add(self.memory, 1)  # add takes it again.
    _, done = self._in_thread(lambda: self.lock.acquire() and
                              self.lock.release())
    fixtures.wait_until(done.is_set, message='the lock was not released')

  def test_excludes_other_threads(self):
    acquired = threading.Event()

    def take():
      with self.lock:
        acquired.set()

    with self.lock:
      self._in_thread(take)
      time.sleep(_BLOCKED_S)
      self.assertFalse(acquired.is_set(), 'two threads held the lock')
    fixtures.wait_until(acquired.is_set, message='the lock was not taken')

  def test_release_by_another_thread_raises(self):
    caught = []

    def release():
      try:
        self.lock.release()
      except RuntimeError as e:
        caught.append(e)

    with self.assertRaisesRegex(RuntimeError, 'un-acquired'):
      self.lock.release()
    with self.lock:
      _, done = self._in_thread(release)
      fixtures.wait_until(done.is_set)
    self.assertLen(caught, 1)
    _add(self.memory, 1)  # Still released properly.

  def test_add_and_set_priority_wait_for_the_lock(self):
    count = int(self.memory.add_count)
    with self.lock:
      _, added = self._in_thread(lambda: _add(self.memory, 1))
      _, updated = self._in_thread(lambda: self.memory.set_priority(
          np.array([5]), np.array([4.0])))
      time.sleep(_BLOCKED_S)
      self.assertFalse(added.is_set() or updated.is_set(),
                       'the memory was changed while its lock was held')
      self.assertEqual(int(self.memory.add_count), count)
      self.assertEqual(self.memory.get_priority(np.array([5])).tolist(),
                       [1.0])
    fixtures.wait_until(lambda: added.is_set() and updated.is_set())
    self.assertEqual(int(self.memory.add_count), count + 1)
    self.assertEqual(self.memory.get_priority(np.array([5])).tolist(), [4.0])


class UnsupportedReasonTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    _hold_garbage(self)

  @parameterized.named_parameters(
      ('uniform', dict(prioritized=False)),
      ('prioritized', dict()),
      ('atari', dict(observation_shape=(84, 84), observation_dtype=np.uint8,
                     stack_size=4)),
      ('horizon_7', dict(update_horizon=7)),
      ('bool_terminals', dict(terminal_dtype=np.bool_)),
      ('int32_terminals', dict(terminal_dtype=np.int32)),
      ('vector_actions', dict(action_shape=(2,), action_dtype=np.float32)),
      ('extras', dict(extra_storage_types=[
          ReplayElement('logits', (3,), np.float32),
          ReplayElement('count', (), np.int32)])),
      ('subclass_not_sampling', dict(cls=_OwnAdd)),
  )
  def test_supported(self, config):
    memory = _memory(**config)
    self.assertIsNone(native_memory.unsupported_reason(memory))
    native_memory.NativeMemory(memory).close()

  @parameterized.named_parameters(
      ('reward_vector', dict(reward_shape=(2,)),
       r'rewards of shape \(2,\) and dtype float32'),
      ('reward_float64', dict(reward_dtype=np.float64),
       r'rewards of shape \(\) and dtype float64'),
      ('horizon_8', dict(update_horizon=8), 'update_horizon 8'),
      ('horizon_9', dict(update_horizon=9), 'update_horizon 9'),
      ('float_terminals', dict(terminal_dtype=np.float32),
       'terminals of dtype float32'),
      ('object_extra', dict(extra_storage_types=[
          ReplayElement('meta', (), object)]), 'element meta of dtype object'),
      ('own_draw', dict(cls=_OwnDraw),
       '_OwnDraw._draw changes how batches are sampled'),
      ('own_batch', dict(cls=_OwnBatch),
       '_OwnBatch.sample_transition_batch changes how batches'),
  )
  def test_unsupported(self, config, reason):
    memory = _memory(**config)
    self.assertRegex(native_memory.unsupported_reason(memory), reason)
    lock = memory._lock
    before = _count()
    with self.assertRaisesRegex(native_memory.UnsupportedMemoryError, reason):
      memory.native_memory()
    self.assertIs(memory._lock, lock, 'the lock changed all the same')
    self.assertEqual(_count(), before, 'registered all the same')

  def test_not_a_memory(self):
    self.assertEqual(native_memory.unsupported_reason(object()),
                     'object is not a dopamine_per out-of-graph memory')
    with self.assertRaises(native_memory.UnsupportedMemoryError):
      native_memory.NativeMemory(object())


class ElementCodesTest(absltest.TestCase):

  def test_extras_are_named_by_storage_position(self):
    memory = _memory(extra_storage_types=[
        ReplayElement('logits', (3,), np.float32),
        ReplayElement('count', (), np.int32)])
    names = [e.name for e in memory.get_storage_signature()]
    codes = native_memory.element_codes(memory.get_transition_elements(),
                                        names)
    self.assertEqual(codes, [
        'state', 'action', 'reward', 'next_state', 'next_action',
        'next_reward', 'terminal', 'indices', 'extra:0', 'extra:1',
        'sampling_probabilities'])


if __name__ == '__main__':
  absltest.main()
