# coding=utf-8
"""Argument checks shared by the sum tree and the replay memories.

Each check lives here once, so that the tree and the memories refuse the
same inputs with the same exception types and messages. NumPy only.
"""

import functools
import numbers
import operator
from typing import Any, Optional, Tuple

import numpy as np

from dopamine_per import errors

__all__ = [
    'MAX_ADD_COUNT',
    'MAX_REPLAY_CAPACITY',
    'check_add_count',
    'check_index_array',
    'check_int',
    'check_real',
    'check_rng',
    'check_sum_tree_state',
    'check_room_to_add',
    'check_priority_dtype',
    'head',
    'is_scalar',
    'priority_bounds',
    'check_index',
    'check_indices',
    'check_priorities',
    'check_priority',
]


# ---------------------------------------------------------------- integers


def check_int(name: str, value: Any, minimum: int,
              maximum: Optional[int] = None) -> int:
  """Returns `value` as an int if it is an integer (not a bool) in range.

  Args:
    name: the argument's name, for the error message.
    value: the argument.
    minimum: the smallest value accepted.
    maximum: the largest value accepted, or None for no bound.

  Raises:
    ValueError: If the value is not an integer or is out of range.
  """
  if (type(value) is int and value >= minimum and  # pylint: disable=unidiomatic-typecheck
      (maximum is None or value <= maximum)):
    return value  # The common case, without the slow ABC check.
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise ValueError('{} must be an int, got {!r}'.format(name, value))
  if value < minimum:
    raise ValueError('{} must be >= {}, got {}'.format(name, minimum, value))
  if maximum is not None and value > maximum:
    raise ValueError('{} must be <= {}, got {}'.format(name, maximum, value))
  return int(value)


# ---------------------------------------------------------- add counter

# The largest `add_count` (transitions written, padding included) a replay
# memory accepts or reaches: 2**53, exact as a float64 (why:
# docs/reliability.md).
_ADD_COUNT_BITS = 53
MAX_ADD_COUNT = 2**_ADD_COUNT_BITS

# The largest replay_capacity a memory takes: a sampled batch's `indices`
# are int32, as Dopamine's, and slots past it would wrap (and a graph's
# `set_priority` write other slots' priorities).
MAX_REPLAY_CAPACITY = 2**31 - 1


def check_add_count(value: Any) -> int:
  """Returns an integer (not a bool) or one-element integer array as an int.

  Raises:
    ValueError: If it is not such an integer or is outside
      [0, MAX_ADD_COUNT].
  """
  if isinstance(value, numbers.Integral) and not isinstance(value, bool):
    count = int(value)
  else:
    try:
      array = np.asarray(value)
    except Exception:  # pylint: disable=broad-except
      array = np.asarray(None)  # A ragged list, say: not a count.
    count = (int(array.reshape(())) if array.size == 1 and
             array.dtype.kind in 'iu' else None)
  if count is None or not 0 <= count <= MAX_ADD_COUNT:
    raise ValueError('add_count must be an integer in [0, 2**{}], got {}'
                     .format(_ADD_COUNT_BITS, errors.describe(
                         value if count is None else count)))
  return count


def check_room_to_add(add_count: int, writes: int) -> None:
  """Checks that `writes` more transitions (padding included) fit.

  Raises:
    OverflowError: If add_count + writes would pass MAX_ADD_COUNT.
  """
  if add_count + writes > MAX_ADD_COUNT:
    raise OverflowError(
        'add would write {} transition(s) after add_count {}, past its '
        'bound of 2**{} (validation.MAX_ADD_COUNT); nothing was written. '
        'To go on, lower add_count by a multiple of replay_capacity (the '
        'cursor stays).'.format(
            writes, add_count, _ADD_COUNT_BITS))


# ------------------------------------------------------------ real numbers


def check_real(name: str, value: Any, minimum: float, maximum: float
              ) -> float:
  """Returns `value` as a float if it is a real number in [minimum, maximum].

  A real number is what `check_priority` takes; NaN and infinities are
  outside any finite range. `name` names the argument in the message.

  Raises:
    dopamine_per.errors.ArgumentError: (a ValueError and an AssertionError)
      If it is not a real number, or is NaN or outside [minimum, maximum].
  """
  try:
    number = _real_scalar(value, name, np.float64)
  except ValueError:  # Not a real number, or an int beyond any float.
    number = None
  if number is None or not minimum <= number <= maximum:  # NaN fails too.
    raise errors.ArgumentError(
        '{} must be a real number in [{:g}, {:g}] (not NaN, a bool, a string '
        'or a complex number), got {}'.format(name, minimum, maximum,
                                              errors.describe(value)))
  return number


def check_rng(rng: Any) -> Optional[np.random.Generator]:
  """The generator of `rng` (a seed or a Generator), or None for None.

  Raises:
    ValueError: If `rng` is a bool (or a seed `np.random.default_rng`
      refuses).
  """
  if isinstance(rng, bool):
    raise ValueError('rng must be None, a seed or a Generator, got bool')
  return None if rng is None else np.random.default_rng(rng)


# ----------------------------------------------------------------- indices


def check_index(index: Any, capacity: int, name: str) -> int:
  """Returns `index` as an int if it is an integer in [0, capacity).

  Raises:
    errors.InvalidIndexTypeError: If the index is not an integer.
    errors.InvalidIndexError: If it is outside [0, capacity).
  """
  try:
    checked = operator.index(index)
  except TypeError:
    raise errors.InvalidIndexTypeError('{} must be an integer. Got: {!r}'.format(
        name, index)) from None
  if not 0 <= checked < capacity:
    raise errors.InvalidIndexError('{} must be in [0, {}). Got: {}'.format(
        name, capacity, checked))
  return checked


def check_indices(indices: Any, capacity: int, name: str) -> np.ndarray:
  """Returns integer `indices` in [0, capacity) as an array (int64 if empty).

  Raises:
    errors.InvalidIndexTypeError: If the indices are not integers.
    errors.InvalidIndexError: If an index is outside [0, capacity).
  """
  array = np.asarray(indices)
  if array.dtype.kind not in 'iu':
    if array.size == 0:
      return array.astype(np.int64)
    raise errors.InvalidIndexTypeError(
        '{} must be integers. Got dtype {}: {!r}'.format(name, array.dtype,
                                                         array.flat[0]))
  if array.size and (array.min() < 0 or array.max() >= capacity):
    bad = array[(array < 0) | (array >= capacity)].flat[0]
    raise errors.InvalidIndexError('{} must be in [0, {}). Got: {}'.format(
        name, capacity, bad))
  return array


def check_index_array(indices: Any, capacity: int) -> np.ndarray:
  """`check_indices` of a memory's `indices` argument, never a scalar.

  Raises:
    errors.ArgumentError: (a ValueError and an AssertionError, as Dopamine
      asserts) If `indices` is a scalar.
    errors.InvalidIndexTypeError, errors.InvalidIndexError: see `check_indices`.
  """
  if np.ndim(indices) == 0:
    raise errors.ArgumentError(
        'indices must be an array, got {!r}'.format(indices))
  return check_indices(indices, capacity, 'indices')


_FAST_SCALARS = frozenset([int, float, np.int64, np.float64, np.int32,
                           np.float32])


def is_scalar(value: Any) -> bool:
  """Whether `value` is one number (a Python or NumPy scalar, a 0-d array)."""
  return type(value) in _FAST_SCALARS or isinstance(
      value, (numbers.Number, np.generic)) or (
          isinstance(value, np.ndarray) and value.ndim == 0)


def head(values: Any, count: int = 4) -> str:
  """The first `count` values, for error messages about large batches."""
  values = np.asarray(values).ravel()
  text = ', '.join(repr(v) for v in values[:count].tolist())
  return '[{}{}]'.format(text, ', ...' if values.size > count else '')


# -------------------------------------------------------------- priorities


def check_priority_dtype(dtype: Any) -> np.dtype:
  """Checks a SumTree's priority_dtype: float16, float32 or float64.

  Raises:
    ValueError: If it is not one of them.
  """
  try:
    checked = np.dtype(dtype)
  except TypeError:
    checked = None
  if checked is None or checked.kind != 'f' or checked.itemsize > 8:
    raise ValueError('priority_dtype must be float16, float32 or float64. '
                     'Got: {!r}'.format(dtype))
  return checked


@functools.lru_cache(maxsize=None)
def priority_bounds(dtype: Any) -> Tuple[float, float]:
  """The smallest positive and the largest priority `dtype` holds.

  Between them (and at 0) a float64 priority reads back in `dtype` as a
  positive finite number. The largest is `dtype`'s largest value as NumPy
  prints it, when that is above the value itself (3.4028235e38 for
  float32), so that the bound the messages state is itself accepted.
  """
  info = np.finfo(dtype)
  printed = float(np.format_float_scientific(info.max, unique=True))
  return float(info.smallest_subnormal), max(float(info.max), printed)


def _range_error(name: str, number: Any, dtype: Any) -> ValueError:
  # The native op setting priorities writes this text too (PriorityOutOfRange
  # in dopamine_per/native/replay_ops.cc): change both.
  smallest, largest = priority_bounds(dtype)
  return ValueError(
      '{} should be nonnegative and finite: 0 or in [{!r}, {!r}] (the '
      'positive range of {}). Got {}'.format(
          name, smallest, largest, np.dtype(dtype).name,
          errors.describe(number)))


def _type_error(name: str, value: Any) -> ValueError:
  return ValueError('{} should be real numbers (not bools, strings or '
                    'complex numbers). Got {}'.format(name,
                                                      errors.describe(value)))


def _real_scalar(value: Any, name: str, dtype: Any) -> float:
  """Returns a real number (not a bool, string or complex) as a float.

  Raises:
    ValueError: If it is not one, or is an int beyond any float (named as
      outside `dtype`'s range).
  """
  if isinstance(value, numbers.Real) and not isinstance(value, bool):
    try:
      return float(value)
    except OverflowError:  # An int beyond any float.
      raise _range_error(name, value, dtype) from None
  if not isinstance(value, (bool, str, bytes, numbers.Number)):
    try:
      array = np.asarray(value)  # A 0-d array or tensor, say.
    except Exception:  # pylint: disable=broad-except
      array = None
    if array is not None and array.ndim == 0 and array.dtype.kind in 'fiu':
      return float(array)
  raise _type_error(name, value)


def check_priority(value: Any, name: str = 'value',
                      dtype: Any = np.float64) -> float:
  """Checks one priority; returns it as a float.

  A priority is a real number (a Python or NumPy integer or float, or a 0-d
  array of one; not a string, bytes, complex number or bool) that is 0 or
  lies between the `priority_bounds` of `dtype` (float16, 32 or 64),
  inclusive: it then reads back in `dtype` as itself, never as 0 or inf.
  `name` names the argument in the message.

  Raises:
    ValueError: If the value is not a real number, or is negative, NaN,
      infinite or outside `dtype`'s range.
  """
  number = (value if type(value) is float else
            _real_scalar(value, name, dtype))
  smallest, largest = priority_bounds(dtype)
  if not smallest <= number <= largest and number != 0.0:  # NaN fails both.
    raise _range_error(name, number, dtype)
  return number


def _real_array(values: Any, name: str, dtype: Any) -> np.ndarray:
  """Returns an array-like of real numbers as a float64 array."""
  try:
    array = np.asarray(values)
  except Exception:  # pylint: disable=broad-except
    array = None
  if array is not None:
    kind = array.dtype.kind
    if kind == 'f' or kind in 'iu':
      return array.astype(np.float64, copy=False)
    if kind == 'O' and array.size:
      # Python ints past int64, Fractions: real, but boxed.
      return np.array([_real_scalar(v, name, dtype) for v in array.flat]
                     ).reshape(array.shape)
  raise _type_error(name, values if array is None or not array.size
                    else array.flat[0])


def check_priorities(values: Any, shape: Tuple[int, ...],
                        name: str = 'value', dtype: Any = np.float64
                       ) -> np.ndarray:
  """Checks priorities (each as `check_priority`), broadcast to `shape`.

  Returns:
    float64 array of shape `shape` (possibly a broadcast view).

  Raises:
    ValueError: If a value is not a real number, is negative, NaN, infinite
      or outside `dtype`'s range, or the shapes do not match.
  """
  array = _real_array(values, name, dtype)
  try:
    array = np.broadcast_to(array, shape)
  except ValueError:
    raise ValueError('{} of shape {} do not fit indices of shape {}.'.format(
        name, np.shape(values), shape)) from None
  smallest, largest = priority_bounds(dtype)
  ok = (array >= smallest) & (array <= largest)
  if not ok.all():
    ok |= array == 0.0  # Rare: checked only when a value is out of range.
    if not ok.all():
      raise _range_error(name, array[~ok].flat[0].item(), dtype)
  return array


def check_sum_tree_state(state: Any, capacity: int, priority_dtype: Any
                         ) -> Tuple[np.ndarray, float]:
  """Checks a `SumTree.set_state` state; returns its leaves and maximum.

  The state must leave a tree of `capacity` leaves as `set` could have:
  Dopamine's binary leaf level (a power of two long, zero past capacity)
  of valid priorities of `priority_dtype`, and a max_recorded_priority
  that is one too, at least 1.0 and every leaf. Whether the leaves' sum
  fits a float64 is the tree's to check (its arithmetic).

  Args:
    state: what `SumTree.get_state` returns, or a Dopamine tree's state.
    capacity: the tree's capacity.
    priority_dtype: the tree's priority dtype.

  Returns:

    (float64 leaves, max_recorded_priority).

  Raises:
    ValueError: naming what is wrong.
  """
  if not isinstance(state, dict):
    raise ValueError('Not a sum tree state: a {}, not a dict.'.format(
        type(state).__name__))
  missing = [key for key in ('nodes', 'max_recorded_priority')
             if key not in state]
  nodes = state.get('nodes')
  if missing or type(nodes) not in (list, tuple) or not nodes:
    raise ValueError('Not a sum tree state: it needs nodes (a non-empty '
                     'list of levels) and max_recorded_priority.')
  try:
    raw = np.asarray(nodes[-1])
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError('Not a sum tree state: its leaves are not an array '
                     '({}).'.format(type(e).__name__)) from e
  expected = 1 << max(capacity - 1, 0).bit_length()
  if raw.shape != (expected,):
    raise ValueError(
        'Sum tree state has {} leaves; a tree of capacity {} has {}.'.format(
            raw.shape, capacity, expected))
  if raw.dtype.kind not in 'fiu':
    # Not complex (the imaginary part would be dropped), strings (they
    # would be parsed), bools or objects.
    raise ValueError('Sum tree state leaves must be real numbers, got '
                     'dtype {}.'.format(raw.dtype))
  with np.errstate(over='ignore'):  # Wider floats: inf is refused below.
    leaves = raw.astype(np.float64)
  check_priorities(leaves, leaves.shape, 'Sum tree state leaves',
                      priority_dtype)
  if np.any(leaves[capacity:] != 0.0):
    raise ValueError('Sum tree state has priorities past capacity {}.'.format(
        capacity))
  try:
    max_priority = check_priority(state['max_recorded_priority'],
                                     'max_recorded_priority',
                                     priority_dtype)
  except ValueError as e:
    raise ValueError('Invalid max_recorded_priority: {}'.format(e)) from e
  largest = max(1.0, float(leaves.max()))
  if max_priority < largest:
    raise ValueError(
        'Invalid max_recorded_priority: {!r} is below {!r}, the largest '
        'priority (or 1.0): it must bound every priority.'.format(
            max_priority, largest))
  return leaves, max_priority
