# coding=utf-8
"""Atomic, safe reading and writing of replay-memory checkpoint files.

Dopamine stores a replay memory as one gzip file per attribute,
``{name}_ckpt.{iteration}.gz``: NumPy arrays as a gzip'd ``np.save`` stream and
everything else as a gzip'd pickle. This module writes files in exactly those
formats, so Dopamine can read what we write and we can read what it writes, and
adds the guarantees Dopamine lacks:

* Atomic writes. Every file is written to a temporary file in the destination
  directory, flushed, fsync'ed and moved into place with ``os.replace`` (and
  the directory is fsync'ed), so a crash never leaves a half-written file
  under a checkpoint name.
* Safe reads. Arrays are read with pickling disabled, after their header has
  been checked against the expected shape and dtype. Pickles are read with a
  restricted unpickler that builds plain data only (None, bool, int, float,
  complex, str, bytes, list, tuple, dict, set, frozenset and NumPy arrays,
  scalars and dtypes) and refuses every other global with `UnsafePickleError`.
  A pickled Dopamine ``SumTree`` loads as a `PickledSumTreeState`, which only
  captures the tree's attribute dict: nothing is imported and no code runs.
* Bounded reads. Only regular files are opened (a directory, FIFO or device
  under a checkpoint name is refused without blocking). Every file is
  decompressed into at most what its kind can need: an array's header is
  read with a small cap and its declared size checked against the caller's
  bound before anything is allocated; a pickle is read up to the byte cap of
  its `PickleLimits`, and what it builds is bounded in nesting depth and in
  elements, shared references counted once per use (so data that a caller
  expands, e.g. into an array, is bounded too). A gzip bomb is refused after
  reading a bounded amount.
* Clear errors. A truncated, corrupt, oversized or otherwise unusable file
  raises `CorruptCheckpointError` naming the file, whatever the underlying
  error (`refusing` converts the rest).

Paths with a URL scheme (``gs://``, ``ram://``, ...) go through
``tf.io.gfile`` (TensorFlow is imported only then); there the final rename is
as atomic as the filesystem makes it.
"""

import collections
import contextlib
import gzip
import hashlib
import io
import math
import os
import pickle
import re
import stat
import struct
import tempfile
import zlib
from typing import (Any, BinaryIO, Callable, Dict, Iterator, List, Optional,
                    Sequence, Tuple)

import numpy as np

from dopamine_per import errors

__all__ = [
    'CheckpointError',
    'CorruptCheckpointError',
    'UnsafePickleError',
    'PickledSumTreeState',
    'PickleLimits',
    'DEFAULT_PICKLE_LIMITS',
    'DEFAULT_MAX_ARRAY_BYTES',
    'DOPAMINE_SUM_TREE_GLOBAL',
    'SUM_TREE_GLOBALS',
    'checkpoint_filename',
    'exists',
    'list_directory',
    'remove_if_exists',
    'remove_temporaries',
    'refusing',
    'FileDigest',
    'file_digest',
    'atomic_write',
    'save_npy_gz',
    'save_pickle_gz',
    'save_dopamine_sum_tree_gz',
    'pickle_as_instance',
    'load_npy_gz',
    'load_pickle_gz',
    'restricted_loads',
    'read_file',
    'non_plain_data',
]

# The class Dopamine's checkpoints name for a pickled sum tree.
DOPAMINE_SUM_TREE_GLOBAL = ('dopamine.tf.replay_memory.sum_tree', 'SumTree')

# Every sum-tree class whose pickles load as a `PickledSumTreeState`.
SUM_TREE_GLOBALS = frozenset([
    DOPAMINE_SUM_TREE_GLOBAL,
    ('dopamine.replay_memory.sum_tree', 'SumTree'),
    ('dopamine_per.replay_memory.sum_tree', 'SumTree'),
])

# Protocol of the pickles we write. Dopamine writes Python's default (4 up to
# Python 3.13); 4 is readable by every Python 3 that Dopamine supports.
_PICKLE_PROTOCOL = 4

# Gzip level of the files we write (any level reads the same, Dopamine's 9
# included). Measured on a CartPole memory of 50k transitions: level 9 took
# 2.0 s for 0.88 MB, level 1 0.04 s for 0.98 MB; on Atari frames 10x faster
# for the same size.
_COMPRESS_LEVEL = 1

# Bytes read per call when filling an array from a gzip stream.
_READ_CHUNK = 1 << 24

# The largest .npy header read. NumPy writes headers of a few hundred bytes
# and refuses to parse more than 10,000 by default; version 2 headers declare
# their length in 4 bytes, so the cap is checked before the header is read.
_MAX_NPY_HEADER_BYTES = 1 << 16

# The bound of an array read without an expected shape or a caller's bound.
DEFAULT_MAX_ARRAY_BYTES = 1 << 30

# Bounds of what a pickle may hold: `max_bytes` of pickle data (after
# decompression), `max_elements` in total (every item of every list, tuple,
# set and dict, every array element, every 8 bytes of a str or bytes, and
# every object; shared references counted once per use), and `max_depth`
# levels of nesting.
PickleLimits = collections.namedtuple(
    'PickleLimits', ['max_bytes', 'max_elements', 'max_depth'])

# For callers that know nothing better: generous for any checkpoint's
# metadata, yet bounded (a bomb stops at 256 MiB).
DEFAULT_PICKLE_LIMITS = PickleLimits(max_bytes=1 << 28,
                                     max_elements=1 << 25,
                                     max_depth=64)

_URL = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*://')


class CheckpointError(ValueError):
  """A checkpoint file that cannot be used (base class of this module's)."""


class CorruptCheckpointError(CheckpointError):
  """A checkpoint file that is truncated, corrupt or of the wrong layout."""


class UnsafePickleError(CheckpointError, pickle.UnpicklingError):
  """A pickle that names a global outside the plain-data allow list.

  Catchable as `CheckpointError` (so as ValueError) or as
  `pickle.UnpicklingError`.
  """


class PickledSumTreeState(object):
  """Data-only stand-in for a pickled sum tree.

  Unpickling a Dopamine (or dopamine_per) ``SumTree`` with `load_pickle_gz`
  yields one of these instead: it holds the attribute dict the pickle carried
  (Dopamine's ``nodes`` and ``max_recorded_priority``) in `state`, and runs
  none of the original class's code.

  Attributes:
    state: dict, the pickled attributes (empty until the pickle's BUILD).
    source: str, the ``module.name`` of the class the pickle named.
  """

  source = ''

  def __init__(self, state: Optional[Dict[str, Any]] = None):
    self.state = {} if state is None else dict(state)

  def __setstate__(self, state: Any) -> None:
    if isinstance(state, tuple) and len(state) == 2:
      # (dict state, slot state), as pickle writes for classes with slots.
      dict_state, slot_state = state
      merged = {}
      for part in (dict_state, slot_state):
        if part is not None:
          if not isinstance(part, dict):
            raise pickle.UnpicklingError('Sum tree state is not a dict.')
          merged.update(part)
      state = merged
    if not isinstance(state, dict):
      raise pickle.UnpicklingError(
          'Sum tree state is a {}, not a dict.'.format(type(state).__name__))
    self.state = state

  def __repr__(self) -> str:
    return 'PickledSumTreeState(source={!r}, keys={})'.format(
        self.source, sorted(self.state))


def _stand_in_for(module: str, name: str) -> type:
  """A `PickledSumTreeState` subclass remembering the class it replaces."""
  return type('PickledSumTreeState', (PickledSumTreeState,),
              {'source': '{}.{}'.format(module, name),
               '__module__': __name__})


_STAND_INS = {key: _stand_in_for(*key) for key in SUM_TREE_GLOBALS}


def _latin1_encode(text: str, encoding: str = 'latin1') -> bytes:
  """`_codecs.encode` restricted to what protocol-2 pickles use for bytes."""
  if not isinstance(text, str) or encoding not in ('latin1', 'latin-1'):
    raise pickle.UnpicklingError(
        '_codecs.encode is only allowed for latin1 strings.')
  return text.encode('latin1')


def _from_items(kind: type) -> Callable[..., Any]:
  """`set` or `frozenset` of a pickled list or tuple only.

  Pickles build sets from a list of their items; anything else (an array of
  10**15 zero-byte elements, say) could make the call run unboundedly.
  """
  def build(items: Any = ()) -> Any:
    if type(items) not in (list, tuple):
      raise pickle.UnpicklingError(
          '{} may only be built from a list or tuple, not a {}.'.format(
              kind.__name__, type(items).__name__))
    return kind(items)
  build.__name__ = kind.__name__
  return build


def _bytearray(source: Any = b'', *args: Any) -> bytearray:
  """`bytearray` of pickled bytes or text only (not of a size to allocate)."""
  if type(source) not in (bytes, str, bytearray):
    raise pickle.UnpicklingError(
        'bytearray may only be built from bytes or str, not a {}.'.format(
            type(source).__name__))
  return bytearray(source, *args)


# Stands for numpy.ndarray in pickles: NumPy's arrays name it only as the
# first argument of `_reconstruct`, which `_reconstruct_array` accepts;
# calling it (an array of any shape, uninitialized) is refused.
_NDARRAY = object()


def _reconstruct_array(reconstruct: Callable[..., np.ndarray]
                      ) -> Callable[..., np.ndarray]:
  """NumPy's `_reconstruct`, only as its own pickles call it.

  NumPy pickles an array as an empty one (shape ``(0,)``) that the pickle's
  BUILD fills from bytes of the array's size; a larger shape here would
  allocate memory the pickle does not hold.
  """
  def build(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    if subtype is not _NDARRAY:
      raise pickle.UnpicklingError('_reconstruct is only allowed for arrays.')
    if (type(shape) is not tuple or len(shape) > 1 or
        not all(type(n) is int and 0 <= n <= 1 for n in shape)):
      raise pickle.UnpicklingError(
          '_reconstruct is only allowed for empty arrays, got shape {}.'
          .format(errors.describe(shape)))
    return reconstruct(np.ndarray, shape, dtype)
  return build


def _allowed_globals() -> Dict[Tuple[str, str], Any]:
  """The globals a plain-data pickle may name, mapped to what they load as."""
  allowed = {}
  for module in ('builtins', '__builtin__'):
    allowed[(module, 'set')] = _from_items(set)
    allowed[(module, 'frozenset')] = _from_items(frozenset)
    allowed[(module, 'complex')] = complex
    allowed[(module, 'bytearray')] = _bytearray
  allowed[('_codecs', 'encode')] = _latin1_encode
  # NumPy arrays, scalars and dtypes, under NumPy 1.x and 2.x module names.
  core = getattr(np, '_core', None) or np.core
  allowed[('numpy', 'ndarray')] = _NDARRAY
  allowed[('numpy', 'dtype')] = np.dtype
  for prefix in ('numpy.core', 'numpy._core'):
    allowed[(prefix + '.multiarray', '_reconstruct')] = _reconstruct_array(
        core.multiarray._reconstruct)
    allowed[(prefix + '.multiarray', 'scalar')] = core.multiarray.scalar
    allowed[(prefix + '.numeric', '_frombuffer')] = core.numeric._frombuffer
  allowed.update(_STAND_INS)
  return allowed


_ALLOWED_GLOBALS = _allowed_globals()


def _tuple_opcode(load: Callable[[Any], None]) -> Callable[[Any], None]:
  """Wraps an opcode of the pure-Python unpickler that builds a tuple."""
  def bounded_load(unpickler: '_RestrictedUnpickler') -> None:
    load(unpickler)
    unpickler.check_tuple(unpickler.stack[-1])
  return bounded_load


class _RestrictedUnpickler(pickle._Unpickler):  # pylint: disable=protected-access
  """An unpickler that builds plain data only (see the module docstring).

  Python's own (pure-Python) unpickler, so that tuples can be bounded as
  they are built: hashing a tuple nested a million deep (as a set item or a
  dict key does while unpickling) overflows the C stack, which no exception
  can catch. Depth and size of everything else are checked on the result
  (`_check_structure`).
  """

  dispatch = dict(pickle._Unpickler.dispatch)  # pylint: disable=protected-access
  for _opcode in (pickle.TUPLE, pickle.TUPLE1, pickle.TUPLE2, pickle.TUPLE3):
    dispatch[_opcode[0]] = _tuple_opcode(dispatch[_opcode[0]])
  del _opcode

  def __init__(self, file: BinaryIO, filename: str, max_depth: int):
    super().__init__(file)
    self._filename = filename
    self._max_depth = max_depth
    # Nesting depth of the tuples built so far that hold tuples, by id; the
    # tuples are kept alive so that their ids stay theirs.
    self._tuple_depths = {}
    self._nested_tuples = []

  def check_tuple(self, built: tuple) -> None:
    """Records the depth of a tuple just built; refuses too deep ones."""
    depth = 1
    for item in built:
      if type(item) is tuple:
        depth = max(depth, 1 + self._tuple_depths.get(id(item), 1))
    if depth > 1:
      if depth > self._max_depth:
        raise CorruptCheckpointError(
            '{}: tuples nested deeper than {} levels; refusing the pickle.'
            .format(self._filename, self._max_depth))
      self._tuple_depths[id(built)] = depth
      self._nested_tuples.append(built)

  def find_class(self, module: str, name: str) -> Any:
    try:
      return _ALLOWED_GLOBALS[(module, name)]
    except KeyError:
      raise UnsafePickleError(
          '{}: refusing to unpickle global {}.{}: checkpoints may hold plain '
          'data only (None, bool, int, float, complex, str, bytes, list, '
          'tuple, dict, set, frozenset, NumPy arrays/scalars/dtypes, and '
          'sum tree states).'.format(self._filename, module, name)) from None

  def persistent_load(self, pid: Any) -> Any:
    raise UnsafePickleError(
        '{}: refusing persistent id {} in a checkpoint pickle.'.format(
            self._filename, errors.describe(pid)))


# Types whose instances `restricted_loads` rebuilds, exactly (subclasses such
# as namedtuples, enums or np.matrix pickle their own class: refused).
_PLAIN_SCALARS = frozenset([type(None), bool, int, float, complex, str, bytes,
                            bytearray, np.dtype])
_PLAIN_CONTAINERS = frozenset([list, tuple, set, frozenset])


def non_plain_data(value: Any) -> Optional[str]:
  """Describes the first part of `value` that is not plain data, or None.

  Plain data is what `restricted_loads` rebuilds without running code:
  None, bools, numbers, strings, bytes, NumPy dtypes, scalars and arrays of
  non-object dtype, and lists, tuples, sets, frozensets and dicts of those.
  Nesting depth and shared or cyclic references are handled without
  recursion.

  Args:
    value: any object.

  Returns:
    None if `value` is plain data, else a short description of the first
    other object found: its type and where it sits, e.g.
    "a _thread.lock at ['locks'][1]".
  """
  # Each entry: (object, path), a path being None or (step, parent path).
  pending = [(value, None)]
  seen = set()
  while pending:
    item, path = pending.pop()
    kind = type(item)
    if kind in _PLAIN_SCALARS:
      continue
    if kind is np.ndarray or isinstance(item, np.generic):
      if not item.dtype.hasobject:
        continue
      description = 'a NumPy value of dtype object'
    elif kind in _PLAIN_CONTAINERS or kind is dict:
      if id(item) not in seen:
        seen.add(id(item))
        if kind is dict:
          for key, child in item.items():
            pending.append((key, ('<key {}>'.format(_brief(key)), path)))
            pending.append((child, ('[{}]'.format(_brief(key)), path)))
        else:
          pending.extend((child, ('[{}]'.format(position), path))
                         for position, child in enumerate(item))
      continue
    else:
      description = 'a {}.{}'.format(kind.__module__, kind.__qualname__)
    return description + _describe_path(path)
  return None


def _brief(key: Any) -> str:
  return errors.describe(key, 30) if type(key) in _PLAIN_SCALARS else (
      type(key).__name__)


def _describe_path(path: Any, limit: int = 8) -> str:
  """' at [a][b]...' for a path of `non_plain_data`, innermost steps kept."""
  steps = []
  while path is not None and len(steps) <= limit:
    step, path = path
    steps.append(step)
  if not steps:
    return ''
  prefix = '...' if len(steps) > limit else ''
  return ' at {}{}'.format(prefix, ''.join(reversed(steps[:limit])))


def _describe_error(error: BaseException) -> str:
  """'Type: message' of an error, cut to 200 characters; never raises."""
  try:
    text = str(error)
  except Exception:  # pylint: disable=broad-except
    text = ''
  text = text if len(text) <= 200 else text[:197] + '...'
  return '{}: {}'.format(type(error).__name__, text) if text else (
      type(error).__name__)


# Types `_check_structure` counts as one element each, without looking in.
_ATOMS = frozenset([type(None), bool, int, float, complex, np.dtype])
_TEXTS = frozenset([str, bytes, bytearray])
_NESTED = frozenset([list, tuple, set, frozenset, dict, np.ndarray])


def _children(item: Any) -> Any:
  """The items `_check_structure` looks in, or None for an element."""
  kind = type(item)
  if kind is dict:
    return [part for pair in item.items() for part in pair]
  if kind is np.ndarray:
    return item.ravel(order='K') if item.dtype.hasobject else ()
  if kind in _NESTED:
    return item
  if isinstance(item, PickledSumTreeState):
    return [getattr(item, 'state', {})]
  return None


def _element_count(item: Any) -> int:
  """The elements `item` counts for, its items aside (counted on their own).

  An array of plain values counts its elements (an empty one, or one of
  zero-byte elements, too); a str or bytes one per 8 bytes; anything else 1.
  """
  kind = type(item)
  if kind is np.ndarray and not item.dtype.hasobject:
    return max(item.size, 1)
  if kind in _TEXTS:
    return 1 + len(item) // 8
  return 1


def _check_structure(value: Any, limits: PickleLimits, filename: str) -> None:
  """Refuses unpickled data nested or, expanded, sized past `limits`.

  Walks `value` as a tree: an object reachable twice is counted twice, as
  converting the data (to an array, a set) would copy it twice, and a cycle
  fails the depth bound. Stops as soon as a bound is passed, so the work is
  bounded by the limits, not by the data.

  Raises:
    CorruptCheckpointError: If a bound is passed.
  """
  budget = limits.max_elements - _element_count(value)
  pending = [(value, 1)]
  while pending and budget >= 0:
    item, depth = pending.pop()
    children = _children(item)
    if children is None:
      continue
    if depth >= limits.max_depth and len(children):
      raise CorruptCheckpointError(
          '{}: data nested deeper than {} levels (or cyclic); refusing it.'
          .format(filename, limits.max_depth))
    for child in children:
      if type(child) in _ATOMS:  # The common case, kept short.
        budget -= 1
      else:
        budget -= _element_count(child)
        pending.append((child, depth + 1))
  if budget < 0:
    raise CorruptCheckpointError(
        '{}: data of more than {} elements (shared references counted at '
        'each use), more than this file can hold; refusing it.'.format(
            filename, limits.max_elements))


@contextlib.contextmanager
def refusing(path: str) -> Iterator[None]:
  """Turns any error inside the `with` into a CorruptCheckpointError.

  For reading and validating checkpoint file `path`: whatever goes wrong
  (MemoryError, OverflowError, RecursionError, OSError, AttributeError ...)
  comes out as one error type naming the file. `CheckpointError`s pass
  unchanged; so do exceptions that are not `Exception`s (KeyboardInterrupt).

  Raises:
    CorruptCheckpointError: chained to the original error.
  """
  try:
    yield
  except CheckpointError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise CorruptCheckpointError('{}: unusable: {}'.format(
        path, _describe_error(e))) from e


# ------------------------------------------------------------------- paths


def _is_url(path: str) -> bool:
  return bool(_URL.match(path))


def _gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.io.gfile


def checkpoint_filename(checkpoint_dir: str, name: str, suffix: Any) -> str:
  """Returns Dopamine's file name for attribute `name` of checkpoint `suffix`.

  Args:
    checkpoint_dir: str, the checkpoint directory.
    name: str, the attribute name (e.g. ``'$store$_observation'``).
    suffix: int or str, the iteration number.

  Returns:
    str, ``{checkpoint_dir}/{name}_ckpt.{suffix}.gz``.
  """
  return os.path.join(checkpoint_dir, '{}_ckpt.{}.gz'.format(name, suffix))


def exists(path: str) -> bool:
  """Returns whether `path` (a file or a directory) exists."""
  if _is_url(path):
    return bool(_gfile().exists(path))
  return os.path.exists(path)


def list_directory(path: str) -> list:
  """Returns the names in directory `path` ([] if it does not exist)."""
  if _is_url(path):
    gfile = _gfile()
    return list(gfile.listdir(path)) if gfile.exists(path) else []
  try:
    return os.listdir(path)
  except FileNotFoundError:
    return []


def remove_if_exists(path: str) -> bool:
  """Deletes the file at `path` if there is one.

  Args:
    path: str, the file to delete.

  Returns:
    bool, whether a file was deleted.
  """
  if _is_url(path):
    gfile = _gfile()
    if not gfile.exists(path):
      return False
    gfile.remove(path)
    return True
  try:
    os.remove(path)
  except FileNotFoundError:
    return False
  return True


def _fsync_directory(directory: str) -> None:
  """Flushes a directory entry to disk where the OS allows it."""
  try:
    fd = os.open(directory, os.O_RDONLY)
  except OSError:
    return  # E.g. Windows: directories cannot be opened.
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


# ----------------------------------------------------------------- digests

# The size in bytes and SHA-256 (hex) of a file as written. A checkpoint
# records one per file, and loading verifies them while reading.
FileDigest = collections.namedtuple('FileDigest', ['size', 'sha256'])


class _HashingWriter(object):
  """A write-only file object that hashes and counts what passes through."""

  def __init__(self, file: BinaryIO):
    self._file = file
    self._hash = hashlib.sha256()
    self.size = 0

  def write(self, data) -> int:
    self._hash.update(data)
    self.size += memoryview(data).nbytes
    self._file.write(data)
    return memoryview(data).nbytes

  def flush(self) -> None:
    self._file.flush()

  def digest(self) -> FileDigest:
    return FileDigest(self.size, self._hash.hexdigest())


class _VerifyingReader(object):
  """A read-only file object that checks the bytes read against a digest."""

  def __init__(self, file: BinaryIO, expected: FileDigest, path: str):
    self._file = file
    self._expected = FileDigest(*expected)
    self._path = path
    self._hash = hashlib.sha256()
    self._size = 0

  def read(self, size: int = -1) -> bytes:
    data = self._file.read(size)
    self._hash.update(data)
    self._size += len(data)
    return data

  def verify(self) -> None:
    """Reads what is left and compares; raises CorruptCheckpointError."""
    while self.read(_READ_CHUNK):
      pass
    if (self._size, self._hash.hexdigest()) != tuple(self._expected):
      raise CorruptCheckpointError(
          '{}: size or checksum differs from the one recorded when the '
          'checkpoint was written ({} bytes, sha256 {}...; recorded {} bytes, '
          'sha256 {}...).'.format(self._path, self._size,
                                  self._hash.hexdigest()[:12],
                                  self._expected.size,
                                  self._expected.sha256[:12]))


def file_digest(path: str) -> FileDigest:
  """Returns the size and SHA-256 of the file at `path`, read in chunks.

  Raises:
    FileNotFoundError: If a local file does not exist.
    CorruptCheckpointError: If `path` is not a regular file (a directory,
      FIFO or device, which could not be read or never to the end).
  """
  digest = hashlib.sha256()
  size = 0
  with _open_file(path) as f:
    while True:
      chunk = f.read(_READ_CHUNK)
      if not chunk:
        return FileDigest(size, digest.hexdigest())
      digest.update(chunk)
      size += len(chunk)


# ----------------------------------------------------------------- writing

# How `atomic_write` names its temporary files: '.{name}.{8 random
# characters}.tmp' in the destination directory (tempfile.mkstemp's random
# part), and '{name}.tmp-{12 hex digits}' for tf.io.gfile paths. A process
# killed while writing leaves one; `remove_temporaries` finds them by name.
_TEMP_PREFIX, _TEMP_SUFFIX = '.', '.tmp'
_LOCAL_TEMPORARY = re.compile(r'^\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp$')
_GFILE_TEMPORARY = re.compile(r'^(?P<target>.+)\.tmp-[0-9a-f]{12}$')


def _gfile_temporary(path: str) -> str:
  return '{}.tmp-{}'.format(path, os.urandom(6).hex())


def remove_temporaries(directory: str, is_target: Callable[[str], bool]
                      ) -> List[str]:
  """Deletes temporary files of `atomic_write` left by killed writers.

  Only files named as `atomic_write` names its temporaries, for a target
  name that `is_target` accepts, are deleted (regular files only, never a
  directory or a link): a user's other files are never touched. Call it
  only while no other process writes those targets.

  Args:
    directory: str, the directory written to.
    is_target: callable taking a file name (no directory) and returning
      whether temporaries of that name are the caller's.

  Returns:
    list of str, the paths deleted.
  """
  pattern = _GFILE_TEMPORARY if _is_url(directory) else _LOCAL_TEMPORARY
  removed = []
  for name in list_directory(directory):
    match = pattern.match(name)
    if not match or not is_target(match.group('target')):
      continue
    path = os.path.join(directory, name)
    if not _is_url(path):
      try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
          continue
      except FileNotFoundError:
        continue
    if remove_if_exists(path):
      removed.append(path)
  return removed


def atomic_write(path: str, write: Callable[[BinaryIO], None]) -> FileDigest:
  """Writes a file so that `path` holds either the old or the new content.

  `write` receives a binary file object for a temporary file in the same
  directory. When it returns, the file is flushed, fsync'ed and renamed onto
  `path` (``os.replace``), and the directory is fsync'ed. If `write` raises,
  the temporary file is deleted and `path` is untouched.

  Args:
    path: str, the destination file.
    write: callable taking a writable binary file object.

  Returns:
    FileDigest of the bytes written.

  Raises:
    Whatever `write` or the filesystem raises.
  """
  if _is_url(path):
    return _atomic_write_gfile(path, write)
  directory = os.path.dirname(os.path.abspath(path))
  fd, temp_path = tempfile.mkstemp(
      dir=directory, prefix=_TEMP_PREFIX + os.path.basename(path) + '.',
      suffix=_TEMP_SUFFIX)
  try:
    with os.fdopen(fd, 'wb') as f:
      hashing = _HashingWriter(f)
      write(hashing)
      f.flush()
      os.fsync(f.fileno())
    os.replace(temp_path, path)
  except BaseException:
    try:
      os.remove(temp_path)
    except OSError:
      pass
    raise
  _fsync_directory(directory)
  return hashing.digest()


def _atomic_write_gfile(path: str, write: Callable[[BinaryIO], None]
                       ) -> FileDigest:
  """`atomic_write` for tf.io.gfile paths: write a temp name, then rename."""
  gfile = _gfile()
  temp_path = _gfile_temporary(path)
  try:
    with gfile.GFile(temp_path, 'wb') as f:
      hashing = _HashingWriter(f)
      write(hashing)
    gfile.rename(temp_path, path, overwrite=True)
  except BaseException:
    try:
      if gfile.exists(temp_path):
        gfile.remove(temp_path)
    except Exception:  # pylint: disable=broad-except
      pass
    raise
  return hashing.digest()


def _gzip_writer(payload: Callable[[BinaryIO], None]
                ) -> Callable[[BinaryIO], None]:
  def write(f: BinaryIO) -> None:
    # mtime=0 keeps the files byte-identical across runs.
    with gzip.GzipFile(fileobj=f, mode='wb', mtime=0,
                       compresslevel=_COMPRESS_LEVEL) as gz:
      payload(gz)
  return write


def save_npy_gz(path: str, array: np.ndarray) -> FileDigest:
  """Atomically writes `array` as a gzip'd ``.npy`` stream (Dopamine's format).

  Args:
    path: str, the destination file.
    array: np.ndarray without Python objects.

  Raises:
    ValueError: If the array holds Python objects.
  """
  array = np.asarray(array)
  if array.dtype.hasobject:
    raise ValueError('{}: cannot save an object array without pickling.'
                     .format(path))
  return atomic_write(path, _gzip_writer(
      lambda gz: np.save(gz, array, allow_pickle=False)))


def save_pickle_gz(path: str, obj: Any) -> FileDigest:
  """Atomically writes `obj` as a gzip'd pickle (Dopamine's format).

  Args:
    path: str, the destination file.
    obj: picklable object. Keep it plain data if it is to be read back with
      `load_pickle_gz`.
  """
  data = pickle.dumps(obj, protocol=_PICKLE_PROTOCOL)
  return atomic_write(path, _gzip_writer(lambda gz: gz.write(data)))


def pickle_as_instance(module: str, qualname: str, state: Dict[str, Any]
                      ) -> bytes:
  """Pickles `state` as the attribute dict of an instance of `module.qualname`.

  The result is what ``pickle.dumps`` writes for an instance of a plain class
  with that ``__dict__`` (GLOBAL, empty args, NEWOBJ, state, BUILD), so
  ``pickle.load`` rebuilds an instance of that class without calling its
  ``__init__``. The class is only named, never imported here.

  Args:
    module: str, the class's module, e.g.
      ``'dopamine.tf.replay_memory.sum_tree'``.
    qualname: str, the class's name in its module, e.g. ``'SumTree'``.
    state: dict, the instance attributes.

  Returns:
    bytes, a protocol-3 pickle.

  Raises:
    ValueError: If `module` or `qualname` is not a dotted identifier.
  """
  for part in (module, qualname):
    if not re.match(r'^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$',
                    part):
      raise ValueError('Not a dotted identifier: {!r}'.format(part))
  if not isinstance(state, dict):
    raise ValueError('state must be a dict, got {}'.format(type(state)))
  # Protocol 3 has neither frames nor implicit memo numbering, so the body of
  # a standalone pickle of `state` can be spliced in unchanged: its memo
  # indices stay consistent because the opcodes around it memoize nothing.
  body = pickle.dumps(state, protocol=3)
  assert body[:2] == b'\x80\x03' and body[-1:] == pickle.STOP
  return b''.join([
      pickle.PROTO, b'\x03',
      pickle.GLOBAL, module.encode('ascii'), b'\n',
      qualname.encode('ascii'), b'\n',
      pickle.EMPTY_TUPLE,
      pickle.NEWOBJ,
      body[2:-1],
      pickle.BUILD,
      pickle.STOP,
  ])


def save_dopamine_sum_tree_gz(path: str, state: Dict[str, Any]
                             ) -> FileDigest:
  """Atomically writes a sum-tree state as a pickled Dopamine ``SumTree``.

  Dopamine's ``pickle.load`` of the file rebuilds its own
  ``dopamine.tf.replay_memory.sum_tree.SumTree`` with `state` as attributes;
  `load_pickle_gz` reads it back as a `PickledSumTreeState`.

  Args:
    path: str, the destination file.
    state: dict, e.g. ``SumTree.get_state()``: ``nodes`` (list of float64
      arrays, root first) and ``max_recorded_priority``.
  """
  data = pickle_as_instance(*DOPAMINE_SUM_TREE_GLOBAL, state)
  return atomic_write(path, _gzip_writer(lambda gz: gz.write(data)))


# ----------------------------------------------------------------- reading


def _file_kind(mode: int) -> str:
  for test, kind in ((stat.S_ISDIR, 'a directory'), (stat.S_ISFIFO, 'a FIFO'),
                     (stat.S_ISCHR, 'a character device'),
                     (stat.S_ISBLK, 'a block device'),
                     (stat.S_ISSOCK, 'a socket')):
    if test(mode):
      return kind
  return 'not a regular file'


def _open_regular(path: str) -> BinaryIO:
  """Opens local file `path` for reading if it is a regular file.

  The name is checked first, so a device is never opened; the file is then
  opened without blocking (a FIFO's open would wait for a writer) and the
  opened descriptor checked to be that same regular file.

  Raises:
    FileNotFoundError: If there is no such file.
    CorruptCheckpointError: If it is not a regular file, or cannot be opened.
  """
  try:
    named = os.stat(path)
    if not stat.S_ISREG(named.st_mode):
      raise CorruptCheckpointError(
          '{}: is {}, not a regular file; refusing to read it.'.format(
              path, _file_kind(named.st_mode)))
    fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NONBLOCK', 0) |
                 getattr(os, 'O_BINARY', 0))
    try:
      opened = os.fstat(fd)
      if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
        raise CorruptCheckpointError(
            '{}: replaced while being opened; refusing to read it.'.format(
                path))
      return os.fdopen(fd, 'rb')
    except BaseException:
      os.close(fd)
      raise
  except (FileNotFoundError, CheckpointError):
    raise
  except OSError as e:
    raise CorruptCheckpointError('{}: cannot be opened: {}'.format(
        path, e)) from e


def _open_file(path: str) -> BinaryIO:
  """Opens a checkpoint file for reading: local paths as regular files only.

  Raises:
    FileNotFoundError: If a local file does not exist.
    CorruptCheckpointError: If it is not a regular file (see
      `_open_regular`), or a tf.io.gfile path is a directory.
  """
  if not _is_url(path):
    return _open_regular(path)
  gfile = _gfile()
  if gfile.isdir(path):
    raise CorruptCheckpointError(
        '{}: is a directory, not a file; refusing to read it.'.format(path))
  return gfile.GFile(path, 'rb')


def read_file(path: str, limit: int, what: str = 'checkpoint file') -> bytes:
  """Returns the whole content of a file of at most `limit` bytes.

  Local paths must be regular files (see `_open_regular`: a FIFO or device
  is refused without blocking); at most `limit + 1` bytes are read.

  Args:
    path: str, the file.
    limit: int, the largest size accepted.
    what: str, what the file is, for the error message.

  Raises:
    FileNotFoundError: If a local file does not exist.
    CorruptCheckpointError: If it is not a regular file, is larger than
      `limit`, or cannot be read.
  """
  try:
    with _open_file(path) as f:
      data = f.read(limit + 1)
  except (FileNotFoundError, CheckpointError):
    raise
  except Exception as e:  # pylint: disable=broad-except
    # OSError locally; tf.errors.OpError through tf.io.gfile.
    raise CorruptCheckpointError('{}: cannot be read: {}'.format(
        path, errors.describe(e, 200))) from e
  if len(data) > limit:
    raise CorruptCheckpointError('{}: larger than any {} ({} bytes).'.format(
        path, what, limit))
  return data


@contextlib.contextmanager
def _open_read(path: str, expected: Optional[FileDigest] = None):
  """Opens `path` for reading; with `expected`, checks it once read.

  The caller reads what it needs inside the `with`; at its end, the rest of
  the file is read and its size and SHA-256 compared with `expected`.
  """
  with _open_file(path) as raw:
    if expected is None:
      yield raw
      return
    reader = _VerifyingReader(raw, expected, path)
    yield reader
    reader.verify()


_CORRUPTION_ERRORS = (EOFError, OSError, zlib.error, gzip.BadGzipFile)


def _read_exactly(gz: BinaryIO, out: memoryview, path: str) -> None:
  filled = 0
  total = len(out)
  while filled < total:
    count = gz.readinto(out[filled:filled + _READ_CHUNK])
    if not count:
      raise CorruptCheckpointError(
          '{}: truncated array data ({} of {} bytes).'.format(
              path, filled, total))
    filled += count


def _read_npy_header(gz: BinaryIO, path: str
                    ) -> Tuple[Tuple[int, ...], bool, np.dtype]:
  """Reads a .npy header, refusing one longer than _MAX_NPY_HEADER_BYTES.

  NumPy's reader reads a header of the length it declares (up to 4 GiB in
  version 2) before checking it; this checks the length first and hands
  NumPy only the bytes read.

  Returns:
    (shape, fortran_order, dtype), as `np.lib.format.read_array_header_1_0`.

  Raises:
    CorruptCheckpointError: If the header is missing, too long or malformed.
  """
  fmt = np.lib.format
  try:
    version = fmt.read_magic(gz)
  except ValueError as e:
    raise CorruptCheckpointError(
        '{}: not a .npy stream: {}'.format(path, e)) from e
  readers = {(1, 0): ('<H', fmt.read_array_header_1_0),
             (2, 0): ('<I', fmt.read_array_header_2_0)}
  if version not in readers:
    raise CorruptCheckpointError(
        '{}: unsupported .npy format version {}.'.format(path, version))
  length_format, read_header = readers[version]
  prefix = gz.read(struct.calcsize(length_format))
  if len(prefix) != struct.calcsize(length_format):
    raise CorruptCheckpointError('{}: truncated .npy header.'.format(path))
  length, = struct.unpack(length_format, prefix)
  if length > _MAX_NPY_HEADER_BYTES:
    raise CorruptCheckpointError(
        '{}: .npy header of {} bytes (at most {} are read); refusing it.'
        .format(path, length, _MAX_NPY_HEADER_BYTES))
  header = gz.read(length)
  if len(header) != length:
    raise CorruptCheckpointError('{}: truncated .npy header.'.format(path))
  try:
    return read_header(io.BytesIO(prefix + header),
                       max_header_size=_MAX_NPY_HEADER_BYTES)
  except Exception as e:  # pylint: disable=broad-except
    # ValueError mostly; a hostile header may cause others (RecursionError,
    # MemoryError in its literal parser).
    raise CorruptCheckpointError('{}: malformed .npy header: {}'.format(
        path, _describe_error(e))) from e


def _check_npy_header(path: str, header: Tuple[Any, bool, np.dtype],
                      shape: Optional[Sequence[int]], dtype: Any,
                      max_bytes: int) -> None:
  """Checks an array's header before anything is allocated for it.

  Raises:
    CorruptCheckpointError: If the array holds Python objects, does not have
      `shape` or `dtype`, or its data would take more than `max_bytes` (each
      element counting at least one byte).
  """
  file_shape, _, file_dtype = header
  if file_dtype.hasobject:
    raise CorruptCheckpointError(
        '{}: holds Python objects ({}); refusing to unpickle.'.format(
            path, file_dtype))
  if shape is not None and tuple(file_shape) != tuple(shape):
    raise CorruptCheckpointError(
        '{}: array has shape {}, expected {}.'.format(
            path, tuple(file_shape), tuple(shape)))
  if dtype is not None:
    wanted = np.dtype(dtype)
    if file_dtype.newbyteorder('<') != wanted.newbyteorder('<'):
      raise CorruptCheckpointError(
          '{}: array has dtype {}, expected {}.'.format(
              path, file_dtype, wanted))
  if any(n < 0 for n in file_shape):
    raise CorruptCheckpointError(
        '{}: array has a negative dimension: {}.'.format(path, file_shape))
  size = math.prod(file_shape) * max(file_dtype.itemsize, 1)
  if size > max_bytes:
    raise CorruptCheckpointError(
        '{}: array of shape {} and dtype {} ({} bytes) is larger than this '
        'file can hold ({} bytes); refusing it.'.format(
            path, errors.describe(tuple(file_shape)), file_dtype, size, max_bytes))


def load_npy_gz(path: str,
                shape: Optional[Sequence[int]] = None,
                dtype: Any = None,
                expected: Optional[FileDigest] = None,
                max_bytes: Optional[int] = None) -> np.ndarray:
  """Reads a gzip'd ``.npy`` file without ever unpickling.

  The header is read with a small cap and checked against `shape`, `dtype`
  and `max_bytes` before the data is read, so a mismatched or oversized
  file is refused without allocating its array, and at most the array's
  bytes are decompressed. The whole gzip stream is read, so its CRC is
  verified.

  Args:
    path: str, the file.
    shape: optional tuple of ints the array must have.
    dtype: optional dtype the array must have (byte order aside); the result
      is converted to it.
    expected: optional FileDigest the file must match (checked as it is
      read).
    max_bytes: optional int, the most bytes the array may take (each
      element counting at least one); default: `DEFAULT_MAX_ARRAY_BYTES`
      unless `shape` is given.

  Returns:
    np.ndarray.

  Raises:
    FileNotFoundError: If the file does not exist (a local path).
    CorruptCheckpointError: If the file is not a regular file holding a
      complete gzip'd ``.npy`` stream, holds Python objects, does not match
      `shape`/`dtype`, or is larger than `max_bytes`.
  """
  if max_bytes is None:
    max_bytes = math.inf if shape is not None else DEFAULT_MAX_ARRAY_BYTES
  with _open_read(path, expected) as raw:
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
          raise CorruptCheckpointError(
              '{}: trailing data after the array.'.format(path))
    except CheckpointError:
      raise
    except _CORRUPTION_ERRORS as e:
      raise CorruptCheckpointError(
          '{}: corrupt or truncated gzip file: {}'.format(path, e)) from e
    except ValueError as e:
      raise CorruptCheckpointError(
          '{}: malformed .npy data: {}'.format(path, e)) from e
  if dtype is not None and array.dtype != np.dtype(dtype):
    array = array.astype(dtype)
  return array


def restricted_loads(data: bytes, filename: str = '<bytes>',
                     limits: Optional[PickleLimits] = None) -> Any:
  """Unpickles plain data only, within bounds (see the module docstring).

  Args:
    data: bytes, a pickle.
    filename: str, named in error messages.
    limits: PickleLimits the data must keep to; default
      `DEFAULT_PICKLE_LIMITS`.

  Returns:
    The unpickled object; sum-tree instances come back as
    `PickledSumTreeState`.

  Raises:
    UnsafePickleError: If the pickle names a global outside the allow list.
    CorruptCheckpointError: If the pickle is malformed, truncated, or passes
      a bound of `limits`.
  """
  limits = DEFAULT_PICKLE_LIMITS if limits is None else limits
  if len(data) > limits.max_bytes:
    raise CorruptCheckpointError(
        '{}: a pickle of {} bytes, more than this file can hold ({} bytes); '
        'refusing it.'.format(filename, len(data), limits.max_bytes))
  try:
    value = _RestrictedUnpickler(io.BytesIO(data), filename,
                                 limits.max_depth).load()
    _check_structure(value, limits, filename)
    return value
  except CheckpointError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # A malformed pickle can raise nearly anything (EOFError, UnpicklingError,
    # ValueError, TypeError, IndexError, KeyError, MemoryError ...).
    raise CorruptCheckpointError(
        '{}: corrupt or truncated pickle: {}'.format(
            filename, _describe_error(e))) from e


def load_pickle_gz(path: str, expected: Optional[FileDigest] = None,
                   limits: Optional[PickleLimits] = None) -> Any:
  """Reads a gzip'd pickle with the restricted unpickler, within bounds.

  At most ``limits.max_bytes`` (plus one) are decompressed: a gzip bomb is
  refused after reading that much.

  Args:
    path: str, the file.
    expected: optional FileDigest the file must match.
    limits: PickleLimits the pickle must keep to; default
      `DEFAULT_PICKLE_LIMITS`.

  Returns:
    The unpickled plain data (see `restricted_loads`).

  Raises:
    FileNotFoundError: If the file does not exist (a local path).
    UnsafePickleError: If the pickle names a global outside the allow list.
    CorruptCheckpointError: If the file is not a regular file holding a
      complete gzip'd pickle within `limits`.
  """
  limits = DEFAULT_PICKLE_LIMITS if limits is None else limits
  with _open_read(path, expected) as raw:
    try:
      with gzip.GzipFile(fileobj=raw, mode='rb') as gz:
        data = gz.read(limits.max_bytes + 1)
    except _CORRUPTION_ERRORS as e:
      raise CorruptCheckpointError(
          '{}: corrupt or truncated gzip file: {}'.format(path, e)) from e
    if len(data) > limits.max_bytes:
      raise CorruptCheckpointError(
          '{}: decompresses to more than {} bytes, more than this file can '
          'hold (a gzip bomb?); refusing it.'.format(path, limits.max_bytes))
  return restricted_loads(data, filename=path, limits=limits)
