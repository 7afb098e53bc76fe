# coding=utf-8
"""A JAX memory's checkpoint files, where Dopamine JAX keeps them.

`<checkpoint_dir>/<iteration>/replay/` holds:

- `checkpoint.msgpack`: the memory's state as msgpack (maps, lists,
  numbers, strings, bytes; arrays as their dtype, shape and bytes; no
  pickle, so loading runs no code), with `add_count` at the top as
  Dopamine's has it, and where each part of its frames is: a pack, an
  offset and a size;
- `frame_packs.json`: the packs it names, for the clean-up.

The frames (`frame_ring.FrameRing.parts`: LZ4 blocks and runs of raw
frames, none of which ever changes) live in packs shared by the
checkpoints, `<checkpoint_dir>/replay_frames/pack-<digest>.bin`: a save
writes one pack of the parts the previous checkpoint did not hold and
names the others where they are, so a save after 10,000 new steps writes
about their frames. The pack is written first, then the list, then the
state file atomically: a crash leaves every checkpoint whole. A load
checks each pack against the SHA-256 the state gives. Of the iterations,
the newest `checkpoint_duration` keep their `replay` folder, as Dopamine's
garbage collection does; a pack is deleted once no kept one names it.
"""

import hashlib
import os
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from dopamine_per.file_io import atomic_files
from dopamine_per.jax.replay_memory import frame_ring

__all__ = ['STATE_NAME', 'PACKS_NAME', 'PACK_DIR', 'FORMAT', 'Index',
           'encode', 'decode', 'save', 'load', 'prune']

STATE_NAME = 'checkpoint.msgpack'
PACKS_NAME = 'frame_packs.json'
PACK_DIR = 'replay_frames'
FORMAT = 'dopamine_per.jax.replay_memory/2'
_PACK_PREFIX = 'pack-'
_PACK_SUFFIX = '.bin'
# The largest state file read (the arrays besides the frames of 2**24
# elements fit), and pack.
_MAX_STATE_BYTES = 2 << 30
_MAX_PACK_BYTES = 1 << 40
_INT64 = (-2**63, 2**63 - 1)

# Where each saved frame part is: key -> (pack name, offset, size, the
# pack's size and SHA-256).
Index = Dict[frame_ring.PartKey, Tuple[str, int, int, int, str]]


def _msgpack() -> Any:
  try:
    import msgpack  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError('JAX replay checkpoints are msgpack: pip install '
                      '"dopamine_per[jax]"') from e
  return msgpack


# ------------------------------------------------------------- encoding


def encode(value: Any) -> Any:
  """`value` as msgpack's plain data: arrays and NumPy scalars as
  {'__array__': [dtype, shape, bytes]}, integers past 64 bits as
  {'__int__': digits}.

  Raises:
    TypeError: For anything else (an object), naming its type.
  """
  if isinstance(value, (np.ndarray, np.generic)):
    array = np.ascontiguousarray(value)
    if array.dtype.hasobject or array.dtype.kind not in 'biufc':
      raise TypeError('cannot save an array of dtype {}'.format(array.dtype))
    return {'__array__': [array.dtype.str, list(array.shape),
                          array.tobytes()]}
  if isinstance(value, bool) or value is None or isinstance(
      value, (float, str, bytes)):
    return value
  if isinstance(value, int):
    if _INT64[0] <= value <= _INT64[1]:
      return value
    return {'__int__': str(value)}
  if isinstance(value, dict):
    return {key: encode(item) for key, item in value.items()}
  if isinstance(value, (list, tuple)):
    return [encode(item) for item in value]
  raise TypeError('cannot save a {} in a replay checkpoint'.format(
      type(value).__name__))


def _decode_array(fields: Any) -> Any:
  dtype_name, shape, data = fields
  dtype = np.dtype(str(dtype_name))
  if dtype.hasobject or dtype.kind not in 'biufc':
    raise ValueError('an array of dtype {}'.format(dtype))
  shape = tuple(int(n) for n in shape)
  if any(n < 0 for n in shape) or (
      int(np.prod(shape, dtype=object)) * dtype.itemsize != len(data)):
    raise ValueError('an array of shape {} and {} bytes'.format(
        shape, len(data)))
  array = np.frombuffer(data, dtype).reshape(shape).copy()
  return array[()] if not shape else array


def _hook(value: Dict[Any, Any]) -> Any:
  if len(value) == 1:
    if '__array__' in value:
      return _decode_array(value['__array__'])
    if '__int__' in value:
      return int(value['__int__'])
  return value


def decode(data: bytes) -> Any:
  """What `encode` gave, from msgpack bytes.

  Raises:
    ValueError: If they are not such data.
  """
  try:
    return _msgpack().unpackb(data, raw=False, strict_map_key=False,
                              object_hook=_hook)
  except (ValueError, TypeError, KeyError, RecursionError) as e:
    raise ValueError(str(e)) from e
  except Exception as e:  # msgpack's own errors.  pylint: disable=broad-except
    raise ValueError('not msgpack: {}'.format(e)) from e


# ---------------------------------------------------------------- files


def _replay_dir(checkpoint_dir: Any, iteration: int) -> str:
  return os.path.join(os.fspath(checkpoint_dir), str(int(iteration)),
                      'replay')


def _pack_dir(checkpoint_dir: Any) -> str:
  return os.path.join(os.fspath(checkpoint_dir), PACK_DIR)


def _write_pack(directory: str, parts: Sequence[frame_ring.FramePart]
                ) -> Tuple[str, int, str, Dict[frame_ring.PartKey, int]]:
  """Writes the parts with data into a new pack: (its name, size, SHA-256,
  and each part's offset)."""
  digest, offsets, at = hashlib.sha256(), {}, 0
  for part in parts:
    if part.data is not None:
      digest.update(part.data)
      offsets[part.key] = at
      at += len(part.data)
  name = _PACK_PREFIX + digest.hexdigest()[:32] + _PACK_SUFFIX
  path = os.path.join(directory, name)
  if not atomic_files.exists(path) or os.path.getsize(path) != at:

    def write(f: Any) -> None:
      for part in parts:
        if part.data is not None:
          f.write(part.data)

    atomic_files.atomic_write(path, write)
  return name, at, digest.hexdigest(), offsets


def save(checkpoint_dir: Any, iteration: int, state: Dict[str, Any],
         parts: Sequence[frame_ring.FramePart], known: Index) -> Index:
  """Writes a checkpoint of `state` (plain data for `encode`, with
  'add_count') and its frames' `parts` (those without data are in `known`,
  saved before). Returns where every part now is."""
  directory = _replay_dir(checkpoint_dir, iteration)
  packs_dir = _pack_dir(checkpoint_dir)
  atomic_files.make_directories(directory)
  atomic_files.make_directories(packs_dir)
  name, size, sha256, offsets = _write_pack(packs_dir, parts)
  packs: Dict[str, Tuple[int, int, str]] = {}  # name -> (row, size, sha)
  table = np.zeros((len(parts), 6), np.int64)
  index: Index = {}
  for row, part in enumerate(parts):
    if part.data is not None:
      where = (name, offsets[part.key], len(part.data), size, sha256)
    else:
      where = known[part.key]
      if not atomic_files.exists(os.path.join(packs_dir, where[0])):
        raise atomic_files.CorruptCheckpointError(
            '{}: an earlier frames pack is gone'.format(where[0]))
    if where[0] not in packs:
      packs[where[0]] = (len(packs), where[3], where[4])
    index[part.key] = where
    table[row] = (int(part.key.compressed), part.key.first, part.key.last,
                  packs[where[0]][0], where[1], where[2])
  records = [[pack, pack_size, digest]
             for pack, (_, pack_size, digest) in packs.items()]
  record = dict(state, format=FORMAT,
                frames=dict(state.get('frames', {}), packs=records,
                            parts=table))
  packed = _msgpack().packb(encode(record), use_bin_type=True)
  # The list names the packs of the state it replaces too until that state
  # is replaced, so that a clean-up in between keeps them.
  lists = os.path.join(directory, PACKS_NAME)
  atomic_files.write_json(lists, sorted(set(packs) | set(_named(lists))))
  atomic_files.atomic_write(os.path.join(directory, STATE_NAME),
                            lambda f: f.write(packed))
  atomic_files.write_json(lists, sorted(packs))
  return index


def _named(path: str) -> List[str]:
  """The packs a list names ([] if it is missing or unreadable)."""
  try:
    names = atomic_files.read_json(path, 1 << 24, 'frame pack list')
  except (FileNotFoundError, atomic_files.CheckpointError):
    return []
  return [str(name) for name in names] if isinstance(names, list) else []


def load(checkpoint_dir: Any, iteration: int
         ) -> Tuple[Dict[str, Any], List[frame_ring.FramePart], Index]:
  """The state, the frame parts (with their bytes) and where they are, of
  a checkpoint `save` wrote.

  Raises:
    atomic_files.CheckpointNotFoundError: If there is none (a
      FileNotFoundError, which Dopamine's agents catch).
    atomic_files.CorruptCheckpointError: If it is not one `save` wrote
      whole (another format, a pack of other bytes, parts outside it...).
  """
  directory = _replay_dir(checkpoint_dir, iteration)
  path = os.path.join(directory, STATE_NAME)
  if not atomic_files.exists(path):
    raise atomic_files.not_found_error(
        'no replay checkpoint of iteration {} in {}'.format(
            iteration, os.fspath(checkpoint_dir)), path)
  try:
    state = decode(atomic_files.read_file(path, _MAX_STATE_BYTES,
                                          'replay checkpoint'))
    if not isinstance(state, dict) or state.get('format') != FORMAT:
      raise ValueError('not a {} checkpoint'.format(FORMAT))
    parts, index = _read_parts(_pack_dir(checkpoint_dir), state['frames'])
  except FileNotFoundError as e:
    raise atomic_files.CorruptCheckpointError('{}: {}'.format(
        path, e)) from e
  except (ValueError, KeyError, TypeError, IndexError) as e:
    if isinstance(e, atomic_files.CheckpointError):
      raise
    raise atomic_files.CorruptCheckpointError('{}: {}'.format(
        path, e)) from e
  return state, parts, index


def _read_parts(packs_dir: str, frames: Dict[str, Any]
                ) -> Tuple[List[frame_ring.FramePart], Index]:
  """The parts `frames` names, read from their packs (each checked)."""
  data = []
  for name, size, sha256 in frames['packs']:
    name, size = str(name), int(size)
    if (os.path.basename(name) != name or
        not name.startswith(_PACK_PREFIX) or
        not 0 <= size <= _MAX_PACK_BYTES):
      raise ValueError('frames pack {!r} of {} bytes'.format(name, size))
    content = atomic_files.read_file(os.path.join(packs_dir, name), size,
                                     'frames pack')
    if len(content) != size or hashlib.sha256(content).hexdigest() != sha256:
      raise ValueError('the frames pack {} is not the one saved'.format(name))
    data.append((name, size, str(sha256), memoryview(content)))
  table = np.asarray(frames['parts'], np.int64).reshape(-1, 6)
  parts, index = [], {}
  for compressed, first, last, pack, offset, size in table.tolist():
    if not 0 <= pack < len(data) or offset < 0 or size < 0:
      raise ValueError('a frame part outside its packs')
    name, pack_size, sha256, content = data[pack]
    if offset + size > pack_size:
      raise ValueError('a frame part past the end of {}'.format(name))
    key = frame_ring.PartKey(bool(compressed), first, last)
    parts.append(frame_ring.FramePart(key, content[offset:offset + size]))
    index[key] = (name, offset, size, pack_size, sha256)
  return parts, index


def prune(checkpoint_dir: Any, keep: int) -> None:
  """Deletes the `replay` folders of all but the newest `keep` iterations
  (and the iteration's folder, if that leaves it empty), then the packs
  no kept checkpoint names."""
  checkpoint_dir = os.fspath(checkpoint_dir)
  iterations = sorted(
      int(name) for name in atomic_files.list_directory(checkpoint_dir)
      if name.isdigit() and atomic_files.exists(
          os.path.join(checkpoint_dir, name, 'replay', STATE_NAME)))
  for iteration in iterations[:-keep] if keep else iterations:
    directory = _replay_dir(checkpoint_dir, iteration)
    # The state first: a folder without it is no checkpoint.
    atomic_files.remove_if_exists(os.path.join(directory, STATE_NAME))
    for name in atomic_files.list_directory(directory):
      atomic_files.remove_if_exists(os.path.join(directory, name))
    os.rmdir(directory)
    parent = os.path.dirname(directory)
    if not atomic_files.list_directory(parent):
      os.rmdir(parent)
  named = set()
  for iteration in iterations[-keep:] if keep else []:
    path = os.path.join(_replay_dir(checkpoint_dir, iteration), PACKS_NAME)
    if not atomic_files.exists(path):
      return  # A kept checkpoint whose packs are unknown: keep them all.
    named.update(_named(path))
  packs_dir = _pack_dir(checkpoint_dir)
  for name in atomic_files.list_directory(packs_dir):
    if name not in named:
      atomic_files.remove_if_exists(os.path.join(packs_dir, name))
