# coding=utf-8
"""The checks `add` runs on its arguments before anything is written.

A replay memory must not store a value its element's dtype cannot hold
exactly, nor one of the wrong shape: a sampled batch would silently carry
the damage. `AddSpec` precomputes what one argument's checks need, so that
`check_value` stays cheap. Where Dopamine casts silently instead:
docs/compat.md#add_checks.
"""

import math
import operator
import sys
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from dopamine_per import errors

__all__ = ['AddSpec', 'check_extra', 'check_shape', 'check_value',
           'check_values', 'native_byte_order', 'specs_and_padding']

# Result of checking whether values of one dtype may be stored in another:
# always, if every value is in the target's range (integers into integers),
# if every value converts exactly (floats or complex numbers into integers,
# complex numbers into floats), if no finite value becomes infinite (into a
# float or complex dtype whose range is smaller), or never.
(_CAST_OK, _CAST_IF_IN_RANGE, _CAST_IF_EXACT, _CAST_IF_FINITE,
 _CAST_REFUSED) = range(5)


def check_shape(name: str, shape: Any) -> Tuple[int, ...]:
  """Returns `shape` as a tuple of ints >= 0 (`name` names it in errors).

  Raises:
    ValueError: If it is not a sequence of integers >= 0.
  """
  try:
    dims = tuple(operator.index(d) for d in shape)
  except TypeError:
    raise ValueError('{} must be a tuple of ints, got {!r}'.format(
        name, shape)) from None
  if any(d < 0 for d in dims):
    raise ValueError('{} must be a tuple of ints >= 0, got {!r}'.format(
        name, shape))
  return dims


# The names of a sampled transition's own elements, which an extra storage
# element would shadow in the batch (the storage's own names are refused as
# duplicates by the storage).
TRANSITION_NAMES = frozenset((
    'state', 'next_state', 'next_action', 'next_reward', 'indices',
    'sampling_probabilities'))


def check_extra(element: Any) -> Tuple[str, Tuple[int, ...], Any]:
  """A ReplayElement's (name, shape as a tuple, native dtype), checked.

  An extra named like one of the batch's own elements would come back in
  its place.

  Raises:
    ValueError: If the name is not a non-empty string or is one of
      `TRANSITION_NAMES`, or the shape is malformed.
  """
  name, shape, dtype = element
  if not isinstance(name, str) or not name:
    raise ValueError('extra_storage_types: an element name must be a '
                     'non-empty string, got {!r}'.format(name))
  if name in TRANSITION_NAMES:
    raise ValueError(
        'extra_storage_types: the name {!r} is taken by a sampled '
        "transition's own element ({}); rename the extra element.".format(
            name, ', '.join(sorted(TRANSITION_NAMES))))
  return name, check_shape(name + ' shape', shape), native_byte_order(dtype)


def native_byte_order(dtype: Any) -> Any:
  """`dtype` in this machine's byte order: the same values, stored natively.

  TensorFlow takes raw bytes in native order. Native dtypes are returned
  as given.
  """
  checked = np.dtype(dtype)
  if checked.isnative:
    return dtype
  return checked.newbyteorder('=')


def _overflow_limit(dtype: np.dtype) -> float:
  """The smallest magnitude that a float or complex `dtype` stores as inf.

  Its largest finite value plus half a unit in the last place (rounding to
  nearest goes up from there); inf for float64 and wider.
  """
  largest = _largest_magnitude(dtype)
  if largest == math.inf:  # Wider than float64: no Python float overflows.
    return math.inf
  info = np.finfo(dtype)
  return largest + 2.0 ** (int(info.maxexp) - int(info.nmant) - 2)


def _largest_magnitude(dtype: np.dtype) -> float:
  """The largest finite magnitude an integer, float or complex dtype holds."""
  if dtype.kind in 'iu':
    info = np.iinfo(dtype)
    return float(max(-int(info.min), int(info.max)))
  with np.errstate(over='ignore'):
    return float(np.finfo(dtype).max)


def _cast_category(source: np.dtype, target: np.dtype) -> int:
  """How values of dtype `source` may be stored in an array of `target`."""
  if target.kind == 'O' or np.can_cast(source, target, casting='safe'):
    return _CAST_OK
  if source.kind in 'iu' and target.kind in 'iub':
    return _CAST_IF_IN_RANGE
  if (source.kind in 'iuf' and target.kind in 'fc' or
      source.kind == 'c' and target.kind == 'c'):
    # Rounding, as for Python numbers; overflow only into a smaller range.
    if _largest_magnitude(source) < _overflow_limit(target):
      return _CAST_OK
    return _CAST_IF_FINITE
  if source.kind in 'fc' and target.kind in 'iubf':
    return _CAST_IF_EXACT
  return _CAST_REFUSED


def _first_inexact(values: np.ndarray, target: np.dtype,
                   low: Optional[int], high: Optional[int]) -> Optional[Any]:
  """A value of float or complex `values` that `target` cannot hold exactly
  (an integer, bool or float dtype of range [low, high]), or None."""
  values = np.asarray(values)
  if values.dtype.kind == 'c':
    imaginary = values.imag != 0
    if imaginary.any():
      return values[imaginary].flat[0].item()
    values = values.real
  if target.kind == 'f':
    return None  # A real value, rounded as any float is.
  # high + 1 is a power of two, so exact as a float (high may not be).
  exact = np.isfinite(values)
  exact &= values >= float(low)
  exact &= values < float(high + 1)
  exact &= values == np.trunc(values)
  if exact.all():
    return None
  return values[~exact].flat[0].item()


def _first_overflow(values: Any, target: np.dtype, limit: float
                   ) -> Optional[Any]:
  """A finite value of `values` that float or complex `target` would store
  as inf (`limit` is `_overflow_limit(target)`), or None."""
  if values.ndim == 0 and values.dtype.kind != 'c' and limit < math.inf:
    if -limit < values < limit:  # A scalar: one comparison (NaN fails it).
      return None
  else:
    try:
      # The cast itself flags overflow: no reduction over the values.
      with np.errstate(over='raise'):
        values.astype(target)
      return None
    except FloatingPointError:
      pass
  values = np.asarray(values)
  with np.errstate(over='ignore'):
    overflow = np.isinf(values.astype(target)) & np.isfinite(values)
  if not overflow.any():
    return None
  return values[overflow].flat[0].item()


def _stores_as_inf(value: Any, target: np.dtype) -> bool:
  """Whether storing the number `value` in `target` fails or gives inf."""
  scratch = np.zeros((), dtype=target)
  try:
    with np.errstate(over='ignore'):
      scratch[()] = value
  except OverflowError:
    return True
  return bool(np.isinf(scratch))


def _overflow_error(name: str, value: Any, source: Any, target: np.dtype
                   ) -> ValueError:
  """The error for a finite value of `add`'s argument that becomes inf."""
  return ValueError(
      'add(): argument {!r} holds {} ({}), which overflows {} (largest '
      'finite value {}).'.format(name, errors.describe(value), source, target,
                                 np.finfo(target).max))


class AddSpec(object):
  """Precomputed checks for one argument of `add`.

  Attributes:
    name: str, the element's name.
    shape: tuple of int, the shape a value must have.
    dtype: np.dtype, the storage dtype.
    low, high: int, the range of an integer or bool dtype (else None).
    limit: float, the magnitude from which a float or complex dtype stores
      a value as inf (else None).
    int_limit: int, a power of two below which any Python int is stored
      finitely in a float or complex dtype (else None).
    casts: dict, source dtype -> cast category, filled as values come.
  """

  __slots__ = ('name', 'shape', 'dtype', 'low', 'high', 'limit', 'int_limit',
               'casts')

  def __init__(self, name: str, shape: Tuple[int, ...], dtype: Any):
    """Prepares the checks of element `name` of `shape` stored as `dtype`."""
    self.name = name
    self.shape = tuple(shape)
    self.dtype = np.dtype(dtype)
    if self.dtype.kind in 'iu':
      info = np.iinfo(self.dtype)
      self.low, self.high = int(info.min), int(info.max)
    elif self.dtype.kind == 'b':
      self.low, self.high = 0, 1
    else:
      self.low = self.high = None
    self.limit = self.int_limit = None
    if self.dtype.kind in 'fc':
      # Past int_limit, `_stores_as_inf` decides.
      self.limit = _overflow_limit(self.dtype)
      self.int_limit = 1 << (math.frexp(min(self.limit,
                                            sys.float_info.max))[1] - 1)
    self.casts = {}


def check_values(specs: Sequence[AddSpec], values: List[Any]) -> List[Any]:
  """Checks `add`'s arguments, one per spec, as `check_value`.

  Returns:
    `values`, converted ones replaced in place, ready to be written.

  Raises:
    ValueError: see `check_value`.
  """
  for position, spec in enumerate(specs):
    value = values[position]
    checked = check_value(spec, value)
    if checked is not value:
      values[position] = checked
  return values


def check_value(spec: AddSpec, value: Any) -> Any:
  """Checks one argument of `add` against its element.

  Args:
    spec: the element's checks.
    value: a NumPy array or scalar, a Python number, or an array-like.

  Returns:
    The value, ready to be written: as given, as an array (if it was
    array-like), or as its real part (a complex value without imaginary
    part, so that storing it does not warn).

  Raises:
    ValueError: If the value has the wrong shape, is not numeric, or holds a
      value that the element's dtype cannot hold exactly (the message names
      the argument, the value or shape given and the one expected).
  """
  value_type = type(value)
  if value_type is np.ndarray or isinstance(value, np.generic):
    if value.shape != spec.shape:
      raise ValueError(
          'add(): argument {!r} has shape {}, expected {}.'.format(
              spec.name, value.shape, spec.shape))
    dtype = value.dtype
    if dtype is not spec.dtype and dtype != spec.dtype:
      return _check_array_cast(spec, value)
    return value
  if value_type is int or value_type is float or value_type is bool:
    if spec.shape:
      raise ValueError(
          'add(): argument {!r} is the scalar {}, expected shape {}.'.format(
              spec.name, errors.describe(value), spec.shape))
    _check_scalar_cast(spec, value)
    return value
  try:
    array = np.asarray(value)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError('add(): argument {!r} = {} is not array-like: {}'
                     .format(spec.name, errors.describe(value), e)) from e
  if array.dtype.hasobject and spec.dtype.kind != 'O':
    raise ValueError(
        'add(): argument {!r} = {} is not numeric (expected {} of shape {}).'
        .format(spec.name, errors.describe(value), spec.dtype, spec.shape))
  return check_value(spec, array)


def _check_array_cast(spec: AddSpec, value: Any) -> Any:
  """`check_value` of an array or NumPy scalar of another dtype."""
  category = spec.casts.get(value.dtype)
  if category is None:
    category = spec.casts[value.dtype] = _cast_category(value.dtype,
                                                        spec.dtype)
  if category == _CAST_OK:
    return value
  if category == _CAST_IF_EXACT:
    bad = _first_inexact(value, spec.dtype, spec.low, spec.high)
    if bad is not None:
      raise ValueError(
          'add(): argument {!r} holds {} (dtype {}), which cannot be stored '
          'as {} without losing information.'.format(
              spec.name, errors.describe(bad), value.dtype, spec.dtype))
    if value.dtype.kind == 'c':
      value = value.real
    if spec.limit is None:
      return value
    category = _CAST_IF_FINITE  # A real part may still overflow a float.
  if category == _CAST_IF_FINITE:
    bad = _first_overflow(value, spec.dtype, spec.limit)
    if bad is None:
      return value
    raise _overflow_error(spec.name, bad, value.dtype, spec.dtype)
  if category == _CAST_IF_IN_RANGE:
    if value.size == 0:
      return value
    low, high = int(np.min(value)), int(np.max(value))
    if spec.low <= low and high <= spec.high:
      return value
    raise ValueError(
        'add(): argument {!r} holds {} (dtype {}), out of range for {} '
        '[{}, {}].'.format(spec.name, low if low < spec.low else high,
                           value.dtype, spec.dtype, spec.low, spec.high))
  raise ValueError(
      'add(): argument {!r} has dtype {}, which cannot be stored as {} '
      'without losing information{}.'.format(
          spec.name, value.dtype, spec.dtype,
          '' if value.shape else ' (value {})'.format(errors.describe(value))))


def _check_scalar_cast(spec: AddSpec, value: Any) -> None:
  """`check_value` of a Python int, float or bool."""

  kind = spec.dtype.kind
  if kind == 'O' or type(value) is bool:
    return
  if type(value) is int:
    if kind in 'fc':
      if (-spec.int_limit < value < spec.int_limit or
          not _stores_as_inf(value, spec.dtype)):
        return
      raise _overflow_error(spec.name, value, 'int', spec.dtype)
    if kind in 'iub':
      if spec.low <= value <= spec.high:
        return
      raise ValueError(
          'add(): argument {!r} = {} is out of range for {} [{}, {}].'.format(
              spec.name, value, spec.dtype, spec.low, spec.high))
  elif kind in 'fc':  # A Python float.
    if -spec.limit < value < spec.limit or not math.isfinite(value):
      return  # NaN and inf are stored as given.
    raise _overflow_error(spec.name, value, 'float', spec.dtype)
  elif (kind in 'iub' and math.isfinite(value) and value.is_integer() and
        spec.low <= value <= spec.high):
    return  # A float with an exact integer value, e.g. terminal=1.0.
  raise ValueError(
      'add(): argument {!r} = {} ({}) cannot be stored as {} without losing '
      'information.'.format(spec.name, errors.describe(value),
                            type(value).__name__, spec.dtype))


def specs_and_padding(signature: Sequence[Any]
                     ) -> Tuple[List[AddSpec], List[Any]]:
  """`add`'s per-argument checks and padding values (zeros), in order.

  Args:
    signature: the memory's `get_add_args_signature()` (ReplayElements).
  """
  specs = [AddSpec(e.name, e.shape, e.type) for e in signature]
  return specs, [np.zeros(spec.shape, dtype=spec.dtype) if spec.shape else
                 spec.dtype.type(0) for spec in specs]
