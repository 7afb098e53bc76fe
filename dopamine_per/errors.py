# coding=utf-8
"""Exception types shared by the replay memories, the agents and the domains.

Dopamine checks many arguments with ``assert``, so code written against it
catches `AssertionError`; a well-kept library raises `ValueError` for a bad
argument. `ArgumentError` is both, so either ``except`` clause works. It is
raised wherever Dopamine 4.1.2 asserts on an argument (docs/compat.md lists
the places).
"""

__all__ = ['ArgumentError']


class ArgumentError(ValueError, AssertionError):
  """A bad argument where Dopamine asserts: a ValueError and an AssertionError.

  The message names the argument and the value given.
  """
