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

from typing import Any, Container, List, NamedTuple, Sequence, Tuple

import numpy as np

from dopamine_per.native import extension
from dopamine_per.replay_memory.memory import frame_blocks

__all__ = ['FrameRing', 'PartKey', 'FramePart', 'RAW_PART_STEPS']

# Steps per part of a raw ring's frames in a checkpoint.
RAW_PART_STEPS = 256


class PartKey(NamedTuple):
  """A part of a ring's frames: an LZ4 block's bytes (`compressed`) or raw
  frames, of steps [first, last]. Its frames never change."""
  compressed: bool
  first: int
  last: int


class FramePart(NamedTuple):
  """A part's key and its bytes (None: saved already, not copied)."""
  key: PartKey
  data: Any


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
      return frame_blocks.CompressedFrames(rows, self.frame_shape, self.dtype,
                                           background=True)
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
    self.restore(rows, oldest, newest, self.parts(oldest, newest))

  def parts(self, oldest: int, newest: int,
            known: Container[PartKey] = ()) -> List[FramePart]:
    """Steps [oldest, newest]'s frames (oldest <= newest) as parts, in
    step order, which `restore` reads back.

    A compressed ring's stored block is one part, its LZ4 bytes as they
    are (all its steps, even some before `oldest`); the open block's held
    steps are a raw part. A raw ring's parts are RAW_PART_STEPS steps from
    a multiple of it. A part's frames never change (steps are written
    once), so one whose key is in `known` (saved already) gets no data.
    """
    parts = []

    def add(compressed: bool, first: int, last: int, data: Any) -> None:
      key = PartKey(compressed, first, last)
      parts.append(FramePart(key, None if key in known else data()))

    if not self.compressed:
      for group in range(oldest // RAW_PART_STEPS,
                         newest // RAW_PART_STEPS + 1):
        held = _held(group, RAW_PART_STEPS, oldest, newest)
        add(False, int(held[0]), int(held[-1]),
            lambda held=held: self.frames(held).tobytes())
      return parts
    per, frames = frame_blocks.BLOCK_FRAMES, self._frames
    frames.settle()  # Blocks, not the literals they are stored as at first.
    for block in range(oldest // per, newest // per + 1):
      slot = block % frames.blocks
      payload = frames.payload(slot)
      if payload is None or slot == int(frames.open_block[0]):
        held = _held(block, per, oldest, newest)
        add(False, int(held[0]), int(held[-1]),
            lambda held=held: self.frames(held).tobytes())
      else:
        add(True, block * per, block * per + per - 1,
            lambda payload=payload: payload)
    return parts

  def restore(self, rows: int, oldest: int, newest: int,
              parts: Sequence[FramePart]) -> None:
    """Replaces the frames with `parts`' (each with its data), holding
    `rows` steps.

    Raises:
      ValueError: If the parts do not cover steps [oldest, newest] in
        order, a raw part's bytes are not its frames', or a block does not
        decode to its frames (nothing replaced).
    """
    rows = _ring_rows(rows)
    per = frame_blocks.BLOCK_FRAMES
    frame_bytes = int(np.prod(self.frame_shape, dtype=np.int64) *
                      self.dtype.itemsize)
    new = self._new_frames(rows)
    payloads = [None] * (new.blocks if self.compressed else 0)
    raw, expected = [], oldest
    for (compressed, first, last), data in parts:
      if (data is None or first > expected or last < expected or
          (not compressed and first != expected)):
        raise ValueError('frame part [{}, {}] does not follow step {}'.format(
            first, last, expected - 1))
      if compressed:
        if not self.compressed or first % per or last != first + per - 1:
          raise ValueError('no frame block holds steps [{}, {}]'.format(
              first, last))
        payload = bytes(data)
        if not new.decodes((first // per) % new.blocks, payload):
          raise ValueError('frame block {} does not decode'.format(
              first // per))
        payloads[(first // per) % new.blocks] = payload
      else:
        if len(data) != (last - first + 1) * frame_bytes:
          raise ValueError('frame part [{}, {}] holds {} bytes'.format(
              first, last, len(data)))
        raw.append((first, last, data))
      expected = last + 1
    if expected <= newest:
      raise ValueError('the frame parts end at step {}, not {}'.format(
          expected - 1, newest))
    if self.compressed:
      new.adopt(payloads)
    for first, last, data in raw:
      values = np.frombuffer(data, self.dtype).reshape(
          (last - first + 1,) + self.frame_shape)
      if not self.compressed:
        _write_wrapping(new, first % rows, values)
        continue
      for step, frame in zip(range(first, last + 1), values):
        new[step % rows] = frame
    self._frames, self.rows = new, rows


def _held(unit: int, size: int, oldest: int, newest: int) -> np.ndarray:
  """The steps of unit `unit` (of `size` steps from a multiple of it)
  within [oldest, newest]."""
  return np.arange(max(unit * size, oldest),
                   min((unit + 1) * size, newest + 1), dtype=np.int64)


def _write_wrapping(frames: np.ndarray, slot: int, values: np.ndarray) -> None:
  """frames[slot:] = values, wrapping around (two copies, no gather)."""
  head = min(len(values), len(frames) - slot)
  frames[slot:slot + head] = values[:head]
  frames[:len(values) - head] = values[head:]
