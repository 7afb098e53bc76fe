"""Tests for dopamine_per.replay_memory.memory.storage.

`CircularStorage` (writes at the cursor, episode ends, state and restore),
the lazily backed arrays behind it (`zeros`, `allocate`, `populate`) and the
`BufferPool` that sampled states are written into.
"""

import mmap
import threading
import tracemalloc
from unittest import mock

from absl.testing import absltest
import numpy as np

from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory.memory import storage
from tests.support import fixtures

Element = circular_replay_buffer.ReplayElement

# An array of this many bytes or more is mapped lazily.
_LAZY_BYTES = 64 << 20


def _elements(observation_shape=(2,)):
  return [Element('observation', observation_shape, np.uint8),
          Element('action', (), np.int32),
          Element('reward', (), np.float32),
          Element('terminal', (), np.uint8)]


def _write(store, t, ends_episode=False):
  """Writes transition `t`: observation t, action 10 t, reward t / 2."""
  return store.write([np.full(store.arrays['observation'].shape[1:], t),
                      10 * t, t / 2, int(ends_episode)], ends_episode)


def _assert_episode_ends_in_step(test, store):
  test.assertEqual(set(np.flatnonzero(store.episode_end).tolist()),
                   store.episode_end_indices)


class CircularStorageTest(absltest.TestCase):

  def test_a_new_storage(self):
    store = storage.CircularStorage(_elements((3, 2)), 5)
    self.assertEqual(store.capacity, 5)
    self.assertEqual(list(store.arrays), ['observation', 'action', 'reward',
                                          'terminal'])
    self.assertEqual(store.arrays['observation'].shape, (5, 3, 2))
    self.assertEqual(store.arrays['reward'].dtype, np.float32)
    for array in store.arrays.values():
      self.assertFalse(array.any())
    self.assertEqual((store.add_count, store.cursor()), (0, 0))
    self.assertEqual(store.episode_end.tolist(), [False] * 5)
    self.assertEqual(store.episode_end_indices, set())
    self.assertTrue(store.episode_start)
    self.assertEqual(store.nbytes, 5 * (6 + 4 + 4 + 1))
    self.assertEqual(store.nbytes,
                     sum(array.nbytes for array in store.arrays.values()))

  def test_write_advances_the_cursor_and_wraps(self):
    store = storage.CircularStorage(_elements(), 3)
    slots = [_write(store, t) for t in range(1, 8)]
    self.assertEqual(slots, [0, 1, 2, 0, 1, 2, 0])
    self.assertEqual((store.add_count, store.cursor()), (7, 1))
    # Slot s holds the last transition written there: 7, 5, 6.
    np.testing.assert_array_equal(store.arrays['observation'],
                                  [[7, 7], [5, 5], [6, 6]])
    np.testing.assert_array_equal(store.arrays['action'], [70, 50, 60])
    np.testing.assert_array_equal(store.arrays['reward'], [3.5, 2.5, 3.0])

  def test_extra_trailing_values_are_ignored(self):
    # The prioritized memory passes its priority last.
    store = storage.CircularStorage(_elements(), 3)
    store.write([np.ones(2), 1, 1.0, 0, 'priority'], False)
    self.assertEqual(store.add_count, 1)
    self.assertEqual(store.arrays['action'][0], 1)

  def test_the_cursor_follows_an_assigned_count(self):
    store = storage.CircularStorage(_elements(), 4)
    store.add_count = 10  # As the memory's `add_count` setter does.
    self.assertEqual(store.cursor(), 2)
    self.assertEqual(_write(store, 1), 2)
    self.assertEqual(store.add_count, 11)

  def test_episode_ends_are_kept_in_step(self):
    store = storage.CircularStorage(_elements(), 4)
    _write(store, 0)
    self.assertFalse(store.episode_start)  # Mid-episode.
    _write(store, 1, ends_episode=True)
    self.assertTrue(store.episode_start)  # The next one starts an episode.
    self.assertEqual(store.episode_end_indices, {1})
    self.assertEqual(store.episode_end.tolist(), [False, True, False, False])
    _write(store, 2, ends_episode=True)
    for t in range(3, 6):  # Overwrites slot 1 without an ending.
      _write(store, t)
      _assert_episode_ends_in_step(self, store)
    self.assertEqual(store.episode_end_indices, {2})
    self.assertFalse(store.episode_start)

  def test_state(self):
    store = storage.CircularStorage(_elements(), 4)
    for t in range(6):
      _write(store, t, ends_episode=t == 4)
    state = store.state()
    self.assertEqual(set(state), {'arrays', 'add_count',
                                  'episode_end_indices', 'episode_start'})
    for name, array in store.arrays.items():
      self.assertIs(state['arrays'][name], array)  # Not copies.
    self.assertEqual(state['add_count'], 6)
    self.assertEqual(state['episode_end_indices'], {0})
    self.assertFalse(state['episode_start'])
    state['episode_end_indices'].add(3)  # A copy of the set.
    self.assertEqual(store.episode_end_indices, {0})

  def test_state_and_restore_round_trip(self):
    source = storage.CircularStorage(_elements(), 5)
    for t in range(8):
      _write(source, t, ends_episode=t in (2, 7))
    target = storage.CircularStorage(_elements(), 5)
    for t in range(4):  # Ends that the restore must clear.
      _write(target, 100 + t, ends_episode=True)
    target.restore(source.state())
    for name, array in source.arrays.items():
      self.assertIs(target.arrays[name], array)  # Adopted.
    self.assertEqual(target.add_count, 8)
    self.assertEqual(target.cursor(), 3)
    self.assertEqual(target.episode_end_indices, {2})
    self.assertEqual(target.episode_end.tolist(),
                     [False, False, True, False, False])
    self.assertTrue(target.episode_start)
    self.assertEqual(target.state().keys(), source.state().keys())
    # Writes go on at the restored cursor, into the adopted arrays.
    self.assertEqual(_write(target, 42), 3)
    self.assertEqual(source.arrays['action'][3], 420)
    self.assertFalse(target.episode_start)
    _assert_episode_ends_in_step(self, target)

  def test_restore_takes_the_arrays_in_the_storage_s_order(self):
    source = storage.CircularStorage(_elements(), 3)
    state = source.state()
    state['arrays'] = dict(reversed(list(state['arrays'].items())))
    target = storage.CircularStorage(_elements(), 3)
    target.restore(state)
    self.assertEqual(list(target.arrays), ['observation', 'action', 'reward',
                                           'terminal'])
    _write(target, 3)
    self.assertEqual(source.arrays['action'][0], 30)
    np.testing.assert_array_equal(source.arrays['observation'][0], [3, 3])


class LazyArraysTest(absltest.TestCase):

  def test_large_arrays_are_mapped(self):
    array, mapping = storage.zeros((_LAZY_BYTES // 4,), np.int32)
    self.assertIsInstance(mapping, mmap.mmap)
    self.assertEqual(array.shape, (_LAZY_BYTES // 4,))
    self.assertTrue(array.flags.writeable)
    self.assertEqual((array[0], array[-1]), (0, 0))
    array[-1] = 7
    self.assertEqual(mapping[-4:], np.int32(7).tobytes())

  def test_object_arrays_are_never_mapped(self):
    array, mapping = storage.zeros((_LAZY_BYTES // 8,), object)
    self.assertIsNone(mapping)
    self.assertEqual(array.dtype, object)

  def test_allocate(self):
    frame = (256, 1024)  # 256 KiB per slot: 256 slots are lazy.
    elements = [Element('observation', frame, np.uint8),
                Element('terminal', (), np.uint8)]
    arrays, mappings = storage.allocate(elements, 256)
    self.assertEqual(list(arrays), ['observation', 'terminal'])
    self.assertEqual(arrays['observation'].shape, (256,) + frame)
    self.assertLen(mappings, 1)  # The terminal flags are small.
    self.assertEqual(mappings[0][1], 256 * 1024)  # Bytes per slot.
    with self.assertRaisesRegex(ValueError, r"names: \['observation'\]"):
      storage.allocate(elements + elements[:1], 4)

  def test_populate_backs_the_next_chunk(self):
    # 8 MiB per call: 32 slots of 256 KiB, up to the capacity.
    for start, end in ((0, 32), (100, 132), (250, 256)):
      arrays, mappings = storage.allocate(
          [Element('observation', (256, 1024), np.uint8)], 256)
      self.assertEqual(storage.populate(mappings, start, 256), end)
      arrays['observation'][end - 1] = 1  # Backed or not, writable.
      self.assertEqual(arrays['observation'][end - 1].sum(), 256 * 1024)

  def test_populate_gives_up_where_madvise_fails(self):
    failing = mock.Mock()
    failing.__len__ = mock.Mock(return_value=1 << 20)
    failing.madvise.side_effect = OSError('EINVAL')
    mappings = [(failing, 4096)]
    self.assertEqual(storage.populate(mappings, 0, 1000), 1000)
    self.assertEqual(mappings, [])  # Not tried again.

  def test_a_large_storage_backs_chunks_ahead_until_restored(self):
    elements = [Element('observation', (256, 1024), np.uint8),
                Element('terminal', (), np.uint8)]
    store = storage.CircularStorage(elements, 256)
    with mock.patch.object(
        storage, 'populate',
        side_effect=lambda mappings, start, capacity: start + 32) as populate:
      for _ in range(33):
        store.write([1, 0], False)
    # Slot 0, then slot 32: the storage asks for each chunk once.
    self.assertEqual([c.args[1:] for c in populate.call_args_list],
                     [(0, 256), (32, 256)])
    self.assertLen(populate.call_args.args[0], 1)  # The frames' mapping.
    source = storage.CircularStorage(elements, 256)
    store.restore(source.state())
    with mock.patch.object(storage, 'populate') as populate:
      for _ in range(100):  # Past the chunks asked for before.
        store.write([2, 0], False)
    populate.assert_not_called()  # The restored arrays are backed already.
    self.assertEqual(source.arrays['observation'][99, 0, 0], 2)


class ResidentBytesTest(absltest.TestCase):

  def test_resident_bytes_are_what_memory_backs(self):
    # 256 KiB frames: the frames are mapped and backed 32 slots ahead.
    elements = [Element('observation', (256, 1024), np.uint8),
                Element('terminal', (), np.uint8)]
    store = storage.CircularStorage(elements, 256)
    small = store.episode_end.nbytes + store.counters.nbytes + 256
    self.assertEqual(store.resident_nbytes, small)
    before = fixtures.resident_bytes()
    for _ in range(40):  # Backs slots 0-31, then 32-63.
      store.write([1, 0], False)
    grown = fixtures.resident_bytes() - before
    self.assertEqual(store.resident_nbytes, small + 64 * 256 * 1024)
    # What the process really gained, to a page table's slack.
    self.assertAlmostEqual(grown, 64 * 256 * 1024, delta=2 << 20)
    for _ in range(216):
      store.write([1, 0], False)
    full = store.nbytes + store.episode_end.nbytes + store.counters.nbytes
    self.assertEqual(store.resident_nbytes, full)
    store.add_count = 10  # Less written since a reassignment: still backed.
    self.assertEqual(store.resident_nbytes, full)
    fresh = storage.CircularStorage(elements, 256)
    fresh.restore(store.state())  # Restored arrays are backed whole.
    self.assertEqual(fresh.resident_nbytes, full)


class StorageSnapshotTest(absltest.TestCase):

  def test_chunks_are_the_arrays_as_they_were_while_writes_go_on(self):
    store = storage.CircularStorage(_elements((3,)), 40)
    for t in range(50):
      _write(store, t)
    before = {name: array.copy() for name, array in store.arrays.items()}
    lock = threading.RLock()
    snapshot = store.snapshot(lock)
    observations = []
    # 8 slots a chunk; two writes after each chunk, over every slot, so
    # some land before the chunks reach them and some after.
    for chunk in snapshot.chunks('observation', chunk_bytes=24):
      observations.append(chunk)
      for _ in range(2):
        with lock:
          _write(store, 1000 + store.add_count)
    # Slots read out already are not kept: at most the unread ones.
    self.assertLessEqual(snapshot.kept_rows, 3 * 40)
    actions = np.concatenate(list(snapshot.chunks('action', 24)))
    np.testing.assert_array_equal(np.concatenate(observations),
                                  before['observation'])
    np.testing.assert_array_equal(actions, before['action'])
    snapshot.release()
    self.assertEqual(snapshot.kept_rows, 0)
    _write(store, 5)  # Released: nothing is kept any more.
    self.assertEqual(snapshot.kept_rows, 0)
    self.assertFalse(np.array_equal(store.arrays['action'], before['action']))


class BufferPoolTest(absltest.TestCase):

  def test_memory_is_reused_only_once_released(self):
    pool = storage.BufferPool(size=2)
    first = pool.empty((3, 5), np.float32)
    self.assertEqual(first.ctypes.data % 64, 0)
    address = first.ctypes.data
    view = first[1:]
    del first
    second = pool.empty((3, 5), np.float32)  # `view` still holds the first.
    self.assertNotEqual(second.ctypes.data, address)
    del view
    third = pool.empty((3, 5), np.float32)
    self.assertEqual(third.ctypes.data, address)
    self.assertEqual(third.shape, (3, 5))
    self.assertEqual(third.dtype, np.float32)
    self.assertTrue(third.flags.c_contiguous)

  def test_full_pool_still_gives_distinct_memory(self):
    pool = storage.BufferPool(size=1)
    held = [pool.empty((4,), np.int64) for _ in range(3)]
    self.assertLen({a.ctypes.data for a in held}, 3)

  def test_many_sizes_keep_at_most_max_bytes(self):
    # Issue 12: the pool kept its last buffers whatever their size (3 x
    # 500k-state batches, then 750 MB with the sum tree's strata). Measured
    # with tracemalloc, which sees NumPy's data buffers.
    pool = storage.BufferPool(size=3, max_bytes=3 << 20)
    tracemalloc.start()
    self.addCleanup(tracemalloc.stop)
    start = tracemalloc.get_traced_memory()[0]
    for size in range(1 << 20, 5 << 20, 65536):  # 64 sizes of 1 to 5 MB.
      out = pool.empty((size,), np.uint8)
      self.assertEqual(out.ctypes.data % 64, 0)
      del out
      self.assertLessEqual(pool.held_bytes, 3 << 20)
    held = tracemalloc.get_traced_memory()[0] - start
    self.assertLessEqual(held, (3 << 20) + 65536)
    del pool
    self.assertLess(tracemalloc.get_traced_memory()[0] - start, 65536)

  def test_free_buffers_of_another_size_go_first(self):
    pool = storage.BufferPool(size=2, max_bytes=1 << 20)
    pool.empty((1000,), np.uint8)  # Dropped by the caller at once.
    held = pool.empty((2000,), np.uint8)
    pool.empty((3000,), np.uint8)  # Replaces the free 1000-byte buffer.
    self.assertEqual(pool.held_bytes, 2000 + 3000 + 2 * 64)
    also_held = pool.empty((4000,), np.uint8)  # Replaces the free one.
    self.assertEqual(pool.held_bytes, 2000 + 4000 + 2 * 64)
    pool.empty((5000,), np.uint8)  # All in use: replaces the newest.
    self.assertEqual(pool.held_bytes, 2000 + 5000 + 2 * 64)
    del held, also_held

  def test_outputs_over_the_budget_are_not_kept(self):
    pool = storage.BufferPool(size=3, max_bytes=1000)
    small = pool.empty((100,), np.uint8)
    large = pool.empty((2000,), np.uint8)
    self.assertEqual(large.shape, (2000,))
    self.assertEqual(pool.held_bytes, 100 + 64)
    del small, large

  def test_the_default_budget(self):
    self.assertEqual(storage.DEFAULT_POOL_BYTES, 256 << 20)
    pool = storage.BufferPool()
    kept = pool.empty((storage.DEFAULT_POOL_BYTES - 64,), np.uint8)
    self.assertEqual(pool.held_bytes, storage.DEFAULT_POOL_BYTES)
    too_large = pool.empty((storage.DEFAULT_POOL_BYTES,), np.uint8)
    self.assertEqual(pool.held_bytes, storage.DEFAULT_POOL_BYTES)
    del kept, too_large

  def test_carved_arrays_come_back_only_once_nothing_holds_them(self):
    pool = storage.BufferPool(size=4)
    carvings = []

    def carve(memory):
      carvings.append(memory.ctypes.data)
      arrays = (memory[:64].view(np.float32), memory[64:96], None)
      return arrays, 'plan data'

    key = object()
    first = pool.carved(key, 96, carve)
    self.assertEqual(first[1], 'plan data')
    self.assertEqual(first[0][0].ctypes.data % 64, 0)
    self.assertEqual(first[0][0].shape, (16,))
    arrays = first[0]
    del first
    # Each way of keeping some of the batch: the tuple, an array, a view.
    for keep in (lambda a: a, lambda a: a[1], lambda a: a[0][3:],
                 lambda a: memoryview(a[1])):
      held = keep(arrays)
      del arrays
      again = pool.carved(key, 96, carve)[0]
      self.assertNotEqual(again[0].ctypes.data, carvings[0])
      del again
      arrays = pool.carved(key, 96, carve)[0]  # Free again: the second.
      self.assertEqual(arrays[0].ctypes.data, carvings[1])
      del held
      arrays = pool.carved(key, 96, carve)[0]
      self.assertEqual(arrays[0].ctypes.data, carvings[0])
    self.assertLen(carvings, 2)  # Carved once per buffer.
    # Another key does not get these arrays.
    other = pool.carved(object(), 96, carve)[0]
    self.assertNotIn(other[0].ctypes.data, carvings[:2])
    self.assertEqual(pool.held_bytes, 3 * (96 + 64))
    del arrays, other

  def test_a_pool_of_size_zero_keeps_nothing(self):
    pool = storage.BufferPool(size=0)
    for _ in range(2):
      self.assertEqual(pool.empty((10,), np.uint8).shape, (10,))
      self.assertEqual(pool.held_bytes, 0)


if __name__ == '__main__':
  absltest.main()
