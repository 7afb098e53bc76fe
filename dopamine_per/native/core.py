# coding=utf-8
"""Loads the TensorFlow-free core library with ctypes (building it once).

ctypes releases the GIL while a function runs: `per_memory_destroy` waits
for the memory's locks without holding it.
"""

import ctypes

from dopamine_per.native import build

__all__ = ['LAYOUT_VERSION', 'PerLayout', 'load']

_P = ctypes.c_void_p
_I = ctypes.c_int64
_D = ctypes.c_double

# replay_core.h's kLayoutVersion: the layout's version, checked at bind.
LAYOUT_VERSION = 3

# name: (result type, argument types)
_SIGNATURES = {
    'per_memory_create': (_I, [ctypes.POINTER(_P), ctypes.c_uint64]),
    'per_memory_bind': (ctypes.c_int, [_P, _P]),
    'per_memory_destroy': (None, [_I, _P, ctypes.c_int, ctypes.c_int]),
    'per_memory_release': (None, [_P]),
    'per_memory_count': (_I, []),
    'per_memory_sampler_state': (_I, [_P, ctypes.c_char_p, _I]),
    'per_memory_set_sampler_state': (ctypes.c_int,
                                     [_P, ctypes.c_char_p, ctypes.c_int]),
    # Batch queues (batch_queue.py).
    'per_queue_create': (_I, [ctypes.POINTER(_P), ctypes.c_uint64, _I]),
    'per_queue_destroy': (None, [_I, _P]),
    'per_queue_release': (None, [_P]),
    'per_queue_count': (_I, []),
    'per_queue_push': (ctypes.c_int, [_P, _P, _I, _D]),
    'per_queue_clear': (_I, [_P]),
    'per_queue_close': (None, [_P]),
    'per_queue_size': (_I, [_P]),
    'per_queue_generation': (_I, [_P]),
    'per_queue_wait_wanted': (ctypes.c_int, [_P, _D]),
    'per_queue_pending_priorities': (_I, [_P]),
    'per_queue_take_priorities': (_I, [_P, _P, _P, _I]),
    'per_batch_create': (_P, [_I, ctypes.c_int, ctypes.c_char_p]),
    'per_batch_release': (None, [_P]),
    'per_batch_set_element': (ctypes.c_int, [_P, _I, _P, _I]),
    'per_blocks_create': (_P, [_P, _I, _P, _P, _I, _I, _P, _I, _I, _I]),
    'per_blocks_release': (None, [_P]),
    'per_batch_add_part': (ctypes.c_int, [_P, _P, _P, _P, _P, _I, _I]),
}


class PerLayout(ctypes.Structure):
  """replay_core.h's PerLayout: a memory's arrays and configuration.

  `size` and `version` come first; the library refuses a layout whose size
  is not its own or whose version is not LAYOUT_VERSION.
  """
  _fields_ = [
      ('size', _I), ('version', _I), ('capacity', _I), ('stack', _I),
      ('horizon', _I), ('max_sample_attempts', _I), ('add_count', _P),
      ('episode_end', _P),
      ('observation', _P), ('pixels', _I), ('observation_item', _I),
      ('action', _P), ('action_bytes', _I), ('reward', _P),
      ('terminal', _P), ('terminal_item', _I), ('extras', _I),
      ('extra_data', _P), ('extra_bytes', _P), ('discounts', _P),
      ('flat', _P), ('offsets', _P), ('levels', _I), ('fanout', _I),
      ('tree_scalars', _P), ('smallest', _D), ('largest', _D),
      ('seed', ctypes.c_uint64), ('block_frames', _I),
      ('block_addresses', _P), ('block_sizes', _P), ('open_block', _P),
      ('open_frames', _P),
  ]


def _load() -> ctypes.CDLL:
  library = ctypes.CDLL(build.core_library())
  for name, (result, arguments) in _SIGNATURES.items():
    function = getattr(library, name)
    function.restype = result
    function.argtypes = arguments
  return library


# The core library, every function's argument types set, built on first use
# (see `build.core_library`); raises build.NativeBuildError if it cannot be
# built or loaded.
load = build.Once(_load, 'the core library does not load', (OSError,))
