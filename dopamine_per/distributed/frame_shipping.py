# coding=utf-8
"""A shard's batch with its frames still compressed (issue 33, item 4).

A shard whose memory stores compressed frames (`frame_blocks`) answers a
batch with `pack_batch`: every element but the two states, and in place
of the states a `ShippedFrames`, the stored LZ4 blocks that the batch's
stacks read, as they are stored (no decoding or compressing on the
shard), the open block raw, and where each stack ends. The learner fills
the states from it with `fill_states`: in native code
(`fill_shipped_states` of the extension: batch.h's FillStates over the
shipped blocks), or with NumPy where the extension does not build. Why
blocks rather than the batch's frames compressed anew, and the bytes:
docs/distributed.md#what-goes-over-the-wire.

NumPy and the TF-free memory only: a shard never imports TensorFlow.
"""

from typing import Any, Tuple

import numpy as np

from dopamine_per.native import build
from dopamine_per.native import extension
from dopamine_per.replay_memory.memory import batch_plan
from dopamine_per.replay_memory.memory import frame_blocks
from dopamine_per.replay_memory.memory import sampling

__all__ = ['ShippedFrames', 'fill_states', 'pack_batch', 'ships_frames',
           'unpacked_states']


class ShippedFrames(object):
  """The frames of a batch's states, as a shard stores them.

  Attributes:
    capacity: int, the shard memory's slots.
    block_frames: int, slots per block.
    stack: int, frames per state.
    frame_shape: tuple, one frame's shape; dtype: its np.dtype.
    numbers: int64 [n], the stored or empty blocks the stacks read,
      increasing (the open block aside).
    sizes: int64 [n], each block's LZ4 bytes (0: never stored, zeros).
    payload: uint8 [sum(sizes)], the blocks' LZ4 bytes, in order.
    open_block: int, the open block if the stacks read it, else -1.
    open_frames: [block_frames, *frame_shape], its frames (zeros if none).
    ends, next_ends: int64 [batch], the slots each state and next state
      end at.
  """

  def __init__(self, frames: Any, stack: int, ends: np.ndarray,
               next_ends: np.ndarray):
    """Takes what the stacks ending at `ends` and `next_ends` read.

    Args:
      frames: frame_blocks.CompressedFrames, the memory's frames.
      stack: int, frames per state.
      ends, next_ends: int64 arrays [batch] of slots.
    """
    self.capacity, self.block_frames = len(frames), frames.block_frames
    self.stack, self.frame_shape = int(stack), tuple(frames.shape[1:])
    self.dtype = frames.dtype
    self.ends = np.ascontiguousarray(ends, dtype=np.int64)
    self.next_ends = np.ascontiguousarray(next_ends, dtype=np.int64)
    read = (np.concatenate([self.ends, self.next_ends])[:, None] +
            np.arange(1 - self.stack, 1)) % self.capacity
    blocks = np.unique(read // self.block_frames)
    open_block = int(frames.open_block[0])
    self.open_block = open_block if open_block in blocks else -1
    self.open_frames = (frames.open_frames.copy() if self.open_block >= 0
                        else np.zeros_like(frames.open_frames))
    self.numbers = blocks[blocks != open_block].astype(np.int64)
    self.sizes = frames.sizes[self.numbers].astype(np.int64)
    self.payload = np.frombuffer(b''.join(
        frames.payload(int(k)) or b'' for k in self.numbers), np.uint8)

  @property
  def nbytes(self) -> int:
    """The bytes of its arrays: what it costs on the wire, besides ~1 KB
    of pickled attributes."""
    return sum(array.nbytes for array in (
        self.numbers, self.sizes, self.payload, self.open_frames, self.ends,
        self.next_ends))

  def state_shape(self) -> Tuple[int, ...]:
    """One state's shape: the frame's, then the stack."""
    return self.frame_shape + (self.stack,)


def ships_frames(memory: Any) -> bool:
  """Whether `memory`'s batches go as `pack_batch`es: its frames are
  compressed blocks."""
  return isinstance(memory.storage.arrays['observation'],
                    frame_blocks.CompressedFrames)


def pack_batch(memory: Any, slots: Any) -> Tuple[Any, ...]:
  """A memory's batch at `slots`, its states as one `ShippedFrames`.

  The memory's `sample_transition_batch(indices=slots)`, but at the
  position of ``state`` a ShippedFrames (for both states) and None at
  ``next_state``'s; no frame is decoded. Uses the memory's own plan and
  kernels (private to it, in this package): the other elements are
  exactly the memory's.

  Args:
    memory: an OutOfGraph(Prioritized)ReplayBuffer with compressed frames.
    slots: 1-D sequence of valid slots.

  Raises:
    ValueError: As `sample_transition_batch(indices=slots)`.
  """
  # pylint: disable=protected-access
  with memory._lock:
    slots = sampling.check_sample_indices(slots, memory._valid_mask,
                                          memory._invalid_reason)
    plan = memory._batch_plan(len(slots), states=False)
    rest = iter(memory._gather(slots, plan))
    arrays = memory.storage.arrays
    next_slots = memory._kernels.trajectories(
        slots, memory.replay_capacity, arrays['terminal'], arrays['reward'],
        memory.discounts)[0]
    shipped = ShippedFrames(arrays['observation'], memory.stack_size, slots,
                            next_slots)
  # pylint: enable=protected-access
  layout = memory.get_transition_elements(len(slots))
  return tuple(shipped if e.name == 'state' else
               None if e.name == 'next_state' else next(rest)
               for e in layout)


def fill_states(shipped: ShippedFrames, states: np.ndarray,
                next_states: np.ndarray) -> None:
  """Fills a batch's states and next states from `shipped`.

  Args:
    shipped: ShippedFrames of a batch of B.
    states, next_states: writable C-contiguous arrays [B, *state_shape] of
      the frames' dtype.

  Raises:
    ValueError: If `shipped` is malformed or a block does not decode.
  """
  try:
    module = extension.load()
  except build.NativeBuildError:
    module = None
  if module is None:
    _fill_with_numpy(shipped, states, next_states)
    return
  module.fill_shipped_states(
      shipped.payload, shipped.numbers, shipped.sizes, shipped.open_block,
      shipped.open_frames, shipped.ends, shipped.next_ends, shipped.capacity,
      shipped.block_frames, shipped.stack, states, next_states)


def _fill_with_numpy(shipped: ShippedFrames, states: np.ndarray,
                     next_states: np.ndarray) -> None:
  """`fill_states` in NumPy (lz4's codec): the reference."""
  codec = frame_blocks.codec()
  offsets = np.concatenate([[0], np.cumsum(shipped.sizes)])
  frame_bytes = shipped.dtype.itemsize * int(np.prod(shipped.frame_shape))

  def block(k: int) -> np.ndarray:
    count = min(shipped.block_frames,
                shipped.capacity - k * shipped.block_frames)
    if k == shipped.open_block:
      return shipped.open_frames[:count]
    j = int(np.searchsorted(shipped.numbers, k))
    if j >= len(shipped.numbers) or shipped.numbers[j] != k:
      raise ValueError('shipped frames lack block {}'.format(k))
    if not shipped.sizes[j]:
      return np.zeros((count,) + shipped.frame_shape, shipped.dtype)
    raw = codec.decompress(
        shipped.payload[offsets[j]:offsets[j + 1]].tobytes(),
        uncompressed_size=count * frame_bytes)
    return np.frombuffer(raw, shipped.dtype).reshape(
        (count,) + shipped.frame_shape)

  for out, ends in ((states, shipped.ends), (next_states, shipped.next_ends)):
    slots = (ends[:, None] + np.arange(1 - shipped.stack, 1)) % \
        shipped.capacity
    decoded = {}
    for position in range(shipped.stack):
      column = slots[:, position]
      frames = np.empty((len(column),) + shipped.frame_shape, shipped.dtype)
      for row, slot in enumerate(column.tolist()):
        k = slot // shipped.block_frames
        if k not in decoded:
          decoded[k] = block(k)
        frames[row] = decoded[k][slot - k * shipped.block_frames]
      out[..., position] = frames


def unpacked_states(shipped: ShippedFrames
                   ) -> Tuple[np.ndarray, np.ndarray]:
  """New (states, next_states) arrays filled from `shipped`."""
  shape = (len(shipped.ends),) + shipped.state_shape()
  states = np.empty(shape, shipped.dtype)
  next_states = np.empty(shape, shipped.dtype)
  fill_states(shipped, states, next_states)
  return states, next_states
