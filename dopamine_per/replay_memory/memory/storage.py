# coding=utf-8
"""A circular memory's storage: its arrays, counters and episode ends.

`CircularStorage` holds one array per stored element, one slot per
transition, the add count (the cursor is it modulo the capacity) and which
slots end an episode. The memory checks what it writes and decides what is
sampled; the storage decides nothing. Large arrays cost nothing until
written (see `zeros`). Sampled batches are written into a `BufferPool`'s
memory. What differs from Dopamine's storage: docs/compat.md#storage.
"""

import contextlib
import heapq
import math
import mmap
import sys
import threading
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import numpy as np

from dopamine_per.replay_memory.memory import frame_blocks

__all__ = ['ALIGNMENT', 'BufferPool', 'CircularStorage', 'DEFAULT_POOL_BYTES',
           'StorageSnapshot', 'allocate', 'populate', 'zeros']


class CircularStorage(object):
  """The arrays and counters of a circular replay memory.

  Attributes:
    capacity: int, the number of slots.
    arrays: dict of element name -> array [capacity, *shape]; read-only
      for anyone but the storage.
    add_count: int, transitions written so far; the memory sets it only
      after checking it (see `validation.check_add_count`). Held in
      `counters`, which the native ops read (see native_memory).
    counters: int64 array [1], the add count.
    episode_end: bool array [capacity], whether each slot ends an episode.
    episode_end_indices: set of int, the slots where `episode_end` is True.
    episode_start: bool, whether the next transition starts an episode.
  """

  def __init__(self, elements: Sequence[Any], capacity: int,
               compressed: Sequence[str] = ()):
    """Allocates zeroed arrays (lazily backed, see `zeros`).

    Args:
      elements: sequence of ReplayElement (name, per-slot shape, dtype), in
        the order `write` takes their values.
      capacity: int, the number of slots.
      compressed: the names of the elements stored as
        `frame_blocks.CompressedFrames` rather than arrays.

    Raises:
      ValueError: If two elements have the same name.
      ImportError: If an element is compressed and lz4 is missing.
    """
    self.capacity = capacity
    self.arrays, self._mappings = allocate(elements, capacity, compressed)
    # The bytes per slot of the arrays backed as they fill (see
    # `resident_nbytes`); 0 once every array is backed whole.
    self._lazy_stride = sum(stride for _, stride in self._mappings)
    self._order = [element.name for element in elements]
    self._columns = [self.arrays[name] for name in self._order]
    # The slots below this are backed by memory (see `populate`).
    self._populated = 0
    self.counters = np.zeros(1, dtype=np.int64)
    self.episode_end = np.zeros(capacity, dtype=bool)
    self.episode_end_indices = set()
    self.episode_start = True
    # The snapshots being read out (`snapshot`), which keep what `write`
    # overwrites.
    self._snapshots: List['StorageSnapshot'] = []

  @property
  def add_count(self) -> int:
    """Transitions written so far (see the class docstring)."""
    return int(self.counters[0])

  @add_count.setter
  def add_count(self, value: int) -> None:
    self.counters[0] = value

  def cursor(self) -> int:
    """The slot the next transition is written to."""
    return int(self.counters[0]) % self.capacity

  @property
  def nbytes(self) -> int:
    """The bytes of all arrays."""
    return sum(array.nbytes for array in self._columns)

  @property
  def resident_nbytes(self) -> int:
    """The bytes of the arrays and episode ends that memory backs now, and
    what pending snapshots keep (`StorageSnapshot.held_bytes`).

    A large array (see `zeros`) is backed only up to the slots written or
    populated ahead of the cursor, so a memory filling up counts only
    those; every other array counts whole.
    """
    written = min(int(self.counters[0]), self.capacity)
    backed = min(self.capacity, max(written, self._populated))
    return (self.nbytes - self._lazy_stride * (self.capacity - backed) +
            self.episode_end.nbytes + self.counters.nbytes +
            sum(snapshot.held_bytes for snapshot in self._snapshots))

  def write(self, values: Sequence[Any], ends_episode: bool) -> int:
    """Writes one checked transition at the cursor and advances it.

    Args:
      values: one value per element, in the constructor's order (extra
        trailing values are ignored).
      ends_episode: whether it is the last transition of an episode.

    Returns:
      int, the slot written.
    """
    count = int(self.counters[0])
    cursor = count % self.capacity
    for snapshot in self._snapshots:
      snapshot.preserve(cursor)
    if cursor >= self._populated and self._mappings:
      self._populated = populate(self._mappings, cursor, self.capacity)
    for array, value in zip(self._columns, values):
      array[cursor] = value
    self.episode_end[cursor] = ends_episode
    if ends_episode:
      self.episode_end_indices.add(cursor)
    else:
      self.episode_end_indices.discard(cursor)
    self.counters[0] = count + 1
    self.episode_start = ends_episode
    return cursor

  def state(self) -> Dict[str, Any]:
    """The storage as plain data (the arrays themselves, not copies).

    Returns:
      dict with 'arrays' (name -> array), 'add_count' (int),
      'episode_end_indices' (set of int) and 'episode_start' (bool).
    """
    return {'arrays': dict(self.arrays), 'add_count': self.add_count,
            'episode_end_indices': set(self.episode_end_indices),
            'episode_start': self.episode_start}

  def snapshot(self, lock: Any = None) -> 'StorageSnapshot':
    """The arrays as they are now, to read out while writes go on.

    Args:
      lock: the lock every `write` is made under, which the snapshot takes
        to copy each chunk out; None if the caller holds it until the
        snapshot is released.

    Returns:
      A `StorageSnapshot`; `release` it once read. The storage must not be
      restored before then.
    """
    snapshot = StorageSnapshot(self.arrays, lock, self._snapshots.remove)
    self._snapshots.append(snapshot)
    return snapshot

  def restore(self, state: Dict[str, Any]) -> None:
    """Installs a `state` whose arrays have this storage's names and shapes.

    The caller has validated it (a checkpoint's reader does, and gives
    compressed frames where the storage has them): this cannot fail. The
    arrays are adopted, not copied.
    """
    self.arrays = {name: state['arrays'][name] for name in self._order}
    self._columns = [self.arrays[name] for name in self._order]
    self._mappings = []  # Restored arrays are backed already.
    self._lazy_stride = 0
    self.add_count = int(state['add_count'])
    self.episode_end_indices = set(state['episode_end_indices'])
    self.episode_end[:] = False
    self.episode_end[list(self.episode_end_indices)] = True
    self.episode_start = bool(state['episode_start'])


class StorageSnapshot(object):
  """A storage's arrays as they were when taken, read out while it changes.

  Copy on write: before the storage overwrites a slot, `preserve` keeps
  the slot's old row of every array whose `chunks` have not reached it
  yet; `chunks` copies the arrays out under the storage's lock, a chunk at
  a time, with the kept rows in place. What it costs: one check per write
  while no snapshot is taken, and while one is, one row copy per array for
  each slot overwritten before it was read out.
  """

  def __init__(self, arrays: Dict[str, np.ndarray], lock: Any,
               detach: Callable[['StorageSnapshot'], None]):
    self._live = arrays
    self._arrays = dict(arrays)
    # Compressed frames are copied whole (`CompressedFrames.copy`, which
    # shares their blocks): nothing of theirs to keep or lock.
    self._copied = {name for name, array in arrays.items()
                    if isinstance(array, frame_blocks.CompressedFrames)}
    for name in self._copied:
      self._arrays[name] = self._arrays[name].copy()
    self._lock = contextlib.nullcontext() if lock is None else lock
    self._detach = detach
    # Per array: the first slot not read out yet, and the rows kept for
    # slots from there on (by slot, with a heap of their slots).
    self._progress = {name: 0 for name in arrays}
    self._kept: Dict[str, Dict[int, np.ndarray]] = {n: {} for n in arrays}
    self._heaps: Dict[str, List[int]] = {name: [] for name in arrays}
    self._released = False

  def frames(self, name: str) -> Any:
    """Element `name` as taken if it is compressed frames (a copy no one
    writes to), else None."""
    return self._arrays[name] if name in self._copied else None

  @property
  def held_bytes(self) -> int:
    """The bytes it keeps that the storage no longer holds: the rows kept,
    and its frames' blocks replaced since (and their open block)."""
    kept = sum(row.nbytes for rows in self._kept.values()
               for row in rows.values())
    return kept + sum(self._arrays[name].held_apart(self._live[name])
                      for name in self._copied)

  @property
  def kept_rows(self) -> int:
    """How many rows are kept now (for tests and accounting)."""
    return sum(len(kept) for kept in self._kept.values())

  def preserve(self, slot: int) -> None:
    """Keeps slot `slot`'s rows that are still to be read out (the
    storage calls it before it overwrites the slot, under its lock)."""
    for name, array in self._arrays.items():
      kept = self._kept[name]
      if (slot >= self._progress[name] and slot not in kept and
          name not in self._copied):
        kept[slot] = array[slot].copy()
        heapq.heappush(self._heaps[name], slot)

  def chunks(self, name: str, chunk_bytes: int = 1 << 20
            ) -> Iterator[np.ndarray]:
    """Yields array `name` as it was when taken, in chunks of slots.

    Each chunk is a copy, made under the lock, of about `chunk_bytes`
    (at least one slot), in slot order.
    """
    array = self._arrays[name]
    kept, heap = self._kept[name], self._heaps[name]
    step = max(1, chunk_bytes // max(1, array[:1].nbytes))
    for start in range(0, len(array), step):
      stop = min(start + step, len(array))
      with self._lock:
        chunk = array[start:stop].copy()
        while heap and heap[0] < stop:
          slot = heapq.heappop(heap)
          chunk[slot - start] = kept.pop(slot)
        self._progress[name] = stop
      yield chunk

  def release(self) -> None:
    """Stops keeping rows; the storage forgets the snapshot. Idempotent;
    takes the lock."""
    with self._lock:
      if not self._released:
        self._released = True
        self._detach(self)
        for kept in self._kept.values():
          kept.clear()


# TensorFlow adopts a returned array's memory without copying it (from
# tf.numpy_function) only if it is 64-byte aligned; NumPy aligns to 16.
ALIGNMENT = 64

# What a BufferPool keeps at most, by default (3 Atari batches of 2 * 512
# states fit); a larger output is handed out but not kept.
DEFAULT_POOL_BYTES = 256 << 20


class _Buffer(object):
  """A pool's buffer, and what was carved out of it (see `BufferPool`)."""

  __slots__ = ('raw', 'offset', 'key', 'carved', 'watched', 'references')

  def __init__(self, raw: np.ndarray):
    self.raw = raw
    self.offset = -raw.ctypes.data % ALIGNMENT
    self.key = None
    self.carved = None  # Returned again while the key is the same.
    # The carved objects a caller may keep: the arrays and their tuple.
    self.watched = ()
    # (references to raw, to each watched object) while nobody holds them.
    self.references = (2, ())

  def is_free(self) -> bool:
    """Whether nothing but the pool refers to the buffer or its arrays."""
    # getrefcount counts its argument, as when `references` was taken.
    return (sys.getrefcount(self.raw) == self.references[0] and
            tuple(map(sys.getrefcount, self.watched)) == self.references[1])

  def carve(self, key: Any, nbytes: int,
            carve: Callable[[np.ndarray], Tuple[Any, ...]]) -> None:
    """Carves the first aligned `nbytes` for `key`; records the references."""
    self.key = key
    self.carved = carve(self.raw[self.offset:self.offset + nbytes])
    arrays = self.carved[0]
    self.watched = (arrays,) + tuple(a for a in arrays if a is not None)
    del arrays
    self.references = (sys.getrefcount(self.raw),
                       tuple(map(sys.getrefcount, self.watched)))


class BufferPool(object):
  """Reuses the memory of earlier outputs once nothing refers to them.

  The pool keeps up to `size` buffers, of at most `max_bytes` together, and
  hands one out again only when no array (the output, a view of it, or a
  TensorFlow tensor that adopted it) still refers to it. To make room it
  drops a buffer nobody uses first, else the newest. `carved` hands out a
  whole batch's arrays, carved out of one buffer once and returned again
  (the same objects) once nothing refers to the buffer or to any of them.
  """

  def __init__(self, size: int = 3, max_bytes: int = DEFAULT_POOL_BYTES):
    self._size = size
    self._max_bytes = max_bytes
    self._buffers: List[_Buffer] = []
    self._held_bytes = 0
    self._lock = threading.Lock()

  @property
  def held_bytes(self) -> int:
    """The bytes of the buffers the pool keeps (in use or not)."""
    return self._held_bytes

  def empty(self, shape: Tuple[int, ...], dtype) -> np.ndarray:
    """Returns an uninitialized 64-byte aligned C-contiguous array."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    with self._lock:
      buffer = self._take(nbytes + ALIGNMENT, None)
    offset = buffer.offset
    return buffer.raw[offset:offset + nbytes].view(dtype).reshape(shape)

  def carved(self, key: Any, nbytes: int,
             carve: Callable[[np.ndarray], Tuple[Any, ...]]
            ) -> Tuple[Any, ...]:
    """`carve(memory)` of `nbytes` aligned bytes, or its earlier result.

    Args:
      key: what the arrays are for (a batch plan); only the same object
        (by identity) gets them again.
      nbytes: int, the bytes `carve` needs.
      carve: callable taking a uint8 array of `nbytes` (64-byte aligned),
        returning a tuple whose first item is a tuple of the arrays (or
        None) a caller may keep, each a view of that memory.

    Returns:
      `carve`'s tuple; the same one again for `key` once nothing refers to
      its arrays' memory or to the arrays in its first item.
    """
    with self._lock:
      buffer = self._take(nbytes + ALIGNMENT, key)
      if buffer.carved is None:  # A new buffer (`_take` matched the key).
        buffer.carve(key, nbytes, carve)
      return buffer.carved

  def _take(self, size: int, key: Any) -> _Buffer:
    for buffer in self._buffers:
      if (buffer.raw.nbytes == size and buffer.key is key and
          buffer.is_free()):
        return buffer
    buffer = _Buffer(np.empty(size, dtype=np.uint8))
    if self._size > 0 and size <= self._max_bytes:
      while self._buffers and (len(self._buffers) >= self._size or
                               self._held_bytes + size > self._max_bytes):
        self._held_bytes -= self._buffers.pop(self._victim()).raw.nbytes
      self._buffers.append(buffer)
      self._held_bytes += size
    return buffer

  def _victim(self) -> int:
    """The position of the buffer to drop: a free one, else the newest."""
    for position, buffer in enumerate(self._buffers):
      if buffer.is_free():
        return position
    return len(self._buffers) - 1


# Arrays of at least this many bytes are mapped, and backed _POPULATE_BYTES
# at a time ahead of the cursor (see `populate`).
_LAZY_MIN_BYTES = 64 << 20
_POPULATE_BYTES = 8 << 20
_MADV_POPULATE_WRITE = getattr(mmap, 'MADV_POPULATE_WRITE', 23)

# (mapping, bytes per slot) of one mapped array.
Mapping = Tuple[mmap.mmap, int]


def zeros(shape: Tuple[int, ...], dtype: Any) -> Tuple[np.ndarray, Any]:
  """Returns a zeroed array and, for a large one, the mapping behind it.

  A large array lives in an anonymous private mapping, which `populate`
  can back in chunks ahead of use. Small arrays, object arrays and systems
  without anonymous mappings get plain `np.zeros`.

  Args:
    shape: tuple of int.
    dtype: the array's dtype.

  Returns:
    (np.ndarray, mmap.mmap or None).
  """
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape)) * dtype.itemsize
  if (nbytes < _LAZY_MIN_BYTES or dtype.hasobject or
      not hasattr(mmap, 'MAP_ANONYMOUS')):
    return np.zeros(shape, dtype=dtype), None
  mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
  return np.frombuffer(mapping, dtype=dtype).reshape(shape), mapping


def allocate(elements: Sequence[Any], capacity: int,
             compressed: Sequence[str] = ()
            ) -> Tuple[Dict[str, np.ndarray], List[Mapping]]:
  """Allocates one zeroed array of `capacity` slots per element.

  Args:
    elements: sequence of ReplayElement (name, per-slot shape, dtype).
    capacity: int, the number of slots.
    compressed: names of elements given `frame_blocks.CompressedFrames`.

  Returns:
    ({name: array}, [(mapping, bytes per slot)] of the mapped arrays, for
    `populate`).

  Raises:
    ValueError: If two elements have the same name.
  """
  names = [element.name for element in elements]
  duplicates = sorted({name for name in names if names.count(name) > 1})
  if duplicates:
    raise ValueError('Duplicate storage element names: {}'.format(
        duplicates))
  store = {}
  mappings = []
  for element in elements:
    if element.name in compressed:
      store[element.name] = frame_blocks.CompressedFrames(
          capacity, tuple(element.shape), element.type)
      continue
    array, mapping = zeros((capacity,) + tuple(element.shape), element.type)
    store[element.name] = array
    if mapping is not None:
      mappings.append((mapping, array.strides[0]))
  return store, mappings


def populate(mappings: List[Mapping], start: int, capacity: int) -> int:
  """Backs the slots from `start` on of the mapped arrays with memory.

  MADV_POPULATE_WRITE (Linux 5.14+) backs a chunk of about _POPULATE_BYTES
  per array at once, cheaper than a page fault per page. Where it is not
  supported, `mappings` is emptied and the pages fault in as usual.

  Args:
    mappings: list of (mapping, bytes per slot), from `allocate`; emptied
      in place if madvise fails.
    start: int, the first slot to back.
    capacity: int, the number of slots.

  Returns:
    int, the slot up to which the arrays are now backed (exclusive).
  """
  end = min(capacity, start + max(1, _POPULATE_BYTES // max(
      stride for _, stride in mappings)))
  try:
    for mapping, stride in mappings:
      first = start * stride // mmap.PAGESIZE * mmap.PAGESIZE
      stop = min(len(mapping), -(-end * stride // mmap.PAGESIZE) *
                 mmap.PAGESIZE)
      mapping.madvise(_MADV_POPULATE_WRITE, first, stop - first)
  except (OSError, ValueError):
    mappings.clear()
  return end
