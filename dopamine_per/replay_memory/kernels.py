# coding=utf-8
"""The one place where the replay memory's kernels are chosen: `choose`.

A kernels object carries every per-batch loop of the sum tree and the
memories (the interface: `numpy_kernels.NumpyKernels`). There are three,
with bit-identical results: `NUMBA` (compiled with Numba, a requirement of
the package, so the default), `NUMPY` (the reference, and the fallback where
Numba cannot be imported, e.g. a platform without its wheels; it misses
most of the speed goals of benchmarks/RESULTS.md) and `native()` (the loops
in C++, `native_kernels.NativeKernels`, compiled with the system's C++
compiler the first time they are asked for). `SumTree` and the memories
take one as their `kernels` argument (gin-configurable on the memories:
``OutOfGraphPrioritizedReplayBuffer.kernels = 'numpy'``); without one they
use the DOPAMINE_PER_KERNELS environment variable, else 'auto'. The first
time 'auto' falls back to NumPy it logs one warning saying so and how to
get Numba's.
"""

import os
import threading
from typing import List, Optional, Union

from absl import logging

from dopamine_per.native import build
from dopamine_per.replay_memory import native_kernels
from dopamine_per.replay_memory import numpy_kernels

try:
  from dopamine_per.replay_memory import numba_kernels  # pylint: disable=g-import-not-at-top
  _NUMBA_MISSING = ''
except ImportError as e:  # NumPy's loops only.
  numba_kernels = None
  _NUMBA_MISSING = str(e)

__all__ = ['ENV', 'FALLBACK_WARNING', 'Kernels', 'KernelsLike', 'NUMBA',
           'NUMPY', 'available', 'choose', 'native']

# The environment variable that chooses the kernels when no argument does:
# 'numpy', 'numba', 'native' or 'auto' (the default: Numba's, or NumPy's
# where Numba cannot be imported).
ENV = 'DOPAMINE_PER_KERNELS'

# The interface every kernels object has.
Kernels = numpy_kernels.NumpyKernels

NUMPY = numpy_kernels.NumpyKernels()
NUMBA = None if numba_kernels is None else numba_kernels.NumbaKernels()

# The C++ kernels, created by the first `native()`; its lock.
_native: Optional[Kernels] = None
_native_lock = threading.Lock()

# The warning that 'auto' logs the first time it falls back to NumPy.
FALLBACK_WARNING = (
    'dopamine_per: Numba cannot be imported (%s), so the replay memory runs '
    'its NumPy loops, several times slower on batches of 32-256 (see '
    "benchmarks/RESULTS.md); `pip install numba` (or 'dopamine_per[fast]') "
    'gives the compiled ones.')
_fallback_logged = False

# What `choose` takes: kernels, a name, or None for the environment's choice.
KernelsLike = Union[None, str, Kernels]


def available() -> List[str]:
  """Names of the kernels that can be used here.

  'native' is listed where its library builds (or was built) and loads;
  the first call may compile it (see `native`).
  """
  names = ['numpy'] + (['numba'] if NUMBA is not None else [])
  try:
    native()
  except ValueError:
    return names
  return names + ['native']


def native() -> Kernels:
  """The C++ kernels (`native_kernels.NativeKernels`), created once.

  The first call builds their library, unless it was built before (it is
  cached across processes; see `dopamine_per.native.build`).

  Raises:
    ValueError: If the library cannot be built or loaded here (no C++
      compiler, a failed build); the message says why.
  """
  return _native_kernels('')


def _native_kernels(source: str) -> Kernels:
  """`native()`, its error naming the `source` of the choice."""
  global _native
  with _native_lock:
    if _native is None:
      try:
        _native = native_kernels.NativeKernels()
      except build.NativeBuildError as e:
        raise ValueError("Kernels 'native'{} cannot be built here: {}".format(
            source, e)) from e
    return _native


def choose(kernels: KernelsLike = None) -> Kernels:
  """Returns the kernels `kernels` names.

  Args:
    kernels: kernels (returned as they are), 'numpy', 'numba', 'native'
      (built on first use), 'auto' (Numba's when Numba is installed, else
      NumPy's), or None: the DOPAMINE_PER_KERNELS environment variable,
      else 'auto'.

  Returns:
    `NUMPY`, `NUMBA` or `native()`.

  Raises:
    ValueError: If the name is unknown, is 'numba' without Numba installed,
      or 'native' where its library cannot be built (the message says why).
  """
  if isinstance(kernels, Kernels):
    return kernels
  source = ''
  if kernels is None:
    kernels = os.environ.get(ENV, 'auto')
    source = ' (from ${})'.format(ENV)
  if kernels == 'auto':
    return NUMBA if NUMBA is not None else _numpy_fallback()
  if kernels == 'numpy':
    return NUMPY
  if kernels == 'numba':
    if NUMBA is None:
      raise ValueError("Kernels 'numba'{} need Numba, which cannot be imported "
                       "({}): pip install numba (or 'dopamine_per[fast]')."
                       .format(source, _NUMBA_MISSING or 'not installed'))
    return NUMBA
  if kernels == 'native':
    return _native_kernels(source)
  raise ValueError("Unknown kernels {!r}{}: use 'numpy', 'numba', 'native' "
                   "or 'auto'.".format(kernels, source))


def _numpy_fallback() -> Kernels:
  """Returns `NUMPY` for 'auto' without Numba, warning the first time."""
  global _fallback_logged
  if not _fallback_logged:
    _fallback_logged = True
    logging.warning(FALLBACK_WARNING, _NUMBA_MISSING or 'not installed')
  return NUMPY
