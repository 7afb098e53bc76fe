# coding=utf-8
"""A JAX memory's checkpoint files, where Dopamine JAX keeps them.

`<checkpoint_dir>/<iteration>/replay/` holds:

- `checkpoint.msgpack`: the memory's state as msgpack (maps, lists,
  numbers, strings, bytes; arrays as their dtype, shape and bytes; no
  pickle, so loading runs no code), with `add_count` at the top as
  Dopamine's has it, and the name, size and SHA-256 of the frames file;
- `frames-<digest>.bin`: the frames the stored elements read
  (`frame_ring.FrameRing.export`).

The frames file is written first, under a name of its own, then the state
file atomically: a crash leaves the previous checkpoint of the iteration
whole, and a load checks the frames against the digest the state names.
Of the iterations, the newest `checkpoint_duration` keep their `replay`
folder, as Dopamine's garbage collection does.
"""

import hashlib
import os
from typing import Any, Callable, Dict, Tuple

import numpy as np

from dopamine_per.file_io import atomic_files

__all__ = ['STATE_NAME', 'FORMAT', 'encode', 'decode', 'save', 'load',
           'prune']

STATE_NAME = 'checkpoint.msgpack'
FORMAT = 'dopamine_per.jax.replay_memory/1'
_FRAMES_PREFIX = 'frames-'
_FRAMES_SUFFIX = '.bin'
# The largest state file read (the arrays besides the frames of 2**24
# elements fit), and frames file.
_MAX_STATE_BYTES = 2 << 30
_MAX_FRAMES_BYTES = 1 << 40
# A map of more int keys than this is kept as two arrays.
_INT_MAP_MIN = 64
_INT64 = (-2**63, 2**63 - 1)


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
  {'__int__': digits}, large int -> int maps as two arrays.

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
    if (len(value) > _INT_MAP_MIN and
        all(type(k) is int and type(v) is int for k, v in value.items())):
      return {'__int_map__': [encode(np.fromiter(value.keys(), np.int64)),
                              encode(np.fromiter(value.values(), np.int64))]}
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
    if '__int_map__' in value:
      keys, positions = value['__int_map__']
      return dict(zip(np.asarray(keys).tolist(),
                      np.asarray(positions).tolist()))
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


def save(checkpoint_dir: Any, iteration: int,
         make_state: Callable[[Callable[[bytes], Any]], Dict[str, Any]]
         ) -> str:
  """Writes a checkpoint: the state `make_state` returns (plain data for
  `encode`, with 'add_count'), having written the frames through the
  callable it is given. Returns the `replay` folder."""
  directory = _replay_dir(checkpoint_dir, iteration)
  atomic_files.make_directories(directory)
  digest = hashlib.sha256()
  size, made = [0], []

  def write(f: Any) -> None:
    def chunk(data: bytes) -> None:
      digest.update(data)
      size[0] += len(data)
      f.write(data)
    made.append(make_state(chunk))

  staged = atomic_files.stage_write(os.path.join(directory, 'frames'),
                                    write)
  frames_name = _FRAMES_PREFIX + digest.hexdigest()[:32] + _FRAMES_SUFFIX
  atomic_files.replace(staged.path, os.path.join(directory, frames_name))
  record = dict(made[0], format=FORMAT, frames={
      'name': frames_name, 'size': size[0], 'sha256': digest.hexdigest()})
  packed = _msgpack().packb(encode(record), use_bin_type=True)
  atomic_files.atomic_write(os.path.join(directory, STATE_NAME),
                            lambda f: f.write(packed))
  for name in atomic_files.list_directory(directory):
    if name.startswith(_FRAMES_PREFIX) and name != frames_name:
      atomic_files.remove_if_exists(os.path.join(directory, name))
  return directory


def load(checkpoint_dir: Any, iteration: int) -> Tuple[Dict[str, Any],
                                                     memoryview]:
  """The state and the frames' bytes of a checkpoint `save` wrote.

  Raises:
    atomic_files.CheckpointNotFoundError: If there is none (a
      FileNotFoundError, which Dopamine's agents catch).
    atomic_files.CorruptCheckpointError: If it is not one `save` wrote
      whole (another format, a frames file of other bytes, ...).
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
    frames = state['frames']
    name, size = str(frames['name']), int(frames['size'])
    if (os.path.basename(name) != name or
        not name.startswith(_FRAMES_PREFIX) or
        not 0 <= size <= _MAX_FRAMES_BYTES):
      raise ValueError('frames file {!r} of {} bytes'.format(name, size))
    data = atomic_files.read_file(os.path.join(directory, name), size,
                                  'frames file')
    if (len(data) != size or
        hashlib.sha256(data).hexdigest() != frames['sha256']):
      raise ValueError('the frames file {} is not the one saved'.format(name))
  except FileNotFoundError as e:
    raise atomic_files.CorruptCheckpointError('{}: {}'.format(
        path, e)) from e
  except (ValueError, KeyError, TypeError) as e:
    if isinstance(e, atomic_files.CheckpointError):
      raise
    raise atomic_files.CorruptCheckpointError('{}: {}'.format(
        path, e)) from e
  return state, memoryview(data)


def prune(checkpoint_dir: Any, keep: int) -> None:
  """Deletes the `replay` folders of all but the newest `keep` iterations
  (and the iteration's folder, if that leaves it empty)."""
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
