# coding=utf-8
"""Loads the TensorFlow-free core library with ctypes (building it once).

`load()` returns the library with every function's argument types set, or
raises `build.NativeBuildError` saying why it cannot (no compiler, a failed
build). ctypes releases the GIL while a function runs: `per_lock` waits for
the memory's lock without holding it.
"""

import ctypes
import threading
from typing import Optional

from dopamine_per.native import build

__all__ = ['PerLayout', 'load']

_P = ctypes.c_void_p
_I = ctypes.c_int64
_D = ctypes.c_double

# name: (result type, argument types)
_SIGNATURES = {
    'per_memory_create': (_I, [ctypes.POINTER(_P)]),
    'per_memory_bind': (None, [_P, _P]),
    'per_memory_destroy': (None, [_I, _P]),
    'per_memory_release': (None, [_P]),
    'per_lock': (None, [_P]),
    'per_unlock': (None, [_P]),
    'per_memory_count': (_I, []),
}


class PerLayout(ctypes.Structure):
  """replay_core.h's PerLayout: a memory's arrays and configuration."""
  _fields_ = [
      ('capacity', _I), ('stack', _I), ('horizon', _I),
      ('max_sample_attempts', _I), ('add_count', _P), ('episode_end', _P),
      ('observation', _P), ('pixels', _I), ('observation_item', _I),
      ('action', _P), ('action_bytes', _I), ('reward', _P),
      ('terminal', _P), ('terminal_item', _I), ('extras', _I),
      ('extra_data', _P), ('extra_bytes', _P), ('discounts', _P),
      ('flat', _P), ('offsets', _P), ('levels', _I), ('fanout', _I),
      ('tree_scalars', _P), ('smallest', _D), ('largest', _D),
      ('seed', ctypes.c_uint64),
  ]


_lock = threading.Lock()
_library: Optional[ctypes.CDLL] = None
_error: Optional[build.NativeBuildError] = None


def load() -> ctypes.CDLL:
  """The core library, built on first use (see `build.core_library`).

  Raises:
    build.NativeBuildError: If it cannot be built.
  """
  global _library, _error
  with _lock:
    if _error is not None:  # Not rebuilt on every call.
      raise _error
    if _library is None:
      try:
        library = ctypes.CDLL(build.core_library())
      except build.NativeBuildError as e:
        _error = e
        raise
      except OSError as e:
        _error = build.NativeBuildError('the core library does not load: '
                                        '{}'.format(e))
        raise _error from e
      for name, (result, arguments) in _SIGNATURES.items():
        function = getattr(library, name)
        function.restype = result
        function.argtypes = arguments
      _library = library
    return _library
