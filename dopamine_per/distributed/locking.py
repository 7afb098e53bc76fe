# coding=utf-8
"""Thread safety of the sharded replay memory: `synchronized`.

TensorFlow may run the sampling and priority ops of one memory on several
threads at once (always so with staging), and the agent adds transitions
meanwhile. Each method of the sharded memory that reads or writes shared
state runs holding one of its reentrant locks: `_lock`, or
`_priority_lock` for the priority updates (taken after `_lock` when both
are held). Dopamine's memories are not locked: docs/compat.md#locking.
"""

import functools
from typing import Any, Callable

__all__ = ['synchronized']


def synchronized(lock_name: str) -> Callable[[Callable[..., Any]],
                                             Callable[..., Any]]:
  """Runs a memory method holding the memory's lock `lock_name`.

  Args:
    lock_name: the name of a `threading.RLock` attribute of the memory.

  Returns:
    A method decorator.
  """
  def decorator(method):
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
      with getattr(self, lock_name):
        return method(self, *args, **kwargs)
    return locked
  return decorator
