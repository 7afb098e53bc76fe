# coding=utf-8
"""Frames stored compressed, in blocks of consecutive slots (issue 33).

`CompressedFrames` stands in for a memory's observation array when
`compress_observations` is on: slot i's frame lives in block
i // BLOCK_FRAMES, compressed with LZ4 HC (level 4) in LZ4's block format
once the block's last slot is written. The block being written (the
newest frames) is kept raw. Why this format (block length, codec, no
delta, no dictionary, no cache): docs/compression.md.

With `background` (the JAX ring's frames), a full block is stored at once
as LZ4 literals and compressed by the extension's `BlockCompressor` on a
thread of its own, its block swapped in when the next one is stored; when
that thread falls behind, the adding thread compresses the oldest waiting
block itself. `settle` waits for them all.

It reads like the array it replaces (`len`, `shape`, `dtype`, indexing by
slot, slice or array of slots, `np.asarray`), so the NumPy kernels and the
checkpoint writer take it as they take the array. `nbytes` is what it
holds resident.
"""

import copy
import sys
from typing import Any, List, Optional, Tuple

import numpy as np

from dopamine_per.native import extension

__all__ = ['BLOCK_FRAMES', 'LEVEL', 'CompressedFrames', 'codec']

# Frames per block, and LZ4 HC's level (docs/compression.md).
BLOCK_FRAMES = 4
LEVEL = 4
# With `background`: our codec's level (lz4_block.h), whose blocks of
# Atari frames are about as small as HC 4's and decode as fast, and the
# blocks left waiting for the thread before the adding thread helps.
BACKGROUND_LEVEL = 6
_MOST_WAITING = 4

# What a stored block costs besides its bytes: the bytes object holding it.
_PAYLOAD_OVERHEAD = sys.getsizeof(b'')


def codec() -> Any:
  """The `lz4.block` module, which compresses and decodes blocks.

  Raises:
    ImportError: If the `lz4` package (the `compress` extra) is missing.
  """
  try:
    import lz4.block  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        'compress_observations=True needs the lz4 package: pip install '
        '"dopamine_per[compress]"') from e
  return lz4.block


class CompressedFrames(object):
  """A circular memory's frames, compressed in blocks of BLOCK_FRAMES slots.

  Block k holds slots [k * BLOCK_FRAMES, min((k + 1) * BLOCK_FRAMES,
  capacity)). A block is either stored (compressed bytes), open (being
  written: its frames raw in `open_frames`) or empty (never written: its
  frames read as zeros, as a fresh array's). Writing a slot of a stored
  block opens it (its frames decoded, so the slots not yet rewritten keep
  theirs); writing the last slot of the open block stores it: compressed
  with LZ4 HC, or with `background` as LZ4 literals, compressed later
  (module docstring).

  Attributes:
    block_frames: int, BLOCK_FRAMES.
    frame_bytes: int, the bytes of one frame.
    shape: tuple, (capacity,) + the frame shape, as the array's.
    dtype: np.dtype of the frames.
    blocks: int, the number of blocks.
    addresses: uint64 array [blocks], where each stored block's bytes are
      (0 for an open or empty block): what native code reads, under the
      memory's lock.
    sizes: int64 array [blocks], each stored block's compressed bytes.
    open_block: int64 array [1], the open block, or -1.
    open_frames: array [BLOCK_FRAMES, *frame shape], the open block's
      frames.
  """

  block_frames = BLOCK_FRAMES

  def __init__(self, capacity: int, frame_shape: Tuple[int, ...],
               dtype: Any, background: bool = False):
    self._codec = codec()
    self._background = background
    self._compressor = None
    self.shape = (int(capacity),) + tuple(frame_shape)
    self.dtype = np.dtype(dtype)
    self.frame_bytes = int(np.prod(frame_shape, dtype=np.int64) *
                            self.dtype.itemsize)
    self.blocks = -(-self.shape[0] // BLOCK_FRAMES)
    self.addresses = np.zeros(self.blocks, dtype=np.uint64)
    self.sizes = np.zeros(self.blocks, dtype=np.int64)
    self._payloads: List[Optional[bytes]] = [None] * self.blocks
    self._stored_bytes = 0
    self.open_block = np.full(1, -1, dtype=np.int64)
    self.open_frames = np.zeros((BLOCK_FRAMES,) + self.shape[1:], self.dtype)

  # ---------------------------------------------------------- array-like

  def __len__(self) -> int:
    return self.shape[0]

  @property
  def ndim(self) -> int:
    return len(self.shape)

  @property
  def nbytes(self) -> int:
    """The bytes held resident: stored blocks, the open block, tables."""
    return (self._stored_bytes + self.open_frames.nbytes +
            self.addresses.nbytes + self.sizes.nbytes +
            sys.getsizeof(self._payloads))

  def held_apart(self, other: 'CompressedFrames') -> int:
    """The bytes this copy holds that `other` (what it was copied from)
    does not: its open block, and its stored blocks `other` replaced."""
    apart = (self.addresses != other.addresses) & (self.sizes > 0)
    return (self.open_frames.nbytes + int(self.sizes[apart].sum()) +
            _PAYLOAD_OVERHEAD * int(apart.sum()))

  def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
    del copy  # Always a new array.
    frames = np.empty(self.shape, self.dtype)
    for block in range(self.blocks):  # Block by block: no fancy indexing.
      frames[block * BLOCK_FRAMES:self._block_stop(block)] = self.block(block)
    return frames if dtype is None else frames.astype(dtype)

  def __getitem__(self, key: Any) -> np.ndarray:
    """Frames by slot (int), slice of slots, or integer array of slots (any
    shape): a new array, each block read decoded once."""
    if isinstance(key, slice):
      key = np.arange(*key.indices(len(self)))
    slots = np.asarray(key)
    if slots.dtype.kind not in 'iu':
      raise IndexError('CompressedFrames takes slots, got {!r}'.format(key))
    flat = slots.reshape(-1).astype(np.int64)
    flat = np.where(flat < 0, flat + len(self), flat)
    if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
      raise IndexError('slot out of range [0, {}): {!r}'.format(
          len(self), key))
    out = np.empty((flat.size,) + self.shape[1:], self.dtype)
    # The rows grouped by block (sorted, so linear in the rows read).
    order = np.argsort(flat // BLOCK_FRAMES, kind='stable')
    blocks = flat[order] // BLOCK_FRAMES
    starts = np.flatnonzero(np.diff(blocks, prepend=-1))
    for start, stop in zip(starts.tolist(),
                           np.append(starts[1:], len(order)).tolist()):
      rows = order[start:stop]
      block = int(blocks[start])
      out[rows] = self.block(block)[flat[rows] - block * BLOCK_FRAMES]
    return out.reshape(slots.shape + self.shape[1:])

  def __setitem__(self, slot: Any, frame: Any) -> None:
    """Writes one slot's frame (a single slot only)."""
    slot = int(slot)
    block = slot // BLOCK_FRAMES
    if block != int(self.open_block[0]):
      self._store_open()
      self._open(block)
    self.open_frames[slot - block * BLOCK_FRAMES] = frame
    if slot + 1 == self._block_stop(block):
      self._store_open()

  def copy(self) -> 'CompressedFrames':
    """A copy of the frames as they are now. It shares the stored blocks
    (bytes, never changed), so it costs a list and four small arrays: a
    checkpoint's snapshot (`storage.StorageSnapshot`) takes it in place of
    keeping every row overwritten while it writes."""
    other = copy.copy(self)
    other._payloads = list(self._payloads)  # pylint: disable=protected-access
    other._compressor = None  # pylint: disable=protected-access
    for name in ('addresses', 'sizes', 'open_block', 'open_frames'):
      setattr(other, name, getattr(self, name).copy())
    return other

  # -------------------------------------------------------------- blocks

  def block(self, block: int) -> np.ndarray:
    """Block `block`'s frames [its slots, *frame shape], decoded (a view
    of `open_frames` for the open block, zeros for an empty one)."""
    count = self._block_stop(block) - block * BLOCK_FRAMES
    if block == int(self.open_block[0]):
      return self.open_frames[:count]
    payload = self._payloads[block]
    if payload is None:
      return np.zeros((count,) + self.shape[1:], self.dtype)
    raw = self._decode(block, payload)
    return np.frombuffer(raw, self.dtype).reshape((count,) + self.shape[1:])

  def payload(self, block: int) -> Optional[bytes]:
    """Stored block `block`'s compressed bytes, or None (open or empty)."""
    return self._payloads[block]

  def compress_block(self, block: int) -> Optional[bytes]:
    """Block `block`'s frames compressed as a stored block's (its payload
    if stored; None if empty)."""
    if block != int(self.open_block[0]):
      return self._payloads[block]
    raw = np.ascontiguousarray(self.block(block))
    return self._codec.compress(raw, mode='high_compression',
                                compression=LEVEL, store_size=False)

  def decodes(self, block: int, payload: bytes) -> bool:
    """Whether `payload` decodes to exactly block `block`'s bytes."""
    try:
      self._decode(block, payload)
    except ValueError:
      return False
    return True

  def _decode(self, block: int, payload: bytes) -> bytes:
    """Block `block`'s bytes from `payload`; ValueError if it does not
    decode to exactly them."""
    size = (self._block_stop(block) - block * BLOCK_FRAMES) * self.frame_bytes
    try:
      raw = self._codec.decompress(payload, uncompressed_size=size)
    except Exception as e:  # lz4.block.LZ4BlockError, a plain Exception.
      raise ValueError('compressed frame block {} does not decode (the '
                       "memory's frames are corrupt)".format(block)) from e
    if len(raw) != size:
      raise ValueError('compressed frame block {} decodes to {} bytes, not '
                       '{}'.format(block, len(raw), size))
    return raw

  def adopt(self, payloads: List[Optional[bytes]]) -> None:
    """Installs one stored payload (or None) per block, none open: what a
    checkpoint holds (`chunk_checkpoint.read` checked each)."""
    self.open_block[0] = -1
    self.open_frames[:] = 0
    for block, payload in enumerate(payloads):
      self._set_payload(block, payload)

  def _block_stop(self, block: int) -> int:
    return min((block + 1) * BLOCK_FRAMES, len(self))

  def _open(self, block: int) -> None:
    self.open_frames[:] = 0
    frames = self.block(block)
    self.open_frames[:len(frames)] = frames
    self._set_payload(block, None)
    self.open_block[0] = block

  def _store_open(self) -> None:
    block = int(self.open_block[0])
    if block < 0:
      return
    if self._background:
      payload = self._submit(block)
    else:
      payload = self.compress_block(block)
    self._set_payload(block, payload)
    self.open_block[0] = -1

  def _submit(self, block: int) -> bytes:
    """The open block `block` as literals, queued for compression (swapping
    in the blocks compressed since the last call)."""
    if self._compressor is None:
      self._compressor = extension.load().BlockCompressor(BACKGROUND_LEVEL)
    self._swap_compressed()
    while self._compressor.queued() >= _MOST_WAITING:
      self._compressor.help()
    return self._compressor.submit(block, self.block(block))

  def _swap_compressed(self) -> None:
    """Stores the blocks compressed since the last call, each in place of
    its literals if those are still the block's."""
    for block, literals, payload in self._compressor.finished():
      if payload is not None and self._payloads[block] is literals:
        self._set_payload(block, payload)

  def settle(self) -> None:
    """Waits for the blocks being compressed (with `background`) and
    stores them."""
    if self._compressor is not None:
      self._compressor.wait()
      self._swap_compressed()

  def _set_payload(self, block: int, payload: Optional[bytes]) -> None:
    old = self._payloads[block]
    if old is not None:
      self._stored_bytes -= len(old) + _PAYLOAD_OVERHEAD
    self._payloads[block] = payload
    if payload is None:
      self.addresses[block] = 0
      self.sizes[block] = 0
      return
    self._stored_bytes += len(payload) + _PAYLOAD_OVERHEAD
    self.addresses[block] = np.frombuffer(payload, np.uint8).ctypes.data
    self.sizes[block] = len(payload)

  @classmethod
  def from_array(cls, frames: np.ndarray) -> 'CompressedFrames':
    """Compresses an uncompressed memory's frames [capacity, *shape].

    With LZ4's fast mode, not HC (about 20x faster, blocks about 1.5x
    larger on Atari): loading Dopamine's files into a memory of 2**20
    takes seconds, not minutes. A block written again is stored as HC.
    """
    compressed = cls(len(frames), frames.shape[1:], frames.dtype)
    for block in range(compressed.blocks):
      start = block * BLOCK_FRAMES
      raw = np.ascontiguousarray(frames[start:compressed._block_stop(block)])
      if raw.any():
        compressed._set_payload(block, compressed._codec.compress(
            raw, mode='default', store_size=False))
    return compressed
