# coding=utf-8
"""Exception types and error-message helpers shared across dopamine_per.

Dopamine checks many arguments with ``assert``, so code written against it
catches `AssertionError`; a well-kept library raises `ValueError` for a bad
argument. `ArgumentError` is both, so either ``except`` clause works. It is
raised wherever Dopamine 4.1.2 asserts on an argument (the places:
docs/compat.md#errors).
"""

import math
import sys
from typing import Any

import numpy as np

__all__ = ['ArgumentError', 'InvalidIndexError', 'InvalidIndexTypeError',
           'describe', 'print_error']


class ArgumentError(ValueError, AssertionError):
  """A bad argument where Dopamine asserts: a ValueError and an AssertionError.

  The message names the argument and the value given.
  """


class InvalidIndexError(IndexError, ValueError):
  """An index outside [0, capacity). Catchable as IndexError or ValueError."""


class InvalidIndexTypeError(TypeError, ArgumentError):
  """A non-integer index: a TypeError, a ValueError and an AssertionError.

  Dopamine's prioritized memory asserts that indices are integers.
  """


def describe(value: Any, limit: int = 60) -> str:
  """A short description of `value` for an error message; never raises.

  Containers are described by type and size (a loaded one's repr may be
  huge or recurse without bound), other values by a repr cut to `limit`
  characters.

  Args:
    value: any object.
    limit: int, the most characters returned.

  Returns:
    str, e.g. "'1e3'", "a list of 3 items", "an int of about 10**400".
  """
  kind = type(value)
  if kind in (list, tuple, dict, set, frozenset) and not (
      kind in (list, tuple) and len(value) <= 8 and
      all(type(item) in (bool, float, type(None)) or
          type(item) is int and item.bit_length() <= 256 for item in value)):
    return 'a {} of {} items'.format(kind.__name__, len(value))
  if kind is np.ndarray:
    return 'an array of shape {} and dtype {}'.format(value.shape, value.dtype)
  if isinstance(value, int) and value.bit_length() > 256:
    # repr is quadratic in the digits and refused past 4300 of them.
    return 'an int of about {}10**{}'.format(
        '-' if value < 0 else '', int(value.bit_length() * math.log10(2)))
  try:
    text = repr(value)
  except Exception:  # pylint: disable=broad-except
    text = 'a {}'.format(kind.__name__)
  return text if len(text) <= limit else text[:limit - 3] + '...'


def print_error(program: str, message: Any) -> int:
  """Prints a command-line tool's one-line ``program: error: message``.

  Args:
    program: str, the tool's name (``train``, ``plot``).
    message: what went wrong (an exception prints its message).

  Returns:
    int, 1: the tool's exit status.
  """
  print('{}: error: {}'.format(program, message), file=sys.stderr)
  return 1
