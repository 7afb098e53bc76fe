"""Test helper: functions that fail on purpose, to patch in with mock."""

from typing import Any, Callable, Optional

__all__ = ['INJECTED', 'failing']

# The message of the errors `failing` raises, for assertRaisesRegex.
INJECTED = 'injected failure'


def failing(real: Callable[..., Any],
            target: Optional[Any] = None) -> Callable[..., Any]:
  """Returns `real`, raising OSError(INJECTED) instead when given `target`.

  Args:
    real: the function to wrap (unbound for a method: the wrapper replaces
      it on the class, so `self` comes as the first argument).
    target: a positional argument value that makes the call fail (a file
      name, say); None makes every call fail.
  """
  def call(*args, **kwargs):
    if target is None or target in args:
      raise OSError(INJECTED)
    return real(*args, **kwargs)
  return call
