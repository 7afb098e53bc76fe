# coding=utf-8
"""Each step's frame stored once, in a ring of rows, read as stacks.

Row r (a step number) lives in slot r % rows: raw in an array, or (with
`compress`) in `frame_blocks.CompressedFrames`' LZ4 blocks, the format of
the TF memories' compressed frames (issue 33). Stacks are filled by the
native sampler (`fill_stacks` in native/replay_python.cc: frames.h's
TransitionStates), compressed blocks decoded a transition at a time, frames
before a stack's first step zeros. The ring grows when the rows still read
would be overwritten (episodes so short that the elements span more rows
than it holds).
"""

from typing import Any, Tuple

import numpy as np

from dopamine_per.native import extension
from dopamine_per.replay_memory.memory import frame_blocks

__all__ = ['FrameRing']


def _ring_rows(rows: int) -> int:
  """`rows` rounded up to whole blocks."""
  per = frame_blocks.BLOCK_FRAMES
  return -(-int(rows) // per) * per


class FrameRing(object):
  """Frames of `frame_shape` and `dtype` by step number, the last `rows`.

  Attributes:
    rows: int, how many steps' frames it holds.
    frame_shape: tuple, one frame's shape.
    dtype: np.dtype of the frames.
    compressed: bool, whether frames are kept in LZ4 blocks.
  """

  def __init__(self, rows: int, frame_shape: Tuple[int, ...], dtype: Any,
               compress: bool) -> None:
    self.rows = _ring_rows(rows)
    self.frame_shape = tuple(frame_shape)
    self.dtype = np.dtype(dtype)
    self.compressed = bool(compress)
    self._frames = self._new_frames(self.rows)
    self._native = extension.load()

  def _new_frames(self, rows: int) -> Any:
    if self.compressed:
      return frame_blocks.CompressedFrames(rows, self.frame_shape, self.dtype)
    return np.zeros((rows,) + self.frame_shape, self.dtype)

  @property
  def nbytes(self) -> int:
    """The bytes it holds resident."""
    return int(self._frames.nbytes)

  def write(self, row: int, frame: np.ndarray) -> None:
    """Stores step `row`'s frame (overwriting step row - rows's)."""
    self._frames[row % self.rows] = frame

  def frames(self, rows: np.ndarray) -> np.ndarray:
    """The frames of steps `rows` (held ones), as an array."""
    return self._frames[np.asarray(rows, np.int64) % self.rows]

  def fill(self, stack: int, ends: np.ndarray, firsts: np.ndarray,
           next_ends: np.ndarray, next_firsts: np.ndarray, states: np.ndarray,
           next_states: np.ndarray) -> None:
    """Fills states[b] with the `stack` frames ending at step ends[b], those
    before step firsts[b] zeros (frames last), and next_states[b] likewise;
    every step read must be held.

    Raises:
      ValueError: If a compressed block does not decode.
    """
    frames = self._frames
    if self.compressed:
      self._native.fill_stacks(
          None, self.rows, frames.block_frames, frames.addresses,
          frames.sizes, int(frames.open_block[0]), frames.open_frames, stack,
          ends, firsts, next_ends, next_firsts, states, next_states)
    else:
      self._native.fill_stacks(frames, self.rows, 1, None, None, -1, None,
                               stack, ends, firsts, next_ends, next_firsts,
                               states, next_states)

  def grow(self, rows: int, oldest: int, newest: int) -> None:
    """Holds `rows` steps from now on, keeping steps [oldest, newest]."""
    rows = _ring_rows(rows)
    old, old_rows = self._frames, self.rows
    new = self._new_frames(rows)
    steps = np.arange(oldest, newest + 1, dtype=np.int64)
    if not self.compressed:
      new[steps % rows] = old[steps % old_rows]
    else:
      per = frame_blocks.BLOCK_FRAMES
      payloads = [None] * new.blocks
      open_block = int(old.open_block[0])
      rewrite = []
      for block in range(oldest // per, newest // per + 1):
        source = block % old.blocks
        if source == open_block or old.payload(source) is None:
          rewrite.extend(range(max(block * per, oldest),
                               min((block + 1) * per, newest + 1)))
        else:
          payloads[block % new.blocks] = old.payload(source)
      new.adopt(payloads)
      for step in rewrite:
        new[step % rows] = old[step % old_rows]
    self._frames, self.rows = new, rows
