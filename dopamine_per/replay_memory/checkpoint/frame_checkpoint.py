# coding=utf-8
"""Compressed frames in a checkpoint: their blocks as they are (issue 33).

A memory whose frames are `frame_blocks.CompressedFrames` saves them in two
files in place of Dopamine's ``$store$_observation_ckpt.N.gz``:

- ``frame_blocks_ckpt.N.gz``, the index: a gzip'd ``.npy`` of int64,
  ``[FORMAT_VERSION, block_frames, blocks, chunks]``, then each block's
  compressed size (0: a block never written, its frames zeros), then each
  chunk's decompressed and compressed sizes.
- ``frame_packs_ckpt.N.gz``, the packs: a gzip'd (stored, not deflated)
  ``.npy`` of uint8 holding the chunks, each one zstd frame of about
  CHUNK_BYTES of the blocks' LZ4 bytes, in block order.

zstd finds what LZ4 leaves (its unencoded literals, the repeats beyond
its window): about 4.8x over the blocks on Atari (docs/compression.md).
Loading undoes zstd only and adopts the blocks as they are, each checked
to decode; every size is bounded by the memory's configuration before
anything is read or allocated.
"""

from typing import Any, BinaryIO, Callable, Dict, List, Optional, Tuple

import numpy as np

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.replay_memory.memory import frame_blocks

__all__ = ['INDEX_NAME', 'PACKS_NAME', 'FILES', 'FORMAT_VERSION',
           'CHUNK_BYTES', 'ZSTD_LEVEL', 'Packed', 'compressed', 'pack',
           'writers', 'as_stored', 'value', 'read']

# The files' names (as checkpoint file names: ``{name}_ckpt.{N}.gz``).
INDEX_NAME = 'frame_blocks'
PACKS_NAME = 'frame_packs'
# (name, format) of the two files, as memory_checkpoint's layout lists them.
FILES = [(INDEX_NAME, 'npy'), (PACKS_NAME, 'npy')]
FORMAT_VERSION = 1
# The LZ4 bytes per zstd chunk, and zstd's level (docs/compression.md).
CHUNK_BYTES = 1 << 20
ZSTD_LEVEL = 3
# The most decompressed bytes a chunk may claim (a bomb's bound).
_MAX_CHUNK_BYTES = 64 << 20
# Index fields before the sizes.
_HEADER = 4


def _zstd() -> Any:
  """The `zstandard` module (the `compress` extra)."""
  try:
    import zstandard  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        'Checkpoints of compressed frames need the zstandard package: pip '
        'install "dopamine_per[compress]"') from e
  return zstandard


class Packed(object):
  """A `CompressedFrames`' blocks packed for a checkpoint.

  Attributes:
    index: int64 array, the index file's content.
    packs: uint8 array, the packs file's content.
  """

  def __init__(self, index: np.ndarray, packs: np.ndarray):
    self.index = index
    self.packs = packs

  def writers(self) -> Dict[str, Callable[[BinaryIO], None]]:
    """{file name: writer} of the two files."""
    return {INDEX_NAME: gzip_files.npy_gz_writer(self.index, INDEX_NAME),
            PACKS_NAME: gzip_files.npy_gz_writer(self.packs, PACKS_NAME,
                                                 level=0)}


def compressed(memory: Any) -> bool:
  """Whether `memory`'s frames are compressed (and saved as blocks)."""
  return isinstance(memory.storage.arrays['observation'],
                    frame_blocks.CompressedFrames)


def writers(snapshot: Any, name: str
           ) -> Dict[str, Callable[[BinaryIO], None]]:
  """{file name: writer} of a `storage.StorageSnapshot`'s element `name`
  if it is compressed frames, else {}. The blocks are packed once, by the
  first writer called (in the saving thread, not the snapshot's)."""
  frames = snapshot.frames(name)
  if frames is None:
    return {}
  packed = []

  def writer(file_name: str) -> Callable[[BinaryIO], None]:
    def write(f: BinaryIO) -> None:
      if not packed:
        packed.append(pack(frames))
      packed[0].writers()[file_name](f)
    return write
  return {file_name: writer(file_name) for file_name, _ in FILES}


def as_stored(memory: Any, element: Any, array: np.ndarray) -> Any:
  """`array`, element `element` of a Dopamine checkpoint, as `memory`
  stores it: compressed (`CompressedFrames.from_array`) where the memory
  compresses it, else as it is."""
  if element.name == 'observation' and compressed(memory):
    return frame_blocks.CompressedFrames.from_array(array)
  return array


def value(frames: frame_blocks.CompressedFrames, name: str) -> np.ndarray:
  """What file `name` of `frames`' checkpoint holds (packing a copy)."""
  packed = pack(frames.copy())
  return packed.index if name == INDEX_NAME else packed.packs


def pack(frames: frame_blocks.CompressedFrames) -> Packed:
  """Packs `frames` (a copy no one writes to): its open block compressed
  too, so that a checkpoint holds stored or empty blocks only."""
  payloads = [frames.compress_block(block) for block in range(frames.blocks)]
  sizes = np.array([0 if p is None else len(p) for p in payloads], np.int64)
  stream = b''.join(p for p in payloads if p is not None)
  compressor = _zstd().ZstdCompressor(level=ZSTD_LEVEL)
  chunks = [compressor.compress(stream[start:start + CHUNK_BYTES])
            for start in range(0, len(stream), CHUNK_BYTES)]
  raw = [min(CHUNK_BYTES, len(stream) - start)
         for start in range(0, len(stream), CHUNK_BYTES)]
  index = np.concatenate([
      np.array([FORMAT_VERSION, frames.block_frames, frames.blocks,
                len(chunks)], np.int64), sizes,
      np.array(raw, np.int64), np.array([len(c) for c in chunks], np.int64)])
  return Packed(index, np.frombuffer(b''.join(chunks), np.uint8))


def read(memory: Any, paths: Tuple[str, str],
         digests: Tuple[Optional[atomic_files.FileDigest], ...],
         element: Any) -> Any:
  """Reads and checks the two files of a memory's compressed frames.

  Args:
    memory: the memory being loaded.
    paths: (index file, packs file).
    digests: their expected digests (or None).
    element: the memory's observation ReplayElement.

  Returns:
    A `CompressedFrames` for a memory that compresses its frames, else the
    frames decoded into an array [capacity, *shape].

  Raises:
    atomic_files.CheckpointError: If a file is corrupt, its sizes are out
      of bounds, or a block does not decode to its frames.
  """
  capacity = memory.replay_capacity
  frames = frame_blocks.CompressedFrames(capacity, tuple(element.shape),
                                         element.type)
  block_bytes = frames.block_frames * frames.frame_bytes
  # lz4's bound on a block's compressed size.
  largest = block_bytes + block_bytes // 255 + 16
  most_chunks = (frames.blocks * largest) // CHUNK_BYTES + 1
  with atomic_files.refusing(paths[0]):
    index = gzip_files.load_npy_gz(
        paths[0], dtype=np.int64, expected=digests[0],
        max_bytes=8 * (_HEADER + frames.blocks + 2 * most_chunks))
    sizes, raw, packed = _check_index(index, frames, largest)
  with atomic_files.refusing(paths[1]):
    packs = gzip_files.load_npy_gz(paths[1], shape=(int(packed.sum()),),
                                   dtype=np.uint8, expected=digests[1])
    stream = _unpack(packs, raw, packed)
    payloads = _split(stream, sizes, frames)
  frames.adopt(payloads)
  if compressed(memory):
    return frames
  return np.asarray(frames)


def _check_index(index: np.ndarray, frames: Any, largest: int
                ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The sizes of blocks, raw chunks and packed chunks, checked."""
  if index.ndim != 1 or len(index) < _HEADER:
    raise atomic_files.CorruptCheckpointError(
        'the index is not a flat array of at least {} integers'.format(
            _HEADER))
  version, block_frames, blocks, chunks = (int(v) for v in index[:_HEADER])
  expected = (FORMAT_VERSION, frames.block_frames, frames.blocks)
  if (version, block_frames, blocks) != expected:
    raise atomic_files.CorruptCheckpointError(
        'the index is of format {}, blocks of {} frames and {} blocks; '
        'this memory reads format {} with {} blocks of {}: a checkpoint of '
        'another memory?'.format(version, block_frames, blocks, expected[0],
                                 expected[2], expected[1]))
  if chunks < 0 or len(index) != _HEADER + blocks + 2 * chunks:
    raise atomic_files.CorruptCheckpointError(
        'the index holds {} integers, not {} for {} chunks'.format(
            len(index), _HEADER + blocks + 2 * max(chunks, 0), chunks))
  sizes = index[_HEADER:_HEADER + blocks]
  raw = index[_HEADER + blocks:_HEADER + blocks + chunks]
  packed = index[_HEADER + blocks + chunks:]
  if sizes.size and (sizes.min() < 0 or sizes.max() > largest):
    raise atomic_files.CorruptCheckpointError(
        'a block size is outside [0, {}]'.format(largest))
  if chunks and (raw.min() < 1 or raw.max() > _MAX_CHUNK_BYTES or
                 packed.min() < 1 or packed.max() > _MAX_CHUNK_BYTES):
    raise atomic_files.CorruptCheckpointError(
        'a chunk size is outside [1, {}]'.format(_MAX_CHUNK_BYTES))
  if int(raw.sum()) != int(sizes.sum()):
    raise atomic_files.CorruptCheckpointError(
        'the chunks hold {} bytes, the blocks {}'.format(
            int(raw.sum()), int(sizes.sum())))
  return sizes, raw, packed


def _unpack(packs: np.ndarray, raw: np.ndarray, packed: np.ndarray) -> bytes:
  """The blocks' bytes: each chunk decompressed to exactly its size."""
  decompressor = _zstd().ZstdDecompressor()
  out = []
  start = 0
  for raw_size, packed_size in zip(raw.tolist(), packed.tolist()):
    chunk = packs[start:start + packed_size]
    start += packed_size
    try:
      data = decompressor.decompress(chunk, max_output_size=raw_size,
                                     allow_extra_data=False)
    except _zstd().ZstdError as e:
      raise atomic_files.CorruptCheckpointError(
          'a chunk does not decompress: {}'.format(e)) from e
    if len(data) != raw_size:
      raise atomic_files.CorruptCheckpointError(
          'a chunk decompresses to {} bytes, not {}'.format(
              len(data), raw_size))
    out.append(data)
  return b''.join(out)


def _split(stream: bytes, sizes: np.ndarray, frames: Any
          ) -> List[Optional[bytes]]:
  """The blocks' payloads (None for empty ones), each checked to decode."""
  payloads = []
  start = 0
  for block, size in enumerate(sizes.tolist()):
    if not size:
      payloads.append(None)
      continue
    payload = stream[start:start + size]
    start += size
    if not frames.decodes(block, payload):
      raise atomic_files.CorruptCheckpointError(
          'block {} does not decode to its frames'.format(block))
    payloads.append(payload)
  return payloads
