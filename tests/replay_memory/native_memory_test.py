"""Tests for a replay memory's registration with the native library.

`native_memory.NativeMemory` and a memory's `native_memory()`, without
TensorFlow: registration, the locks it shares with the ops, which memories
the ops can sample, and the native batch against NumPy's. The ops
themselves: native_ops_test.
"""

import contextlib
import copy
import ctypes
import gc
import itertools
import random
import subprocess
import sys
import textwrap
import threading
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.native import build
from dopamine_per.native import core
from dopamine_per.native import extension
from dopamine_per.native import native_memory
from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer
from tests.support import fixtures

ReplayElement = circular_replay_buffer.ReplayElement
Prioritized = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer
Uniform = circular_replay_buffer.OutOfGraphReplayBuffer

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
  """Overrides a method that sampling does not call: still the Python path."""

  def add(self, *args, **kwargs):
    super().add(*args, **kwargs)


class _OwnInit(Prioritized):
  """Overrides only __init__ (and adds its own state): the ops sample it."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.episodes = 0


class RegistrationTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    _hold_garbage(self)

  @parameterized.parameters(True, False)
  def test_registered_when_made_with_its_locks_chosen_once(self,
                                                           prioritized):
    before = _count()
    memory = _memory(prioritized)
    self.assertEqual(_count(), before + 1)
    locks = (memory._lock, memory._priority_lock if prioritized else None)
    native = memory.native_memory()
    self.assertIsInstance(native, native_memory.NativeMemory)
    self.assertTrue(native.bound)
    self.assertIs(memory.native_memory(), native)
    self.assertEqual(_count(), before + 1)
    # The locks the memory was made with are the registry entry's: nothing
    # is swapped when the ops bind it.
    self.assertIs(memory._lock, native.lock)
    self.assertIs(locks[0], native.lock)
    if prioritized:
      self.assertIs(memory._priority_lock, native.tree_lock)
      self.assertIs(locks[1], native.tree_lock)
      self.assertIsNot(native.lock, native.tree_lock)
    self.assertEqual(native.storage_names[:4],
                     ['observation', 'action', 'reward', 'terminal'])

  def test_without_the_library_the_memory_locks_in_python(self):
    with mock.patch.object(native_memory, 'NativeMemory',
                           side_effect=build.NativeBuildError('no compiler')):
      memory = _memory()
    self.assertIsInstance(memory._lock, type(threading.RLock()))
    self.assertIsInstance(memory._priority_lock, type(threading.RLock()))
    with self.assertRaisesRegex(native_memory.UnsupportedMemoryError,
                                'made before the native library'):
      memory.native_memory()
    _add(memory, 5)
    self.assertLen(memory.sample_transition_batch(4)[0], 4)

  def test_a_copy_is_refused(self):
    memory = _memory()
    memory.native_memory()
    with self.assertRaisesRegex(TypeError, 'cannot be copied'):
      copy.copy(memory)

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
    with native.lock:  # The lock outlives the memory.
      with native.lock:
        pass

  def test_close_unregisters_and_the_memory_still_works(self):
    memory = _memory()
    native = memory.native_memory()
    before = _count()
    native.close()
    self.assertEqual(_count(), before - 1)
    # The lock stays usable: the memory keeps working alone, loads included.
    _add(memory, 10)
    memory.set_priority(np.array([3]), np.array([2.0]))
    self.assertEqual(memory.get_priority(np.array([3])).tolist(), [2.0])
    self.assertLen(memory.sample_transition_batch(4)[0], 4)
    directory = fixtures.temp_dir(self)
    memory.save(directory, 1)
    memory.load(directory, 1)
    self.assertEqual(native._kept, [], 'a closed memory was bound again')
    self.assertEqual(_count(), before - 1)

  @parameterized.parameters((True, False), (False, True), (True, True))
  def test_close_with_a_lock_held_does_not_wait_for_itself(self, storage,
                                                            tree):
    memory = _memory()
    native = memory.native_memory()
    before = _count()
    with contextlib.ExitStack() as held:
      if storage:
        held.enter_context(native.lock)
      if tree:
        held.enter_context(native.tree_lock)
      native.close()  # It waited forever for the held lock.
    self.assertEqual(_count(), before - 1)
    _add(memory, 3)

  @parameterized.parameters(dict(size=8), dict(version=1),
                            dict(version=core.LAYOUT_VERSION + 1))
  def test_a_layout_of_another_size_or_version_is_refused(self, **field):
    memory = _memory()
    _add(memory, 5)
    native = memory.native_memory()
    layout = core.PerLayout(size=ctypes.sizeof(core.PerLayout),
                            version=core.LAYOUT_VERSION)
    for name, value in field.items():
      setattr(layout, name, value)
    self.assertEqual(
        core.load().per_memory_bind(native._handle, ctypes.byref(layout)),
        -1)
    # Still bound to the memory's arrays: it samples as before.
    self.assertLen(memory.sample_transition_batch(4)[0], 4)

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


class NativeLockTest(absltest.TestCase):
  """The locks of a registry entry: RLock's behaviour, without sleeping."""

  def setUp(self):
    super().setUp()
    self.memory = _memory()
    _add(self.memory, 10)
    native = self.memory.native_memory()
    self.lock, self.tree_lock = native.lock, native.tree_lock

  def _in_thread(self, function):
    """Runs `function` in a thread to its end; returns what it returned."""
    results, errors = [], []

    def run():
      try:
        results.append(function())
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(fixtures.DEADLINE_S)
    self.assertFalse(thread.is_alive(), 'the thread is stuck')
    self.assertEqual(errors, [])
    return results[0]

  def _try_in_thread(self, lock):
    """Whether another thread can take `lock` now (it lets it go again)."""
    return self._in_thread(lambda: lock.acquire(blocking=False) and
                           (lock.release() or True))

  def test_reentrant_in_one_thread(self):
    with self.lock:
      with self.lock:
        self.assertTrue(self.lock.acquire())
        self.assertTrue(self.lock.held())
        self.lock.release()
      _add(self.memory, 1)  # add takes it again.
      self.assertFalse(self._try_in_thread(self.lock))
    self.assertFalse(self.lock.held())
    self.assertTrue(self._try_in_thread(self.lock))

  def test_excludes_other_threads_and_times_out(self):
    with self.lock:
      self.assertFalse(self._try_in_thread(self.lock))
      self.assertFalse(self._in_thread(
          lambda: self.lock.acquire(timeout=0.05)))
    self.assertTrue(self._in_thread(
        lambda: self.lock.acquire(timeout=5) and (self.lock.release() or
                                                  True)))

  def test_acquire_checks_its_arguments(self):
    with self.assertRaisesRegex(ValueError, 'non-blocking'):
      self.lock.acquire(False, 1.0)
    with self.assertRaisesRegex(ValueError, 'non-negative'):
      self.lock.acquire(True, -2.0)
    self.assertFalse(self.lock.held())

  def test_release_by_another_thread_raises(self):
    with self.assertRaisesRegex(RuntimeError, 'un-acquired'):
      self.lock.release()
    caught = []

    def release():
      try:
        self.lock.release()
      except RuntimeError as e:
        caught.append(str(e))

    with self.lock:
      self._in_thread(release)
      self.assertTrue(self.lock.held())
    self.assertEqual(caught, ['cannot release un-acquired lock'])
    _add(self.memory, 1)  # Still released properly.

  def test_the_storage_lock_and_the_tree_lock_are_two(self):
    # A priority update waits for the tree only: not for an add or a
    # sample's frames under the storage lock.
    with self.lock:
      self.assertTrue(self._try_in_thread(self.tree_lock))
      self._in_thread(lambda: self.memory.set_priority(np.array([5]),
                                                       np.array([4.0])))
    self.assertEqual(self.memory.get_priority(np.array([5])).tolist(), [4.0])
    with self.tree_lock:
      self.assertTrue(self._try_in_thread(self.lock))
      self.assertFalse(self._try_in_thread(self.tree_lock))

  def test_a_condition_can_wait_on_it(self):
    condition = threading.Condition(self.lock)
    with condition:
      self.assertFalse(condition.wait(timeout=0.01))
      self.assertTrue(self.lock.held())
    self.assertFalse(self.lock.held())


class InterruptTest(absltest.TestCase):
  """A signal's exception while a thread waits for the lock leaves it free."""

  def test_ctrl_c_while_waiting_leaves_the_memory_usable(self):
    # The main thread waits for the lock another thread holds; SIGALRM's
    # handler raises KeyboardInterrupt (as Ctrl-C's does) during the wait.
    # Before, the mutex stayed held with no owner: every later add, sample
    # and save waited forever, and so did the exit.
    code = textwrap.dedent("""
        import signal, threading
        import numpy as np
        from dopamine_per.replay_memory import prioritized_replay_buffer
        memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
            (2,), 1, 10, 2)
        memory.native_memory()
        holding, done = threading.Event(), threading.Event()
        def hold():
          with memory._lock:
            holding.set()
            done.wait()
        thread = threading.Thread(target=hold)
        thread.start()
        holding.wait()
        def interrupt(*unused):
          raise KeyboardInterrupt
        signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        try:
          memory.add(np.zeros(2, np.uint8), 0, 0.0, False, 1.0)
        except KeyboardInterrupt:
          print('interrupted')
        done.set()
        thread.join()
        for _ in range(3):
          memory.add(np.zeros(2, np.uint8), 0, 0.0, False, 1.0)
        print(len(memory.sample_transition_batch(2)[0]), 'sampled')
        """)
    result = subprocess.run([sys.executable, '-c', code],
                            capture_output=True, text=True, timeout=120,
                            env=fixtures.subprocess_env(),
                            cwd=fixtures.REPO_ROOT, check=False)
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    self.assertEqual(result.stdout.split('\n')[:2],
                     ['interrupted', '2 sampled'])


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
      ('subclass_own_init', dict(cls=_OwnInit)),
  )
  def test_supported(self, config):
    memory = _memory(**config)
    self.assertIsNone(native_memory.unsupported_reason(memory))
    memory.native_memory().close()

  @parameterized.named_parameters(
      ('reward_vector', dict(reward_shape=(2,)),
       r'rewards of shape \(2,\) and dtype float32'),
      ('reward_float64', dict(reward_dtype=np.float64),
       r'rewards of shape \(\) and dtype float64'),
      ('horizon_8', dict(update_horizon=8), 'update_horizon 8'),
      ('float_terminals', dict(terminal_dtype=np.float32),
       'terminals of dtype float32'),
      ('object_extra', dict(extra_storage_types=[
          ReplayElement('meta', (), object)]), 'element meta of dtype object'),
      ('own_draw', dict(cls=_OwnDraw),
       "_OwnDraw._draw overrides the library's method"),
      ('own_batch', dict(cls=_OwnBatch),
       "_OwnBatch.sample_transition_batch overrides the library's"),
      ('own_add', dict(cls=_OwnAdd),
       r'_OwnAdd.add overrides .* any method but __init__'),
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
    with memory._lock:  # The Python path samples it.
      self.assertIsNone(memory._native_sampler())

  def test_not_a_memory(self):
    self.assertEqual(native_memory.unsupported_reason(object()),
                     'object is not a dopamine_per out-of-graph memory')
    native = native_memory.NativeMemory()
    self.addCleanup(native.close)
    with self.assertRaises(native_memory.UnsupportedMemoryError):
      native.bind(object())
    self.assertFalse(native.bound)


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


# Layouts of the native batch against NumPy's: Atari's frames, CartPole's,
# 2-byte frames with 7-step returns and bool terminals, 8-byte frames with
# int32 terminals.
_BATCH_LAYOUTS = (
    ('atari', (84, 84), np.uint8, 4, 3, np.uint8),
    ('cartpole', (4,), np.float32, 1, 1, np.uint8),
    ('horizon_7_bool_terminals', (3, 2), np.uint16, 3, 7, np.bool_),
    ('int32_terminals', (5,), np.float64, 2, 2, np.int32),
)


def _filled_memories(prioritized, shape=(2,), dtype=np.float32, stack=2,
                     horizon=3, terminal_dtype=np.uint8, make_rng=lambda: None,
                     **config):
  """A memory on NumPy's loops and one sampled natively, with equal
  generators (make_rng()), the same 150 transitions in each (across the
  wrap of 60 slots, episodes cut by terminals and by ends), and the same
  priorities."""
  extras = [ReplayElement('logits', (2, 3), np.float64),
            ReplayElement('flag', (), np.int8)]
  memories = [_memory(prioritized, kernels=kernels, observation_shape=shape,
                      observation_dtype=dtype, stack_size=stack,
                      update_horizon=horizon, gamma=0.9, replay_capacity=60,
                      terminal_dtype=terminal_dtype, action_shape=(2,),
                      action_dtype=np.int16, extra_storage_types=extras,
                      rng=make_rng(), **config)
              for kernels in ('numpy', 'native')]
  rng = np.random.default_rng(horizon)
  for t in range(150):
    values = [(rng.random(shape) * 200).astype(dtype),
              rng.integers(-9, 9, 2).astype(np.int16),
              float(rng.standard_normal()), int(rng.random() < 0.1),
              rng.standard_normal((2, 3)), np.int8(t % 7)]
    keywords = dict(episode_end=bool(rng.random() < 0.05))
    if prioritized:
      keywords['priority'] = float(rng.random())
    for memory in memories:
      memory.add(*values, **keywords)
  return memories


class NativeBatchTest(parameterized.TestCase):
  """`NativeMemory.valid_mask`, `fill` and `sample`: NumPy's batches, bit
  for bit, and what they refuse, with nothing written."""

  @parameterized.named_parameters(*_BATCH_LAYOUTS)
  def test_same_batches_as_numpy_s(self, shape, dtype, stack, horizon,
                                   terminal_dtype):
    for prioritized in (False, True):
      numpy_memory, native = _filled_memories(prioritized, shape, dtype,
                                              stack, horizon, terminal_dtype)
      with native._lock, numpy_memory._lock:  # pylint: disable=protected-access
        self.assertIs(native._native_sampler(), native.native)  # pylint: disable=protected-access
        self.assertIsNone(numpy_memory._native_sampler())  # pylint: disable=protected-access
      slots = np.arange(60)
      valid = numpy_memory.is_valid_transition(slots)
      np.testing.assert_array_equal(native.is_valid_transition(slots), valid)
      indices = np.flatnonzero(valid)
      self.assertGreater(len(indices), 10)
      terminal = numpy_memory.get_transition_elements(1)[6]
      cut = 0
      for mine, theirs, element in zip(
          native.sample_transition_batch(indices=indices),
          numpy_memory.sample_transition_batch(indices=indices),
          numpy_memory.get_transition_elements(len(indices))):
        self.assertEqual(mine.dtype, theirs.dtype, element.name)
        self.assertEqual(mine.tobytes(), theirs.tobytes(), element.name)
        if element.name == terminal.name:
          cut = int(np.count_nonzero(theirs))
      if horizon > 1:
        self.assertGreater(cut, 0)  # Some returns were cut.
      batches = []
      for memory in (numpy_memory, native):  # The same draws.
        random.seed(5)
        np.random.seed(5)
        batches.append(memory.sample_transition_batch(32))
      for mine, theirs in zip(*batches):
        self.assertEqual(mine.tobytes(), theirs.tobytes())
      self.assertEqual(native.get_observation_stack(indices).tobytes(),
                       numpy_memory.get_observation_stack(indices).tobytes())
      if prioritized:  # New priorities, at TensorFlow's int32 indices.
        for memory in (numpy_memory, native):
          memory.set_priority(indices.astype(np.int32),
                              np.linspace(0.5, 2, len(indices)))
        self.assertEqual(native.sum_tree.total_priority(),
                         numpy_memory.sum_tree.total_priority())

  def test_one_native_call_draws_as_numpy_does(self):
    # Each batch is one native call (draws, redraws, fill) that consumes
    # the memory's generator exactly as its Python draws do: the same
    # batches, and the same generator state after 30 of them, for every
    # bit generator, NumPy's global one (legacy randint's masked draws) and
    # Python's `random` (a prioritized memory's, whose redraws stay in
    # Python).
    generators = [np.random.PCG64, np.random.MT19937, np.random.Philox,
                  np.random.SFC64]
    cases = [(False, lambda: None), (True, lambda: None)] + [
        (prioritized, lambda g=g: np.random.Generator(g(7)))
        for prioritized in (False, True) for g in generators]
    for prioritized, make_rng in cases:
      numpy_memory, native = _filled_memories(prioritized, make_rng=make_rng,
                                              batch_size=7)
      redraws = mock.patch.object(type(numpy_memory), '_redraw',
                                  autospec=True,
                                  side_effect=type(numpy_memory)._redraw)
      calls = mock.patch.object(native_memory.NativeMemory, 'sample',
                                autospec=True,
                                side_effect=native_memory.NativeMemory.sample)
      batches = []
      with redraws as redrawn, calls as sampled:
        for memory in (numpy_memory, native):
          np.random.seed(3)
          random.seed(3)
          batches.append([memory.sample_transition_batch()
                          for _ in range(30)])
          states = (memory.rng.bit_generator.state if memory.rng is not None
                    else random.getstate() if prioritized else
                    np.random.get_state()[1])
          batches[-1].append(repr(states).encode())
      name = '{} {}'.format(prioritized, type(make_rng()).__name__)
      self.assertEqual(sampled.call_count, 30, name)
      self.assertGreater(redrawn.call_count, 0, name)  # Redraws were drawn.
      for mine, theirs in zip(*batches):
        for a, b in zip(mine, theirs):
          self.assertEqual(a.tobytes() if hasattr(a, 'tobytes') else a,
                           b.tobytes() if hasattr(b, 'tobytes') else b, name)

  def test_one_native_call_raises_as_python_does(self):
    # The same errors, with the same draws consumed (a generator's, or
    # without one NumPy's or Python's global ones).
    def errors(memories):
      raised = []
      for memory in memories:
        random.seed(4)
        np.random.seed(4)
        try:
          memory.sample_transition_batch(40)
        except (RuntimeError, ValueError) as e:
          raised.append((type(e), str(e), random.getstate(),
                         np.random.get_state()[1].tobytes(),
                         memory.rng and memory.rng.bit_generator.state))
      self.assertLen(raised, 2)
      self.assertEqual(raised[0], raised[1])
      return raised[0]

    for prioritized, rng in itertools.product((False, True), (2, None)):
      memories = _filled_memories(
          prioritized, max_sample_attempts=3,
          make_rng=lambda r=rng: r and np.random.default_rng(r))
      if prioritized:  # Every priority zero; uniform: attempts exhausted.
        for memory in memories:
          memory.sum_tree.set(np.arange(60), np.zeros(60))
      self.assertEqual(errors(memories)[0],
                       ValueError if prioritized else RuntimeError)
      memories = [_memory(prioritized, kernels=kernels, rng=rng)
                  for kernels in ('numpy', 'native')]
      for memory in memories:  # Too few transitions.
        _add(memory, 1)
      self.assertIn('Cannot sample a batch with fewer', errors(memories)[1])

  def _bound(self):
    memory = _memory(kernels='native', extra_storage_types=[
        ReplayElement('logits', (3,), np.float32)])
    for i in range(15):
      memory.add(np.full(2, i, np.float32), i % 3, float(i), False,
                 np.full(3, i, np.float32), priority=1.0)
    with memory._lock:  # pylint: disable=protected-access
      native = memory._native_sampler()  # pylint: disable=protected-access
    self.assertIsNotNone(native)
    elements = memory.get_transition_elements(3)
    codes = native.batch_codes(native_memory.element_codes(
        elements, native.storage_names))
    indices = np.flatnonzero(memory.is_valid_transition(np.arange(20)))[:3]
    return memory, native, elements, codes, indices

  def test_a_layout_without_states(self):
    # The fill writes the outputs it is given only: every element, no
    # state, or only the next state (through a missing output it would
    # crash the process).
    memory, native, elements, codes, indices = self._bound()
    batch = memory.sample_transition_batch(indices=indices)
    position = {e.name: p for p, e in enumerate(elements)}
    for names in (None, ['reward', 'terminal'], ['next_state', 'indices']):
      chosen = (range(len(elements)) if names is None else
                [position[name] for name in names])
      outputs = [np.zeros(elements[p].shape, elements[p].type)
                 for p in chosen]
      with native.lock:
        native.fill(indices, codes if names is None else
                    native.batch_codes(names), outputs)
      for p, output in zip(chosen, outputs):
        np.testing.assert_array_equal(output, batch[p])

  def test_fill_refuses_what_does_not_fit(self):
    memory, native, elements, codes, indices = self._bound()
    other = _memory(kernels='native')
    _add(other, 10)
    other.sample_transition_batch()  # Binds it.
    module = extension.load()

    def outputs():
      return [np.zeros(e.shape, e.type) for e in elements]

    with self.assertRaisesRegex(RuntimeError, 'must hold'):
      native.fill(indices, codes, outputs())
    with self.assertRaisesRegex(RuntimeError, 'must hold'):
      native.valid_mask(indices)
    wrong = {
        'short': lambda o: o[:1] + [o[1][:2]] + o[2:],
        'wider dtype': lambda o: o[:2] + [o[2].astype(np.float64)] + o[3:],
        'strided': lambda o: [np.zeros((6,) + o[0].shape[1:],
                                       o[0].dtype)[::2]] + o[1:],
        'read-only': lambda o: [np.broadcast_to(o[0][:1], o[0].shape)] +
                               o[1:],
        'fewer outputs': lambda o: o[:-1],
    }
    with native.lock:
      for name, change in wrong.items():
        given = change(outputs())
        with self.subTest(name), self.assertRaises(TypeError):
          native.fill(indices, codes, given)
        for array in given:
          self.assertFalse(np.any(array), name)  # Nothing written.
      given = outputs()
      for bad in (np.array([0, 1, 20]), np.array([-1, 2, 3])):
        with self.assertRaises(IndexError):
          native.fill(bad, codes, given)
      with self.assertRaises(TypeError):
        native.fill(indices.astype(np.int32), codes, given)
      with self.assertRaises(TypeError):  # An extra it does not have.
        native.fill(indices, native.batch_codes(['extra:1']),
                    [np.zeros(3, np.float32)])
      with self.assertRaises(TypeError):  # Another memory's tree lock.
        module.fill_batch(native.lock, other.native.tree_lock, indices,
                          codes, tuple(given))
      with self.assertRaises(RuntimeError):  # The tree lock as the lock.
        module.fill_batch(native.tree_lock, native.tree_lock, indices,
                          codes, tuple(given))
      for array in given:
        self.assertFalse(np.any(array))
      with self.assertRaises(TypeError):
        module.valid_mask(native.lock, indices, np.zeros(2, bool))
    for names in (['state', 'nonsense'], ['extra:'], ['extra:1234567890'],
                  [b'state']):
      with self.assertRaises(ValueError):
        native.batch_codes(names)


if __name__ == '__main__':
  absltest.main()
