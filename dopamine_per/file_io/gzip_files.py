# coding=utf-8
"""Dopamine's checkpoint file formats: gzip'd ``.npy`` arrays and pickles.

Dopamine stores a replay memory as one gzip file per attribute,
``{name}_ckpt.{iteration}.gz``: arrays as a gzip'd ``np.save`` stream, the
rest as a gzip'd pickle. The `*_writer` functions give those bytes, to stage
in a `transaction`; the loaders read them within bounds, never unpickling
an array, and raise `atomic_files.CorruptCheckpointError` naming a
truncated, corrupt or oversized file. What differs from Dopamine:
docs/compat.md#file_io.
"""

import gzip
import io
import math
import os
import pickle
import struct
import zlib
from typing import (Any, BinaryIO, Callable, Dict, Iterable, Optional,
                    Sequence, Tuple)

import numpy as np

from dopamine_per import errors
from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import safe_pickle

__all__ = ['DEFAULT_MAX_ARRAY_BYTES', 'checkpoint_filename', 'npy_gz_writer',
           'pickle_gz_writer', 'dopamine_sum_tree_gz_writer', 'save_npy_gz',
           'save_pickle_gz', 'save_dopamine_sum_tree_gz', 'load_npy_gz',
           'load_pickle_gz']

# Protocol of the pickles we write: readable by every Python 3 that Dopamine
# supports.
_PICKLE_PROTOCOL = 4

# Gzip level of the files we write (any level reads the same, Dopamine's 9
# included): far faster than 9, for files little larger.
_COMPRESS_LEVEL = 1

# The largest .npy header read (NumPy writes a few hundred bytes).
_MAX_NPY_HEADER_BYTES = 1 << 16

# The bound of an array read without an expected shape or a caller's bound.
DEFAULT_MAX_ARRAY_BYTES = 1 << 30


def checkpoint_filename(checkpoint_dir: str, name: str, suffix: Any) -> str:
  """Returns ``{checkpoint_dir}/{name}_ckpt.{suffix}.gz``, Dopamine's name."""
  return os.path.join(checkpoint_dir, '{}_ckpt.{}.gz'.format(name, suffix))


# ----------------------------------------------------------------- writing


def _gzip_writer(payload: Callable[[BinaryIO], None],
                 level: int = _COMPRESS_LEVEL) -> Callable[[BinaryIO], None]:
  def write(f: BinaryIO) -> None:
    # mtime=0 keeps the files byte-identical across runs.
    with gzip.GzipFile(fileobj=f, mode='wb', mtime=0,
                       compresslevel=level) as gz:
      payload(gz)
  return write


def npy_gz_writer(array: np.ndarray, name: str = 'array',
                  level: int = _COMPRESS_LEVEL
                 ) -> Callable[[BinaryIO], None]:
  """Returns a function writing `array` as a gzip'd ``.npy`` stream.

  Args:
    array: np.ndarray without Python objects.
    name: str, what to name in an error (the file).
    level: gzip's level; 0 stores (for data compressed already).

  Raises:
    ValueError: If the array holds Python objects.
  """
  array = np.asarray(array)
  if array.dtype.hasobject:
    raise ValueError('{}: cannot save an object array without pickling.'
                     .format(name))
  return _gzip_writer(lambda gz: np.save(gz, array, allow_pickle=False),
                      level)


def npy_chunks_gz_writer(shape: Tuple[int, ...], dtype: Any,
                         chunks: Callable[[], Iterable[np.ndarray]]
                        ) -> Callable[[BinaryIO], None]:
  """Returns a function writing an array given in chunks, as `npy_gz_writer`.

  The same bytes as `npy_gz_writer` of the whole array, which is never
  held at once.

  Args:
    shape: the array's shape.
    dtype: its dtype (no Python objects).
    chunks: called once by the returned function: the array's C-ordered
      chunks, of this dtype, `shape[0]` rows in all.
  """
  dtype = np.dtype(dtype)
  header = {'descr': np.lib.format.dtype_to_descr(dtype),
            'fortran_order': False, 'shape': tuple(shape)}

  def payload(gz: BinaryIO) -> None:
    np.lib.format.write_array_header_1_0(gz, header)
    for chunk in chunks():
      gz.write(memoryview(np.ascontiguousarray(chunk, dtype=dtype)).cast('B'))
  return _gzip_writer(payload)


def pickle_gz_writer(obj: Any, memo: bool = True
                    ) -> Callable[[BinaryIO], None]:
  """Returns a function writing `obj` as a gzip'd pickle, pickled now.

  Keep `obj` plain data if it is to be read back with `load_pickle_gz`.
  Without the `memo` (`safe_pickle.dumps`), the bytes depend on the value
  only; then `obj` must hold no cycle, and shared parts are written again.
  """
  data = (pickle.dumps(obj, protocol=_PICKLE_PROTOCOL) if memo else
          safe_pickle.dumps(obj, _PICKLE_PROTOCOL))
  return _gzip_writer(lambda gz: gz.write(data))


def dopamine_sum_tree_gz_writer(state: Dict[str, Any]
                               ) -> Callable[[BinaryIO], None]:
  """Returns a function writing `state` as a pickled Dopamine SumTree.

  Dopamine's ``pickle.load`` rebuilds its own SumTree from the file;
  `load_pickle_gz` reads it back as a `safe_pickle.PickledSumTreeState`.

  Args:
    state: dict (``nodes``, ``max_recorded_priority``), pickled now.
  """
  # Without the memo: the bytes depend on the values only (`convert`).
  data = safe_pickle.pickle_as_instance(*safe_pickle.DOPAMINE_SUM_TREE_GLOBAL,
                                        state, memo=False)
  return _gzip_writer(lambda gz: gz.write(data))


def save_npy_gz(path: str, array: np.ndarray) -> atomic_files.FileDigest:
  """Atomically writes `array` to `path`, as `npy_gz_writer` writes it.

  Raises:
    ValueError: If the array holds Python objects.
  """
  return atomic_files.atomic_write(path, npy_gz_writer(array, path))


def save_pickle_gz(path: str, obj: Any) -> atomic_files.FileDigest:
  """Atomically writes `obj` to `path`, as `pickle_gz_writer` writes it."""
  return atomic_files.atomic_write(path, pickle_gz_writer(obj))


def save_dopamine_sum_tree_gz(path: str, state: Dict[str, Any]
                             ) -> atomic_files.FileDigest:
  """Atomically writes `state`, as `dopamine_sum_tree_gz_writer` writes it."""
  return atomic_files.atomic_write(path, dopamine_sum_tree_gz_writer(state))


# ----------------------------------------------------------------- reading


_CORRUPTION_ERRORS = (EOFError, OSError, zlib.error, gzip.BadGzipFile)


def _read_exactly(gz: BinaryIO, out: memoryview, path: str) -> None:
  filled = 0
  total = len(out)
  while filled < total:
    count = gz.readinto(out[filled:filled + atomic_files.READ_CHUNK_BYTES])
    if not count:
      raise atomic_files.CorruptCheckpointError(
          '{}: truncated array data ({} of {} bytes).'.format(
              path, filled, total))
    filled += count


def _read_npy_header(gz: BinaryIO, path: str
                    ) -> Tuple[Tuple[int, ...], bool, np.dtype]:
  """Returns a .npy header's (shape, fortran_order, dtype), length checked.

  NumPy's reader reads a header of the length it declares (up to 4 GiB in
  version 2) before checking it; this refuses one past
  _MAX_NPY_HEADER_BYTES first. Raises CorruptCheckpointError.
  """
  fmt = np.lib.format
  try:
    version = fmt.read_magic(gz)
  except ValueError as e:
    raise atomic_files.CorruptCheckpointError(
        '{}: not a .npy stream: {}'.format(path, e)) from e
  readers = {(1, 0): ('<H', fmt.read_array_header_1_0),
             (2, 0): ('<I', fmt.read_array_header_2_0)}
  if version not in readers:
    raise atomic_files.CorruptCheckpointError(
        '{}: unsupported .npy format version {}.'.format(path, version))
  length_format, read_header = readers[version]

  def read(size):
    data = gz.read(size)
    if len(data) != size:
      raise atomic_files.CorruptCheckpointError(
          '{}: truncated .npy header.'.format(path))
    return data

  prefix = read(struct.calcsize(length_format))
  length, = struct.unpack(length_format, prefix)
  if length > _MAX_NPY_HEADER_BYTES:
    raise atomic_files.CorruptCheckpointError(
        '{}: .npy header of {} bytes (at most {} are read); refusing it.'
        .format(path, length, _MAX_NPY_HEADER_BYTES))
  header = read(length)
  try:
    return read_header(io.BytesIO(prefix + header),
                       max_header_size=_MAX_NPY_HEADER_BYTES)
  except Exception as e:  # pylint: disable=broad-except
    # ValueError mostly; a hostile header may cause others (RecursionError,
    # MemoryError in its literal parser).
    raise atomic_files.CorruptCheckpointError(
        '{}: malformed .npy header: {}'.format(
            path, atomic_files.describe_error(e))) from e


def _check_npy_header(path: str, header: Tuple[Any, bool, np.dtype],
                      shape: Optional[Sequence[int]], dtype: Any,
                      max_bytes: int) -> None:
  """Refuses (CorruptCheckpointError) a header `load_npy_gz` must not load."""
  file_shape, _, file_dtype = header
  if file_dtype.hasobject:
    raise atomic_files.CorruptCheckpointError(
        '{}: holds Python objects ({}); refusing to unpickle.'.format(
            path, file_dtype))
  if shape is not None and tuple(file_shape) != tuple(shape):
    raise atomic_files.CorruptCheckpointError(
        '{}: array has shape {}, expected {}.'.format(
            path, tuple(file_shape), tuple(shape)))
  if dtype is not None:
    wanted = np.dtype(dtype)
    if file_dtype.newbyteorder('<') != wanted.newbyteorder('<'):
      raise atomic_files.CorruptCheckpointError(
          '{}: array has dtype {}, expected {}.'.format(
              path, file_dtype, wanted))
  if any(n < 0 for n in file_shape):
    raise atomic_files.CorruptCheckpointError(
        '{}: array has a negative dimension: {}.'.format(path, file_shape))
  size = math.prod(file_shape) * max(file_dtype.itemsize, 1)
  if size > max_bytes:
    raise atomic_files.CorruptCheckpointError(
        '{}: array of shape {} and dtype {} ({} bytes) is larger than this '
        'file can hold ({} bytes); refusing it.'.format(
            path, errors.describe(tuple(file_shape)), file_dtype, size,
            max_bytes))


def load_npy_gz(path: str,
                shape: Optional[Sequence[int]] = None,
                dtype: Any = None,
                expected: Optional[atomic_files.FileDigest] = None,
                max_bytes: Optional[int] = None) -> np.ndarray:
  """Reads a gzip'd ``.npy`` file without ever unpickling.

  The header is checked before anything is allocated, at most the array's
  bytes are decompressed, and the gzip CRC is verified.

  Args:
    path: str, the file.
    shape: optional tuple of ints the array must have.
    dtype: optional dtype the array must have (byte order aside); the result
      is converted to it.
    expected: optional FileDigest the file must match.
    max_bytes: optional int, the most bytes the array may take (each
      element counting at least one); default: `DEFAULT_MAX_ARRAY_BYTES`
      unless `shape` is given.

  Returns:
    np.ndarray.

  Raises:
    FileNotFoundError: If the file does not exist.
    atomic_files.CorruptCheckpointError: If the file is not a regular file
      holding a complete gzip'd ``.npy`` stream, holds Python objects, does
      not match `shape`/`dtype`, or is larger than `max_bytes`.
  """
  if max_bytes is None:
    max_bytes = math.inf if shape is not None else DEFAULT_MAX_ARRAY_BYTES
  with atomic_files.open_for_reading(path, expected) as raw:
    try:
      with gzip.GzipFile(fileobj=raw, mode='rb') as gz:
        header = _read_npy_header(gz, path)
        _check_npy_header(path, header, shape, dtype, max_bytes)
        file_shape, fortran_order, file_dtype = header
        array = np.empty(file_shape, dtype=file_dtype,
                         order='F' if fortran_order else 'C')
        if array.nbytes:
          view = memoryview(array.reshape(-1, order='A').view(np.uint8))
          _read_exactly(gz, view, path)
        if gz.read(1):
          raise atomic_files.CorruptCheckpointError(
              '{}: trailing data after the array.'.format(path))
    except atomic_files.CheckpointError:
      raise
    except _CORRUPTION_ERRORS as e:
      raise atomic_files.CorruptCheckpointError(
          '{}: corrupt or truncated gzip file: {}'.format(path, e)) from e
    except ValueError as e:
      raise atomic_files.CorruptCheckpointError(
          '{}: malformed .npy data: {}'.format(path, e)) from e
  if dtype is not None and array.dtype != np.dtype(dtype):
    array = array.astype(dtype)
  return array


def load_pickle_gz(path: str,
                   expected: Optional[atomic_files.FileDigest] = None,
                   limits: Optional[safe_pickle.PickleLimits] = None) -> Any:
  """Reads a gzip'd pickle with the restricted unpickler, within bounds.

  At most ``limits.max_bytes`` (plus one) are decompressed.

  Args:
    path: str, the file.
    expected: optional FileDigest the file must match.
    limits: PickleLimits the pickle must keep to; default
      `DEFAULT_PICKLE_LIMITS`.

  Returns:
    The unpickled plain data (see `safe_pickle.restricted_loads`).

  Raises:
    FileNotFoundError: If the file does not exist.
    safe_pickle.UnsafePickleError: If the pickle names a global outside the
      allow list.
    atomic_files.CorruptCheckpointError: If the file is not a regular file
      holding a complete gzip'd pickle within `limits`.
  """
  limits = safe_pickle.DEFAULT_PICKLE_LIMITS if limits is None else limits
  with atomic_files.open_for_reading(path, expected) as raw:
    try:
      with gzip.GzipFile(fileobj=raw, mode='rb') as gz:
        data = gz.read(limits.max_bytes + 1)
    except _CORRUPTION_ERRORS as e:
      raise atomic_files.CorruptCheckpointError(
          '{}: corrupt or truncated gzip file: {}'.format(path, e)) from e
    if len(data) > limits.max_bytes:
      raise atomic_files.CorruptCheckpointError(
          '{}: decompresses to more than {} bytes, more than this file can '
          'hold (a gzip bomb?); refusing it.'.format(path, limits.max_bytes))
  return safe_pickle.restricted_loads(data, filename=path, limits=limits)
