# coding=utf-8
"""A shard's batch with its frames still compressed (issue 33, item 4).

A shard whose memory stores compressed frames (`frame_blocks`) answers a
batch with `pack_batch`, the memory's ``sample_transition_batch(...,
ship_frames=True)``: every element but the two states, and in place of
the states a `ShippedFrames` (replay_memory/memory/shipped_frames.py),
the stored LZ4 blocks that the batch's stacks read, as they are stored
(no decoding or compressing on the shard), the open block raw, and where
each stack ends. The learner fills the states from it with `fill_states`:
in native code
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
from dopamine_per.replay_memory.memory import frame_blocks
from dopamine_per.replay_memory.memory import shipped_frames

__all__ = ['ShippedFrames', 'fill_states', 'pack_batch', 'ships_frames',
           'unpacked_states']


# The class of a batch's shipped frames (replay_memory/memory's).
ShippedFrames = shipped_frames.ShippedFrames


def ships_frames(memory: Any) -> bool:
  """Whether `memory`'s batches go as `pack_batch`es: its frames are
  compressed blocks."""
  return shipped_frames.compressed(memory.storage)


def pack_batch(memory: Any, slots: Any) -> Tuple[Any, ...]:
  """A memory's batch at `slots`, its states as one `ShippedFrames`:
  ``memory.sample_transition_batch(indices=slots, ship_frames=True)``
  (see there; raises as it does)."""
  return memory.sample_transition_batch(indices=slots, ship_frames=True)


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
