# coding=utf-8
"""A batch whose states stay the compressed blocks they are stored as.

A memory storing compressed frames (`frame_blocks.CompressedFrames`)
answers ``sample_transition_batch(..., ship_frames=True)`` with
`shipped_batch`: every element but the two states, and in place of the
states one `ShippedFrames`, the stored LZ4 blocks that the batch's stacks
read, as they are stored (nothing decoded or compressed), the open block
raw, and where each stack ends. An Ape-X shard sends it to the learner,
which fills the states (`distributed.frame_shipping.fill_states`, or the
learner's native batch queue). Why blocks: docs/distributed.md#what-goes-
over-the-wire.

NumPy only.
"""

from typing import Any, Callable, Iterable, Tuple

import numpy as np

from dopamine_per.replay_memory.memory import frame_blocks

__all__ = ['ShippedFrames', 'compressed', 'shipped_batch']


class ShippedFrames(object):
  """The frames of a batch's states, as a memory stores them.

  Attributes:
    capacity: int, the memory's slots.
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
      frames: frame_blocks.CompressedFrames, the memory's frames (read
        through its public attributes, under the memory's lock).
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


def compressed(storage: Any) -> bool:
  """Whether a memory's `storage` holds its frames compressed (blocks)."""
  return isinstance(storage.arrays['observation'],
                    frame_blocks.CompressedFrames)


def shipped_batch(memory: Any, slots: np.ndarray,
                  trajectories: Callable[..., Any],
                  rest: Iterable[np.ndarray]) -> Tuple[Any, ...]:
  """A memory's batch at valid `slots`, its states one `ShippedFrames`.

  Called by the memory, holding its lock.

  Args:
    memory: an OutOfGraph(Prioritized)ReplayBuffer with compressed frames
      (read through its public surface).
    slots: int64 [batch], valid slots.
    trajectories: the memory's kernels' `trajectories` (the n-step walk
      that finds each next state's slot).
    rest: the batch's arrays but the states, in the layout's order.

  Returns:
    tuple laid out as `memory.get_transition_elements(len(slots))`: at
    ``state``'s position the ShippedFrames (of both states), at
    ``next_state``'s None, elsewhere the arrays of `rest`.
  """
  store = memory.storage.arrays
  next_slots = trajectories(slots, memory.replay_capacity, store['terminal'],
                            store['reward'], memory.discounts)[0]
  shipped = ShippedFrames(store['observation'], memory.stack_size, slots,
                          next_slots)
  rest = iter(rest)
  return tuple(shipped if e.name == 'state' else
               None if e.name == 'next_state' else next(rest)
               for e in memory.get_transition_elements(len(slots)))
