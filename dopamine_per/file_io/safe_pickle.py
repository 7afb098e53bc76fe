# coding=utf-8
"""Unpickling plain data only, within bounds, and pickling without imports.

Checkpoints hold pickles (Dopamine's format for everything that is not an
array), and ``pickle.load`` runs whatever code a pickle names.
`restricted_loads` builds plain data only (`non_plain_data` says what
that is) and refuses every other global with `UnsafePickleError`; a
pickled Dopamine ``SumTree`` loads as a `PickledSumTreeState`, data only.
What it builds is bounded by its `PickleLimits`, and a malformed,
truncated or oversized pickle raises `atomic_files.CorruptCheckpointError`
naming the file. `pickle_as_instance` writes a pickle of an instance of a
class it only names (a Dopamine ``SumTree`` that Dopamine's
``pickle.load`` rebuilds). How this differs from Dopamine, which unpickles
anything: docs/compat.md#file_io.
"""

import collections
import io
import pickle
import re
from typing import Any, BinaryIO, Callable, Dict, Optional, Tuple

import numpy as np

from dopamine_per import errors
from dopamine_per.file_io import atomic_files

__all__ = ['dumps', 'UnsafePickleError', 'PickledSumTreeState', 'PickleLimits',
           'DEFAULT_PICKLE_LIMITS', 'DOPAMINE_SUM_TREE_GLOBAL',
           'SUM_TREE_GLOBALS', 'restricted_loads', 'non_plain_data',
           'pickle_as_instance']

# The class Dopamine's checkpoints name for a pickled sum tree.
DOPAMINE_SUM_TREE_GLOBAL = ('dopamine.tf.replay_memory.sum_tree', 'SumTree')

# Every sum-tree class whose pickles load as a `PickledSumTreeState`.
SUM_TREE_GLOBALS = frozenset([
    DOPAMINE_SUM_TREE_GLOBAL,
    ('dopamine.replay_memory.sum_tree', 'SumTree'),
    ('dopamine_per.replay_memory.sum_tree', 'SumTree'),
])

# Bounds of what a pickle may hold: `max_bytes` of pickle data (after
# decompression), `max_elements` in total (every item of every list, tuple,
# set and dict, every array element, every 8 bytes of a str or bytes, and
# every object; shared references counted once per use), and `max_depth`
# levels of nesting.
PickleLimits = collections.namedtuple(
    'PickleLimits', ['max_bytes', 'max_elements', 'max_depth'])

# For callers that know nothing better: generous for any checkpoint's
# metadata, yet bounded.
DEFAULT_PICKLE_LIMITS = PickleLimits(max_bytes=1 << 28,
                                     max_elements=1 << 25,
                                     max_depth=64)


class UnsafePickleError(atomic_files.CheckpointError, pickle.UnpicklingError):
  """A pickle that names a global outside the plain-data allow list.

  Catchable as `CheckpointError` (so as ValueError) or as
  `pickle.UnpicklingError`.
  """


class PickledSumTreeState(object):
  """Data-only stand-in for a pickled sum tree.

  Unpickling a Dopamine (or dopamine_per) ``SumTree`` with `restricted_loads`
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
  # Their pickles name NumPy's private `_reconstruct` and `_frombuffer` (and
  # NumPy 2 keeps them in `numpy._core`): the allowlist must map those names.
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


# `pickle._Unpickler` is private, but the public (C) one has no opcode table.
class _RestrictedUnpickler(pickle._Unpickler):  # pylint: disable=protected-access
  """An unpickler that builds plain data only (see the module docstring).

  Python's own (pure-Python) unpickler, so that tuples can be bounded as
  they are built: hashing a tuple nested a million deep (as a set item or a
  dict key does) overflows the C stack. Everything else is checked on the
  result (`_check_structure`).
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
        raise atomic_files.CorruptCheckpointError(
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
    atomic_files.CorruptCheckpointError: If a bound is passed.
  """
  budget = limits.max_elements - _element_count(value)
  pending = [(value, 1)]
  while pending and budget >= 0:
    item, depth = pending.pop()
    children = _children(item)
    if children is None:
      continue
    if depth >= limits.max_depth and len(children):
      raise atomic_files.CorruptCheckpointError(
          '{}: data nested deeper than {} levels (or cyclic); refusing it.'
          .format(filename, limits.max_depth))
    for child in children:
      if type(child) in _ATOMS:  # The common case, kept short.
        budget -= 1
      else:
        budget -= _element_count(child)
        pending.append((child, depth + 1))
  if budget < 0:
    raise atomic_files.CorruptCheckpointError(
        '{}: data of more than {} elements (shared references counted at '
        'each use), more than this file can hold; refusing it.'.format(
            filename, limits.max_elements))


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
    atomic_files.CorruptCheckpointError: If the pickle is malformed,
      truncated, or passes a bound of `limits`.
  """
  limits = DEFAULT_PICKLE_LIMITS if limits is None else limits
  if len(data) > limits.max_bytes:
    raise atomic_files.CorruptCheckpointError(
        '{}: a pickle of {} bytes, more than this file can hold ({} bytes); '
        'refusing it.'.format(filename, len(data), limits.max_bytes))
  try:
    value = _RestrictedUnpickler(io.BytesIO(data), filename,
                                 limits.max_depth).load()
    _check_structure(value, limits, filename)
    return value
  except atomic_files.CheckpointError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # A malformed pickle can raise nearly anything (EOFError, UnpicklingError,
    # ValueError, TypeError, IndexError, KeyError, MemoryError ...).
    raise atomic_files.CorruptCheckpointError(
        '{}: corrupt or truncated pickle: {}'.format(
            filename, atomic_files.describe_error(e))) from e


def dumps(obj: Any, protocol: int) -> bytes:
  """`pickle.dumps(obj, protocol)` without the memo: an equal string or
  tuple is written each time, not shared, so the bytes depend on the value
  only, not on which of its parts are one object (a converted checkpoint's
  files are byte for byte the original's). `obj` must hold no cycle."""
  buffer = io.BytesIO()
  pickler = pickle.Pickler(buffer, protocol=protocol)
  pickler.fast = True
  pickler.dump(obj)
  return buffer.getvalue()


def pickle_as_instance(module: str, qualname: str, state: Dict[str, Any],
                       memo: bool = True) -> bytes:
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
    memo: bool, False to pickle without the memo (`dumps`).

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
  body = (pickle.dumps(state, protocol=3) if memo else
          dumps(state, protocol=3))
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
