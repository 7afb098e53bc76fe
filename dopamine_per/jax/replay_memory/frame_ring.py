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

from typing import Any, Callable, Tuple

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
    if not self.compressed:
      new = self._new_frames(rows)
      steps = np.arange(oldest, newest + 1, dtype=np.int64)
      new[steps % rows] = self._frames[steps % self.rows]
      self._frames, self.rows = new, rows
      return
    chunks = []
    sizes = self.export(oldest, newest, chunks.append)
    self.restore(rows, oldest, newest, sizes, memoryview(b''.join(chunks)))

  def export(self, oldest: int, newest: int,
             write: Callable[[bytes], Any]) -> np.ndarray:
    """Writes steps [oldest, newest]' frames (oldest <= newest) through
    `write`, as `restore` reads them back.

    Raw frames are written in step order. Compressed ones go a block at a
    time (the blocks of BLOCK_FRAMES consecutive steps from a multiple of
    it): a stored block's LZ4 bytes as they are, the open block's held
    steps raw.

    Returns:
      int64 array, for a compressed ring the bytes written per block (-1:
      raw frames); empty for a raw ring.
    """
    if not self.compressed:
      steps = np.arange(oldest, newest + 1, dtype=np.int64)
      write(np.ascontiguousarray(self._frames[steps % self.rows]).tobytes())
      return np.zeros(0, np.int64)
    per, frames = frame_blocks.BLOCK_FRAMES, self._frames
    first, last = oldest // per, newest // per
    sizes = np.empty(last - first + 1, np.int64)
    for block in range(first, last + 1):
      slot = block % frames.blocks
      payload = frames.payload(slot)
      if payload is None or slot == int(frames.open_block[0]):
        sizes[block - first] = -1
        held = self._held(block, oldest, newest)
        write(np.ascontiguousarray(self.frames(held)).tobytes())
      else:
        sizes[block - first] = len(payload)
        write(payload)
    return sizes

  def restore(self, rows: int, oldest: int, newest: int, sizes: np.ndarray,
              data: memoryview) -> None:
    """Replaces the frames with `export`'s, holding `rows` steps.

    Raises:
      ValueError: If `data` and `sizes` do not fit the steps, or a block
        does not decode to its frames (nothing replaced).
    """
    rows = _ring_rows(rows)
    frame_bytes = int(np.prod(self.frame_shape, dtype=np.int64) *
                      self.dtype.itemsize)
    new = self._new_frames(rows)
    if not self.compressed:
      steps = np.arange(oldest, newest + 1, dtype=np.int64)
      if len(data) != len(steps) * frame_bytes:
        raise ValueError('the frames hold {} bytes, not {} steps of {}'
                         .format(len(data), len(steps), frame_bytes))
      new[steps % rows] = np.frombuffer(data, self.dtype).reshape(
          (len(steps),) + self.frame_shape)
      self._frames, self.rows = new, rows
      return
    per = frame_blocks.BLOCK_FRAMES
    first = oldest // per
    if len(sizes) != newest // per - first + 1:
      raise ValueError('{} block sizes for steps [{}, {}]'.format(
          len(sizes), oldest, newest))
    payloads, raw, at = [None] * new.blocks, [], 0
    for j, size in enumerate(sizes.tolist()):
      block = first + j
      if size < 0:
        held = self._held(block, oldest, newest)
        size = len(held) * frame_bytes
        raw.append((held, data[at:at + size]))
      else:
        payload = bytes(data[at:at + size])
        if not new.decodes(block % new.blocks, payload):
          raise ValueError('frame block {} does not decode'.format(block))
        payloads[block % new.blocks] = payload
      at += size
      if at > len(data):
        raise ValueError('the frames end before block {}'.format(block))
    if at != len(data):
      raise ValueError('the frames hold {} bytes past their blocks'.format(
          len(data) - at))
    new.adopt(payloads)
    for held, frames in raw:
      values = np.frombuffer(frames, self.dtype).reshape(
          (len(held),) + self.frame_shape)
      for step, frame in zip(held.tolist(), values):
        new[step % rows] = frame
    self._frames, self.rows = new, rows

  @staticmethod
  def _held(block: int, oldest: int, newest: int) -> np.ndarray:
    """The steps of block `block` within [oldest, newest]."""
    per = frame_blocks.BLOCK_FRAMES
    return np.arange(max(block * per, oldest),
                     min((block + 1) * per, newest + 1), dtype=np.int64)
