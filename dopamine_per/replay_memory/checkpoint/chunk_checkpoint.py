# coding=utf-8
"""Incremental checkpoints of a memory's arrays in shared, compressed chunks.

A memory whose frames are `frame_blocks.CompressedFrames` saves its storage
arrays and its sum tree in two files in place of Dopamine's
``$store$_*_ckpt.N.gz`` and ``sum_tree_ckpt.N.gz`` (issue 33):

- ``chunk_pack_ckpt.N.gz``: the chunks this save wrote, each one zstd
  frame, in a gzip'd (stored, not deflated) ``.npy`` of uint8.
- ``chunk_index_ckpt.N.gz``: a gzip'd ``.npy`` of int64 naming, for every
  chunk of the checkpoint, the pack holding it (this one's, or an older
  checkpoint's, with that pack's size and SHA-256), its place there, its
  sizes and the digest of its content.

Each array is a stream of chunks cut at fixed places (frames: GROUP_BLOCKS
blocks of LZ4 bytes, with their sizes; other arrays: ARRAY_CHUNK_BYTES),
so a chunk whose content is on disk already, in a pack the previous
checkpoint names, is named again rather than written: a save after 10,000
adds writes the few chunks they touched. A pack is deleted only once no
retained checkpoint names it (`prune_packs`); a save rewrites the chunks
of an old pack it would keep alive for less than half its bytes.

Loading reads the named packs (each checked against its digest), undoes
zstd only, adopts the frames' blocks as they are (each checked to decode)
and bounds every size by the memory's configuration before it is read.
"""

import hashlib
import os
import re
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Tuple

from absl import logging
import numpy as np

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.file_io import safe_pickle
from dopamine_per.replay_memory.memory import frame_blocks

__all__ = ['INDEX_NAME', 'PACK_NAME', 'FILES', 'FORMAT_VERSION',
           'ARRAY_CHUNK_BYTES', 'LARGE_ROW_CHUNK_BYTES', 'GROUP_BLOCKS',
           'ZSTD_LEVEL', 'ARRAY', 'FRAMES', 'Part', 'frames_part', 'array_part', 'sum_tree_part',
           'parts', 'sum_tree_state', 'compressed', 'as_stored', 'Saver',
           'value', 'dopamine_layout', 'read', 'read_chunks', 'frames_kind',
           'array_from', 'frames_from', 'prune_packs', 'check_resave']

INDEX_NAME = 'chunk_index'
PACK_NAME = 'chunk_pack'
# (name, format) of the two files, as memory_checkpoint's layout lists them.
FILES = [(INDEX_NAME, 'npy'), (PACK_NAME, 'npy')]
FORMAT_VERSION = 2
# Bytes per chunk of an array other than frames (of rows of 1 KiB or more:
# LARGE_ROW_CHUNK_BYTES; zstd-3 packs raw Atari frames 30x in 64 KiB, 63x
# in 1 MiB), and frame blocks per chunk (about 1 MiB of LZ4 bytes on Atari:
# docs/compression.md).
ARRAY_CHUNK_BYTES = 64 << 10
LARGE_ROW_CHUNK_BYTES = 1 << 20
GROUP_BLOCKS = 512
ZSTD_LEVEL = 3
# The most bytes a chunk may hold, compressed or not (a bomb's bound).
_MAX_CHUNK_BYTES = 64 << 20
# Index layout: header; per pack (iteration, size, 4 SHA-256 words); per
# part (its chunk count, its kind, its unit: the bytes or blocks of a
# chunk); per chunk (pack row, offset, packed size, raw size, 2 digest
# words).
_HEADER = 5
_PACK_FIELDS = 6
_PART_FIELDS = 3
_CHUNK_FIELDS = 6
# The smallest unit of an array part a checkpoint may have (bounds the
# index a load reads).
_MIN_ARRAY_UNIT = 256
# A part's kind: an array's bytes, or frame blocks (`_frames_part`).
ARRAY, FRAMES = 0, 1
_STATE_NAME = 'dopamine_per_state'
_PACK_PATTERN = re.compile(r'^{}_ckpt\.(\d+)\.gz$'.format(PACK_NAME))


def _zstd() -> Any:
  """The `zstandard` module (the `compress` extra)."""
  try:
    import zstandard  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        'Checkpoints of compressed frames need the zstandard package: pip '
        'install "dopamine_per[compress]"') from e
  return zstandard


def _digest(raw: bytes) -> bytes:
  """A chunk's identity: the first 16 bytes of its content's SHA-256."""
  return hashlib.sha256(raw).digest()[:16]


# ------------------------------------------------------------------ parts


class Part(object):
  """One array of a checkpoint as a stream of chunks.

  Attributes:
    name: str, the array's name (for errors).
    count: int, its chunks.
    kind: ARRAY or FRAMES.
    unit: int, the bytes (ARRAY) or frame blocks (FRAMES) of a chunk, but
      for the last.
  """

  def __init__(self, name: str, count: int, chunk: Callable[[int], bytes],
               kind: int, unit: int):
    self.name = name
    self.count = count
    self.kind = kind
    self.unit = unit
    self._chunk = chunk

  def chunk(self, i: int) -> bytes:
    """Chunk `i`'s content (a save may ask twice)."""
    return self._chunk(i)


def frames_part(name: str, frames: frame_blocks.CompressedFrames) -> Part:
  """`frames` (a copy no one writes to) in chunks of GROUP_BLOCKS blocks:
  their sizes (uint32) then their payloads, the open block compressed."""
  unit = GROUP_BLOCKS

  def chunk(group: int) -> bytes:
    blocks = range(group * unit, min((group + 1) * unit, frames.blocks))
    payloads = [frames.compress_block(block) or b'' for block in blocks]
    sizes = np.array([len(p) for p in payloads], '<u4')
    return sizes.tobytes() + b''.join(payloads)
  return Part(name, -(-frames.blocks // unit), chunk, FRAMES, unit)


def array_part(name: str, size: int, stream: Callable[[], Any],
               unit: Optional[int] = None) -> Part:
  """An array of `size` bytes read out once, at the first chunk asked
  for, from `stream` (an iterator of arrays, in order), and cut into
  chunks of `unit` bytes (default ARRAY_CHUNK_BYTES)."""
  data, unit = [], unit or ARRAY_CHUNK_BYTES

  def chunk(i: int) -> bytes:
    if not data:
      data.append(b''.join(np.ascontiguousarray(a).tobytes()
                           for a in stream()))
    return data[0][i * unit:(i + 1) * unit]
  return Part(name, -(-size // unit), chunk, ARRAY, unit)


def sum_tree_part(state: Dict[str, Any]) -> Part:
  """A sum tree state's part: its leaves, then max_recorded_priority (a
  load recomputes the inner nodes)."""
  return array_part(
      'sum_tree', 8 * (len(state['nodes'][-1]) + 1),
      lambda: [np.asarray(state['nodes'][-1], '<f8'),
               np.array([state['max_recorded_priority']], '<f8')])


def parts(memory: Any, store_chunks: Callable[[str], Any],
          frames: Callable[[str], Any], sum_tree_state: Optional[Dict]
         ) -> List[Part]:
  """The parts of `memory`'s checkpoint, in the index's order.

  Args:
    memory: the memory saved.
    store_chunks: element name -> iterator of its rows' arrays, in order.
    frames: element name -> its `CompressedFrames` (a copy), or None.
    sum_tree_state: the sum tree's state, or None for a memory without one.
  """
  out = []
  for element, size in _store_sizes(memory):
    copy = frames(element.name)
    if copy is not None:
      out.append(frames_part(element.name, copy))
      continue
    large = size >= 1024 * memory.replay_capacity  # Rows of 1 KiB or more.
    out.append(array_part(element.name, size,
                          lambda e=element.name: store_chunks(e),
                          LARGE_ROW_CHUNK_BYTES if large else None))
  if sum_tree_state is not None:
    out.append(sum_tree_part(sum_tree_state))
  return out


def _store_sizes(memory: Any) -> List[Tuple[Any, int]]:
  """(element, bytes of its array) of every storage element."""
  capacity = memory.replay_capacity
  return [(e, capacity * int(np.prod(e.shape, dtype=np.int64)) *
           np.dtype(e.type).itemsize)
          for e in memory.get_storage_signature()]


def compressed(memory: Any) -> bool:
  """Whether `memory`'s frames are compressed (and saved in chunks)."""
  return isinstance(memory.storage.arrays['observation'],
                    frame_blocks.CompressedFrames)


def as_stored(memory: Any, element: Any, array: np.ndarray) -> Any:
  """`array`, element `element` of a Dopamine checkpoint, as `memory`
  stores it: compressed (`CompressedFrames.from_array`) where the memory
  compresses it, else as it is."""
  if element.name == 'observation' and compressed(memory):
    return frame_blocks.CompressedFrames.from_array(array)
  return array


# ------------------------------------------------------------------- save


class _Ref(object):
  """Where a chunk is: a pack (its iteration and digest) and its place."""

  __slots__ = ('pack', 'digest', 'offset', 'packed', 'raw')

  def __init__(self, pack: int, digest: Optional[atomic_files.FileDigest],
               offset: int, packed: int, raw: int):
    self.pack = pack
    self.digest = digest
    self.offset = offset
    self.packed = packed
    self.raw = raw


class Saver(object):
  """Packs a snapshot's parts, naming the chunks already on disk.

  `bind` says where the save goes; the first writer called (in the saving
  thread) packs everything once.
  """

  def __init__(self, parts_: List[Part]):
    self._parts = parts_
    self._iteration = 0
    self._previous: Dict[bytes, _Ref] = {}
    self._packed: List[Tuple[np.ndarray, np.ndarray]] = []

  def bind(self, checkpoint_dir: Optional[str], iteration: int,
           previous: Optional[int]) -> None:
    """The save is checkpoint `iteration` of `checkpoint_dir`; `previous`,
    the newest complete checkpoint before it (or None), names chunks
    this one need not write. A previous checkpoint that cannot be read is
    ignored (the save is then a full one)."""
    self._iteration = iteration
    self._previous = {}
    if checkpoint_dir is not None and previous is not None:
      try:
        self._previous = _chunks_of(checkpoint_dir, previous, self._parts)
      except (atomic_files.CheckpointError, OSError) as e:
        logging.warning('Saving checkpoint %d in full: checkpoint %d cannot '
                        'be read for its chunks (%s).', iteration, previous,
                        e)

  def writers(self) -> Dict[str, Callable[[BinaryIO], None]]:
    """{file name: writer} of the index and the pack."""
    def writer(which: int) -> Callable[[BinaryIO], None]:
      def write(f: BinaryIO) -> None:
        index, pack = self.packed()
        array, name, level = ((index, INDEX_NAME, 1) if which == 0 else
                              (pack, PACK_NAME, 0))
        gzip_files.npy_gz_writer(array, name, level=level)(f)
      return write
    return {INDEX_NAME: writer(0), PACK_NAME: writer(1)}

  def packed(self) -> Tuple[np.ndarray, np.ndarray]:
    """(index, pack) as the files hold them, packed at the first call."""
    if not self._packed:
      self._packed.append(self._pack())
    return self._packed[0]

  def _pack(self) -> Tuple[np.ndarray, np.ndarray]:
    digests = [[_digest(part.chunk(i)) for i in range(part.count)]
               for part in self._parts]
    kept = _worth_keeping(self._previous, digests)
    compressor = _zstd().ZstdCompressor(level=ZSTD_LEVEL)
    pack, offset, written = [], 0, {}
    chunks = []
    for part, part_digests in zip(self._parts, digests):
      for i, digest in enumerate(part_digests):
        ref = written.get(digest) or kept.get(digest)
        if ref is None:
          raw = part.chunk(i)
          data = compressor.compress(raw)
          ref = _Ref(self._iteration, None, offset, len(data), len(raw))
          pack.append(data)
          offset += len(data)
          written[digest] = ref
        chunks.append((ref, digest))
    return (_index(self._iteration,
                   [(p.count, p.kind, p.unit) for p in self._parts], chunks),
            np.frombuffer(b''.join(pack), np.uint8))


def _worth_keeping(previous: Dict[bytes, _Ref],
                   digests: List[List[bytes]]) -> Dict[bytes, _Ref]:
  """The chunks of `previous` to name again: those of packs the new
  checkpoint would name for at least half their bytes."""
  live: Dict[int, int] = {}
  for digest in set(d for part in digests for d in part):
    ref = previous.get(digest)
    if ref is not None:
      live[ref.pack] = live.get(ref.pack, 0) + ref.packed
  return {digest: ref for digest, ref in previous.items()
          if 2 * live.get(ref.pack, 0) >= ref.digest.size}


def _words(sha256: str) -> np.ndarray:
  return np.frombuffer(bytes.fromhex(sha256), '>i8').astype(np.int64)


def _index(iteration: int, counts: List[Tuple[int, int, int]],
           chunks: List[Tuple[_Ref, bytes]]) -> np.ndarray:
  """The index file's content."""
  packs = {iteration: np.array([iteration, -1, 0, 0, 0, 0], np.int64)}
  for ref, _ in chunks:
    if ref.pack not in packs:
      packs[ref.pack] = np.concatenate([
          np.array([ref.pack, ref.digest.size], np.int64),
          _words(ref.digest.sha256)])
  rows = {pack: row for row, pack in enumerate(packs)}
  table = np.array([[rows[ref.pack], ref.offset, ref.packed, ref.raw] +
                    np.frombuffer(digest, '<i8').tolist()
                    for ref, digest in chunks], np.int64).reshape(-1, 6)
  header = np.array([FORMAT_VERSION, iteration, len(packs), len(counts),
                     len(chunks)], np.int64)
  return np.concatenate([header, np.concatenate(list(packs.values())),
                         np.array(counts, np.int64).ravel(), table.ravel()])


def value(memory: Any, name: str) -> np.ndarray:
  """What file `name` of `memory`'s checkpoint holds, saved in full."""
  storage = memory.storage.snapshot(None)
  try:
    saver = Saver(parts(
        memory, lambda e: storage.chunks(e, ARRAY_CHUNK_BYTES),
        storage.frames, sum_tree_state(memory)))
    index, pack = saver.packed()
  finally:
    storage.release()
  return index if name == INDEX_NAME else pack


def sum_tree_state(memory: Any) -> Optional[Dict[str, Any]]:
  """The state of `memory`'s sum tree as a chunked checkpoint stores it
  (its 'sum_tree' extension's `leaves`), or None if it has none."""
  trees = [extension.leaves(memory)
           for extension in memory.checkpoint_extensions
           if extension.file_format == 'sum_tree']
  return trees[0] if trees else None


# ------------------------------------------------------------------- read


class _Index(object):
  """A checked index: its packs; per part its kind, its chunks' refs and
  digests."""

  def __init__(self, packs: List[Tuple[int, Optional[Any]]],
               kinds: List[Tuple[int, int]],
               parts_: List[List[Tuple[_Ref, bytes]]]):
    self.packs = packs
    self.kinds = kinds  # Per part: (kind, unit).
    self.parts = parts_


# Part i's length in units of kind k (None: k is not its kind).
Bound = Callable[[int, int], Optional[int]]


def _read_index(path: str, expected: Optional[atomic_files.FileDigest],
                iteration: int, parts_: int, bound: Bound) -> _Index:
  """Reads and checks checkpoint `iteration`'s index of `parts_` parts.

  Args:
    path: the index file.
    expected: its digest, or None.
    iteration: the checkpoint's iteration.
    parts_: how many parts it must have.
    bound: the most chunks of each part.
  """
  total = sum(max(-(-(bound(i, ARRAY) or 0) // _MIN_ARRAY_UNIT),
                  bound(i, FRAMES) or 0) for i in range(parts_))
  most = (_HEADER + _PACK_FIELDS * (total + 1) + _PART_FIELDS * parts_ +
          _CHUNK_FIELDS * total)
  with atomic_files.refusing(path):
    index = gzip_files.load_npy_gz(path, dtype=np.int64, expected=expected,
                                   max_bytes=8 * most)
    return _parse_index(index, iteration, parts_, bound)


def _corrupt(message: str, *args: Any) -> atomic_files.CorruptCheckpointError:
  return atomic_files.CorruptCheckpointError(message.format(*args))


def _parse_index(index: np.ndarray, iteration: int, parts_: int,
                 bound: Bound) -> _Index:
  """`_read_index`'s checks, on the loaded array."""
  if index.ndim != 1 or len(index) < _HEADER:
    raise _corrupt('the index is not a flat array of at least {} integers',
                   _HEADER)
  version, own, packs, counted, chunks = (int(v) for v in index[:_HEADER])
  if (version, own, counted) != (FORMAT_VERSION, iteration, parts_):
    raise _corrupt(
        'the index is of format {}, checkpoint {}, {} arrays; expected '
        'format {}, checkpoint {}, {} arrays: a checkpoint of another '
        'memory or iteration?', version, own, counted, FORMAT_VERSION,
        iteration, parts_)
  if not 1 <= packs <= chunks + 1 or len(index) != (
      _HEADER + _PACK_FIELDS * packs + _PART_FIELDS * counted +
      _CHUNK_FIELDS * chunks):
    raise _corrupt('the index holds {} integers, not a table of {} packs '
                   'and {} chunks', len(index), packs, chunks)
  start = _HEADER + _PACK_FIELDS * packs
  stop = start + _PART_FIELDS * counted
  pack_rows = index[_HEADER:start].reshape(packs, _PACK_FIELDS)
  part_rows = index[start:stop].reshape(counted, _PART_FIELDS)
  table = index[stop:].reshape(chunks, _CHUNK_FIELDS)
  for i, (count, kind, unit) in enumerate(part_rows.tolist()):
    length = bound(i, kind) if kind in (ARRAY, FRAMES) else None
    smallest = _MIN_ARRAY_UNIT if kind == ARRAY else 1
    if length is None or not smallest <= unit <= _MAX_CHUNK_BYTES or (
        count != -(-length // unit)):
      raise _corrupt('array {} is of kind {} in {} chunks of {}; its length '
                     'is {}', i, kind, count, unit, length)
  return _Index(_check_packs(pack_rows, iteration),
                [tuple(row) for row in part_rows[:, 1:].tolist()],
                _check_chunks(table, part_rows[:, 0], packs))


def _check_packs(rows: np.ndarray, iteration: int
                ) -> List[Tuple[int, Optional[atomic_files.FileDigest]]]:
  """The packs an index names: (iteration, digest; None for its own)."""
  out = []
  for row, (pack, size) in enumerate(rows[:, :2].tolist()):
    if row == 0:
      if (pack, size) != (iteration, -1):
        raise _corrupt('the index does not name its own pack first')
      out.append((pack, None))
      continue
    if not 0 <= pack < iteration or size < 0 or pack in dict(out):
      raise _corrupt('the index names pack {} of {} bytes: not an earlier '
                     'checkpoint, or twice', pack, size)
    sha256 = rows[row, 2:].astype('>i8').tobytes().hex()
    out.append((pack, atomic_files.FileDigest(size, sha256)))
  return out


def _check_chunks(table: np.ndarray, counts: np.ndarray, packs: int
                 ) -> List[List[Tuple[_Ref, bytes]]]:
  """The chunks of each part, their fields in bounds."""
  if int(counts.sum()) != len(table):
    raise _corrupt('the index counts {} chunks, its table holds {}',
                   int(counts.sum()), len(table))
  if len(table) and (
      table[:, 0].min() < 0 or table[:, 0].max() >= packs or
      table[:, 1].min() < 0 or table[:, 2:4].min() < 1 or
      table[:, 2:4].max() > _MAX_CHUNK_BYTES):
    raise _corrupt('a chunk names a pack, offset or size out of bounds')
  refs = [(_Ref(int(row[0]), None, int(row[1]), int(row[2]), int(row[3])),
           row[4:].astype('<i8').tobytes()) for row in table]
  bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
  return [refs[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _chunks_of(checkpoint_dir: str, iteration: int, parts_: List[Part]
              ) -> Dict[bytes, _Ref]:
  """{digest: where} of the chunks checkpoint `iteration` names, for a
  save of `parts_` (nothing if it is of other arrays)."""
  digests = _state_digests(checkpoint_dir, iteration)
  index = _read_index(
      _path(checkpoint_dir, INDEX_NAME, iteration), digests[INDEX_NAME],
      iteration, len(parts_), lambda i, kind: _length(parts_[i], kind))
  packs = [(pack, digest or digests[PACK_NAME])
           for pack, digest in index.packs]
  out = {}
  for part in index.parts:
    for ref, digest in part:
      pack, pack_digest = packs[ref.pack]
      out[digest] = _Ref(pack, pack_digest, ref.offset, ref.packed, ref.raw)
  return out


def _length(part: Part, kind: int) -> Optional[int]:
  """Part `part`'s length in units of `kind` (None: not its kind)."""
  return part.count * part.unit if kind == part.kind else None


def _state_digests(checkpoint_dir: str, iteration: int
                  ) -> Dict[str, atomic_files.FileDigest]:
  """The digests of the index and pack that checkpoint `iteration`'s state
  file records."""
  path = _path(checkpoint_dir, _STATE_NAME, iteration)
  limits = safe_pickle.PickleLimits(max_bytes=1 << 22, max_elements=1 << 16,
                                    max_depth=16)
  with atomic_files.refusing(path):
    state = gzip_files.load_pickle_gz(path, limits=limits)
    files = state.get('files') if isinstance(state, dict) else None
    digests = {name: atomic_files.digest_from_data(
        (files or {}).get(name), container=tuple) for name, _ in FILES}
    if None in digests.values():
      raise _corrupt('it records no digest of the chunk files')
  return digests


def _path(checkpoint_dir: str, name: str, iteration: int) -> str:
  return gzip_files.checkpoint_filename(checkpoint_dir, name, iteration)


def read(memory: Any, path_of: Callable[..., str],
         digest_of: Callable[[str], Optional[atomic_files.FileDigest]],
         iteration: int, sum_tree: bool) -> Dict[str, Any]:
  """Reads and checks a memory's chunked checkpoint.

  Args:
    memory: the memory being loaded.
    path_of: (file name, iteration) -> its path.
    digest_of: file name -> the digest the state file records, or None.
    iteration: the checkpoint's iteration.
    sum_tree: whether the checkpoint holds a sum tree.

  Returns:
    {'store': {element name: its array as the memory stores it
    (`as_stored`)}, 'sum_tree': a sum tree state or None}.

  Raises:
    atomic_files.CheckpointError: If a file is corrupt, a size out of
      bounds, or a block does not decode to its frames.
  """
  specs = _specs(memory, sum_tree)
  out = {'store': {}, 'sum_tree': None}
  parts_ = read_chunks(path_of, digest_of, iteration,
                       [kinds for _, kinds in specs])
  for (name, kinds), (kind, unit, raws) in zip(specs, parts_):
    with atomic_files.refusing('{} (array {})'.format(
        path_of(INDEX_NAME, iteration), name)):
      value_ = kinds[kind][2](raws, unit)
    if name == 'sum_tree':
      out['sum_tree'] = value_
    else:
      out['store'][name] = value_
  return out


def read_chunks(path_of: Callable[..., str],
                digest_of: Callable[[str], Optional[atomic_files.FileDigest]],
                iteration: int, kinds: List[Dict[int, Tuple[Any, ...]]]
               ) -> List[Tuple[int, int, List[bytes]]]:
  """Reads a chunked checkpoint's parts, each chunk checked.

  Args:
    path_of: (file name, iteration) -> its path.
    digest_of: file name -> the digest the state file records, or None.
    iteration: the checkpoint's iteration.
    kinds: per part, {kind it may be: (its length in the kind's units, the
      most bytes it may hold, ...)}.

  Returns:
    Per part: (kind, unit, its chunks' contents).

  Raises:
    atomic_files.CheckpointError: If a file is corrupt or a size out of
      bounds.
  """
  index = _read_index(
      path_of(INDEX_NAME, iteration), digest_of(INDEX_NAME), iteration,
      len(kinds), lambda i, kind: (kinds[i].get(kind) or (None,))[0])
  # Without a digest (no state file), a pack is bounded by the bytes it
  # could take to hold every array (zstd expands by at most 1/128 + a bit).
  most = 2 * sum(max(kind[1] for kind in part.values())
                 for part in kinds) + (1 << 20)
  packs = [_read_pack(path_of(PACK_NAME, pack),
                      digest or digest_of(PACK_NAME), most)
           for pack, digest in index.packs]
  decompressor = _zstd().ZstdDecompressor()
  out = []
  for i, ((kind, unit), part) in enumerate(zip(index.kinds, index.parts)):
    with atomic_files.refusing('{} (array {})'.format(
        path_of(INDEX_NAME, iteration), i)):
      raws = [_unpack(decompressor, packs[ref.pack], ref, digest)
              for ref, digest in part]
      if sum(len(raw) for raw in raws) > kinds[i][kind][1]:
        raise _corrupt('array {} holds more than {} bytes', i,
                       kinds[i][kind][1])
    out.append((kind, unit, raws))
  return out


# Per kind: (length in the kind's units, most bytes, decoder of the chunks
# and their unit).
_Spec = Dict[int, Tuple[int, int, Callable[[List[bytes], int], Any]]]


def _specs(memory: Any, sum_tree: bool) -> List[Tuple[str, _Spec]]:
  """Per part: its name and how each kind it may be is read."""
  specs = []
  for element, size in _store_sizes(memory):
    shape = (memory.replay_capacity,) + tuple(element.shape)
    kinds = {ARRAY: (size, size,
                     lambda raws, _, s=shape, e=element: as_stored(
                         memory, e, array_from(raws, s, e.type)))}
    if element.name == 'observation':
      frames = frame_blocks.CompressedFrames(
          memory.replay_capacity, tuple(element.shape), element.type)
      kinds[FRAMES] = frames_kind(
          frames, lambda f: f if compressed(memory) else np.asarray(f))
    specs.append((element.name, kinds))
  if sum_tree:
    leaves = 1 << max(memory.replay_capacity - 1, 0).bit_length()
    size = 8 * (leaves + 1)
    specs.append(('sum_tree', {ARRAY: (size, size,
                                       lambda raws, _: _tree(raws, leaves))}))
  return specs


def frames_kind(frames: frame_blocks.CompressedFrames,
                then: Callable[[frame_blocks.CompressedFrames], Any]
               ) -> Tuple[int, int, Callable[[List[bytes], int], Any]]:
  """How frames read as blocks into `frames` (empty): (blocks, most
  bytes, decoder giving `then(frames)` once they are adopted)."""
  return (frames.blocks, frames.blocks * (4 + _largest_block(frames)),
          lambda raws, unit: then(frames_from(frames, raws, unit)))


def dopamine_layout(memory: Any, files: List[str]) -> Dict[str, Any]:
  """What converting a chunked checkpoint of `memory` to Dopamine's files
  needs (`convert`): those files' names in order (`files`), each storage
  array's name, dtype and shape, and the sum tree's leaves (or None).
  Plain data, for the dopamine_per state."""
  trees = [e for e in memory.checkpoint_extensions
           if e.file_format == 'sum_tree']
  return {'files': list(files),
          'arrays': [(e.name, np.dtype(e.type).str,
                      (memory.replay_capacity,) + tuple(e.shape))
                     for e in memory.get_storage_signature()],
          'sum_tree_leaves': (
              1 << max(memory.replay_capacity - 1, 0).bit_length()
              if trees else None)}


def _largest_block(frames: frame_blocks.CompressedFrames) -> int:
  """lz4's bound on a block's compressed size."""
  block_bytes = frames.block_frames * frames.frame_bytes
  return block_bytes + block_bytes // 255 + 16


def _read_pack(path: str, expected: Optional[atomic_files.FileDigest],
               most: int) -> np.ndarray:
  """A pack: at most its digest's size (or `most`) bytes."""
  with atomic_files.refusing(path):
    return gzip_files.load_npy_gz(
        path, dtype=np.uint8, expected=expected,
        max_bytes=most if expected is None else expected.size + (1 << 16))


def _unpack(decompressor: Any, pack: np.ndarray, ref: _Ref,
            digest: bytes) -> bytes:
  """A chunk's content: decompressed to exactly its size, its digest
  checked."""
  if pack.ndim != 1 or ref.offset + ref.packed > len(pack):
    raise _corrupt('a chunk lies outside its pack of {} bytes',
                   len(pack))
  data = pack[ref.offset:ref.offset + ref.packed]
  try:
    raw = decompressor.decompress(data, max_output_size=ref.raw,
                                  allow_extra_data=False)
  except _zstd().ZstdError as e:
    raise _corrupt('a chunk does not decompress: {}', e) from e
  if len(raw) != ref.raw or _digest(raw) != digest:
    raise _corrupt('a chunk decompresses to {} bytes not matching its '
                   'digest', len(raw))
  return raw


def array_from(raws: List[bytes], shape: Tuple[int, ...], dtype: Any
              ) -> np.ndarray:
  """An array of `shape` and `dtype` from its chunks (a writable copy)."""
  data = b''.join(raws)
  expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
  if len(data) != expected:
    raise _corrupt('the array holds {} bytes, not {}', len(data), expected)
  return np.frombuffer(data, dtype).reshape(shape).copy()


def _tree(raws: List[bytes], leaves: int) -> Dict[str, Any]:
  """A sum tree state (leaves only, as `set_state` reads) from its part."""
  values = array_from(raws, (leaves + 1,), '<f8')
  return {'nodes': [values[:leaves].astype(np.float64)],
          'max_recorded_priority': float(values[leaves])}


def frames_from(frames: frame_blocks.CompressedFrames, raws: List[bytes],
                unit: int) -> frame_blocks.CompressedFrames:
  """`frames` (empty), its blocks adopted from their chunks of `unit`
  blocks (counted by `_parse_index`), each checked to decode."""
  largest = _largest_block(frames)
  payloads = []
  for group, raw in enumerate(raws):
    first = group * unit
    count = min(unit, frames.blocks - first)
    sizes = np.frombuffer(raw[:4 * count], '<u4').astype(np.int64)
    if len(sizes) != count or sizes.max(initial=0) > largest or (
        4 * count + int(sizes.sum()) != len(raw)):
      raise _corrupt('frame chunk {} does not hold {} blocks', group, count)
    start = 4 * count
    for block, size in enumerate(sizes.tolist(), first):
      payload = raw[start:start + size] or None
      start += size
      if payload is not None and not frames.decodes(block, payload):
        raise _corrupt('block {} does not decode to its frames', block)
      payloads.append(payload)
  frames.adopt(payloads)
  return frames


# ---------------------------------------------------------------- pruning


def _named_packs(checkpoint_dir: str, iteration: int) -> Optional[List[int]]:
  """The packs checkpoint `iteration`'s index names (its own first), or
  None if it has no index (Dopamine's files).

  Raises:
    atomic_files.CheckpointError, OSError, ValueError: If the index cannot
      be read.
  """
  path = _path(checkpoint_dir, INDEX_NAME, iteration)
  if not atomic_files.exists(path):
    return None
  with atomic_files.refusing(path):
    index = gzip_files.load_npy_gz(path, dtype=np.int64, max_bytes=64 << 20)
    packs = int(index[2]) if index.ndim == 1 and len(index) > 2 else 0
    rows = index[_HEADER:_HEADER + _PACK_FIELDS * packs]
    return rows.reshape(-1, _PACK_FIELDS)[:, 0].tolist()


def prune_packs(checkpoint_dir: str, complete: List[int]) -> None:
  """Deletes the packs no complete checkpoint names.

  A pack is kept while the index of a complete checkpoint names it (its
  own checkpoint's names it first); if an index cannot be read, every pack
  is kept.

  Args:
    checkpoint_dir: str, a memory's checkpoint directory, with no save
      committed but unfinished (journals rolled forward).
    complete: the iterations of its complete checkpoints.
  """
  named = set()
  for iteration in complete:
    try:
      named.update(_named_packs(checkpoint_dir, iteration) or [])
    except (atomic_files.CheckpointError, OSError, ValueError) as e:
      logging.warning('Keeping every pack in %s: %s', checkpoint_dir, e)
      return
  for name in atomic_files.list_directory(checkpoint_dir):
    match = _PACK_PATTERN.match(name)
    if match and int(match.group(1)) not in named:
      atomic_files.remove_if_exists(os.path.join(checkpoint_dir, name))


def check_resave(checkpoint_dir: str, iteration: int,
                 complete: List[int]) -> None:
  """Refuses to save checkpoint `iteration` again where a later complete
  checkpoint names its pack: replacing the pack would break that one.

  Raises:
    atomic_files.CheckpointError: naming the checkpoint in the way.
  """
  for later in sorted(i for i in complete if i > iteration):
    try:
      named = _named_packs(checkpoint_dir, later) or []
    except (atomic_files.CheckpointError, OSError, ValueError):
      continue  # Unreadable already: nothing of it to keep.
    if iteration in named:
      raise atomic_files.CheckpointError(
          'Cannot save checkpoint {} again in {}: checkpoint {} holds chunks '
          'of its pack, which the save would replace. Save under another '
          'number, or delete the checkpoints after {} first. Nothing was '
          'written.'.format(iteration, checkpoint_dir, later, iteration))
