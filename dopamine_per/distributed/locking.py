# coding=utf-8
"""Thread safety of the sharded replay memory: `synchronized`.

TensorFlow may run the sampling and priority ops of one memory on several
threads at once (always so with staging), and the agent adds transitions
meanwhile. Each memory method that reads or writes shared state runs
holding the memory's reentrant locks: `_lock` for the storage and, in the
prioritized memory, `_priority_lock` for its sum tree, always taken after
`_lock`, so that priority updates need not wait for frames being gathered.
Dopamine's memories are not locked: docs/compat.md#locking.
"""

import functools
from typing import Any, Callable

__all__ = ['synchronized']


def synchronized(*lock_names: str) -> Callable[[Callable[..., Any]],
                                               Callable[..., Any]]:
  """Runs a memory method holding one or two of the memory's locks.

  The locks are taken in the order given, and released in reverse.

  Args:
    *lock_names: the names of one or two `threading.RLock` attributes of the
      memory.

  Returns:
    A method decorator.

  Raises:
    ValueError: If not given one or two names.
  """
  if len(lock_names) not in (1, 2):
    raise ValueError('synchronized takes one or two lock names, got {!r}'
                     .format(lock_names))
  first, second = lock_names[0], lock_names[-1]

  def decorator(method):
    if len(lock_names) == 1:
      @functools.wraps(method)
      def locked(self, *args, **kwargs):
        with getattr(self, first):
          return method(self, *args, **kwargs)
    else:
      @functools.wraps(method)
      def locked(self, *args, **kwargs):
        with getattr(self, first), getattr(self, second):
          return method(self, *args, **kwargs)
    return locked
  return decorator
