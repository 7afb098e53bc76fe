# coding=utf-8
"""A native queue of ready replay batches, for the learner's dequeue op.

`BatchQueue` is batch_queue.h's queue, registered in the core library
beside the memories (an id and a random token, as `NativeMemory`'s): a
sharded memory's fetch-ahead thread pushes batches into it
(`distributed.native_feed`), and the TensorFlow op
``DopaminePerDequeueBatch`` (`replay_memory.graph.native_ops.dequeue`)
takes them out without Python or the GIL, filling the states of rows that
a shard shipped as compressed blocks (`ShippedFrames`) in native code.
The op ``DopaminePerQueuePriorities`` leaves the learner's priority
updates in it, which the memory takes (`take_priorities`). A pushed
batch is copied: the caller may reuse its arrays at once. ctypes
releases the GIL during every call, so a push waiting for room does not
hold it.

NumPy and ctypes only (no TensorFlow).
"""

import ctypes
import secrets
from typing import Any, Optional, Sequence, Tuple
import weakref

import numpy as np

from dopamine_per.native import core

__all__ = ['BatchQueue', 'Blocks', 'ReadyBatch', 'StateRows', 'queue_count']

# absl::StatusCode values a queued error carries.
INVALID_ARGUMENT = 3
FAILED_PRECONDITION = 9
UNKNOWN = 2

# Rows of a batch whose states a shard's shipped blocks fill:
# (Blocks, rows in the batch, int64 slots the states end at, the same for
# the next states).
StateRows = Tuple['Blocks', np.ndarray, np.ndarray, np.ndarray]


def _pointer(array: np.ndarray) -> int:
  return array.ctypes.data


def _int64s(values: Any) -> np.ndarray:
  return np.ascontiguousarray(values, dtype=np.int64)


class Blocks(object):
  """A shard's shipped blocks, copied into native memory once (several
  batches of one draw share them)."""

  def __init__(self, shipped: Any):
    """Copies `shipped`'s blocks.

    Args:
      shipped: shipped_frames.ShippedFrames.

    Raises:
      ValueError: If its arrays do not fit together.
    """
    self._library = core.load()
    payload = np.ascontiguousarray(shipped.payload, dtype=np.uint8)
    numbers, sizes = _int64s(shipped.numbers), _int64s(shipped.sizes)
    open_frames = np.ascontiguousarray(shipped.open_frames)
    self.handle = self._library.per_blocks_create(
        _pointer(payload), payload.nbytes, _pointer(numbers),
        _pointer(sizes), len(numbers), int(shipped.open_block),
        _pointer(open_frames), open_frames.nbytes, int(shipped.capacity),
        int(shipped.block_frames))
    if not self.handle:
      raise ValueError('shipped frames whose blocks, sizes and payload do '
                       'not fit together')
    weakref.finalize(self, self._library.per_blocks_release, self.handle)


class BatchQueue(object):
  """A registered native queue of at most `capacity` ready batches.

  Attributes:
    id: int, its registry id; token: int, its random 64-bit token (the op
      carries both, as the memory ops do).
    capacity: int, the batches it holds.
  """

  def __init__(self, capacity: int):
    """Registers an empty queue.

    Raises:
      dopamine_per.native.build.NativeBuildError: If the core library
        cannot be built or loaded.
    """
    self._library = core.load()
    self.capacity = int(capacity)
    self.token = secrets.randbits(64)
    handle = ctypes.c_void_p()
    self.id = self._library.per_queue_create(ctypes.byref(handle),
                                             self.token, self.capacity)
    self._handle = handle.value
    weakref.finalize(self, _destroy, self._library, self.id, self._handle)

  def push(self, batch: 'ReadyBatch', generation: int,
           timeout_s: float) -> Optional[bool]:
    """Queues `batch` once there is room, waiting up to `timeout_s`.

    Args:
      batch: a ReadyBatch; the queue takes it unless this returns False.
      generation: int, `generation` when the batch was sampled: a batch of
        a generation that `clear` ended is dropped.
      timeout_s: float, how long to wait for room.

    Returns:
      True: queued; False: no room within timeout_s (push it again);
      None: dropped (stale, or the queue is closed).
    """
    pushed = self._library.per_queue_push(self._handle, batch.handle,
                                          generation, timeout_s)
    if pushed == 0:
      return False
    batch.given()
    return True if pushed == 1 else None

  def push_error(self, code: int, message: str, generation: int) -> None:
    """Queues an error: the op that takes it raises it (status `code`, an
    absl::StatusCode), whatever room is left."""
    batch = self._library.per_batch_create(0, int(code),
                                           message.encode('utf-8', 'replace'))
    if not self._library.per_queue_push(self._handle, batch, generation,
                                        0.0):
      self._library.per_batch_release(batch)

  def clear(self) -> int:
    """Drops the queued batches and those being sampled; the generation
    from now on."""
    return int(self._library.per_queue_clear(self._handle))

  def close(self) -> None:
    """Drops the queued batches; ops waiting or to come fail (idempotent)."""
    self._library.per_queue_close(self._handle)

  @property
  def generation(self) -> int:
    """The current generation (see `push`)."""
    return int(self._library.per_queue_generation(self._handle))

  def __len__(self) -> int:
    return int(self._library.per_queue_size(self._handle))

  def take_priorities(self) -> Tuple[np.ndarray, np.ndarray]:
    """Takes the priority updates the ops queued, oldest first: (int64
    global slots, float64 priorities), checked by the op."""
    count = int(self._library.per_queue_pending_priorities(self._handle))
    indices = np.empty(count, np.int64)
    priorities = np.empty(count, np.float64)
    taken = self._library.per_queue_take_priorities(
        self._handle, _pointer(indices), _pointer(priorities), count)
    return indices[:taken], priorities[:taken]

  def wait_wanted(self, timeout_s: float) -> bool:
    """Waits up to `timeout_s` until an op waits on the empty queue."""
    return bool(self._library.per_queue_wait_wanted(self._handle, timeout_s))


class ReadyBatch(object):
  """A batch copied into native memory, for `BatchQueue.push`."""

  def __init__(self, arrays: Sequence[Optional[np.ndarray]],
               parts: Sequence[StateRows]):
    """Copies a batch.

    Args:
      arrays: the batch's elements, in the op's order (each with the
        batch's rows first); None for the states that `parts` fill.
      parts: the rows whose states shipped blocks fill.

    Raises:
      ValueError: If a part's rows or slots are out of range.
    """
    library = core.load()
    self.handle = library.per_batch_create(len(arrays), 0, None)
    self._finalizer = weakref.finalize(self, library.per_batch_release,
                                       self.handle)
    rows = 0
    for index, array in enumerate(arrays):
      if array is not None:
        array = np.ascontiguousarray(array)
        rows = len(array)
        library.per_batch_set_element(self.handle, index, _pointer(array),
                                      array.nbytes)
    for blocks, positions, ends, next_ends in parts:
      positions, ends = _int64s(positions), _int64s(ends)
      next_ends = _int64s(next_ends)
      if library.per_batch_add_part(
          self.handle, blocks.handle, _pointer(positions), _pointer(ends),
          _pointer(next_ends), len(positions), rows):
        raise ValueError('state rows out of range of the batch or of the '
                         "shard's capacity")

  def given(self) -> None:
    """The queue owns the batch now: this object no longer frees it."""
    self._finalizer.detach()
    self.handle = None


def _destroy(library: Any, queue_id: int, handle: int) -> None:
  """Closes and unregisters a queue, then drops this reference to it."""
  library.per_queue_destroy(queue_id, handle)
  library.per_queue_release(handle)


def queue_count() -> int:
  """The registered queues not yet destroyed (for lifetime tests)."""
  return int(core.load().per_queue_count())
