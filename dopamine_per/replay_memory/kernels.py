# coding=utf-8
"""The one place where the replay memory's kernels are chosen: `choose`.

A kernels object carries every per-batch loop of the sum tree and the
memories (the interface: `numpy_kernels.NumpyKernels`). There are three,
with bit-identical results: `native()` (the loops in C++,
`native_kernels.NativeKernels`, compiled with the system's C++ compiler the
first time they are asked for and cached; the default, the fastest on every
row of benchmarks/RESULTS.md), `numba()` (compiled with Numba, where it is
installed: the 'fast' extra) and `NUMPY` (the reference, and the last
fallback; it misses most of the speed goals of benchmarks/RESULTS.md).
`SumTree` and the memories take one as their `kernels` argument
(gin-configurable on the memories:
``OutOfGraphPrioritizedReplayBuffer.kernels = 'numpy'``); without one they
use the DOPAMINE_PER_KERNELS environment variable, else 'auto'. The first
time 'auto' cannot have the native kernels it logs one warning saying why
and which it runs instead.
"""

import os
import threading
from typing import List, Optional, Union

from absl import logging

from dopamine_per.native import build
from dopamine_per.replay_memory import native_kernels
from dopamine_per.replay_memory import numpy_kernels

__all__ = ['ENV', 'FALLBACK_WARNING', 'Kernels', 'KernelsLike', 'NUMPY',
           'available', 'choose', 'native', 'numba']

# The environment variable that chooses the kernels when no argument does:
# 'numpy', 'numba', 'native' or 'auto' (the default: the native kernels,
# else Numba's, else NumPy's).
ENV = 'DOPAMINE_PER_KERNELS'

# The interface every kernels object has.
Kernels = numpy_kernels.NumpyKernels

NUMPY = numpy_kernels.NumpyKernels()

# The compiled kernels, each created by its first request (`native()`,
# `numba()`), or why it cannot be (Numba's import error).
_native: Optional[Kernels] = None
_numba: Optional[Kernels] = None
_numba_missing: Optional[str] = None
_lock = threading.Lock()

# The warning that 'auto' logs the first time it cannot have the native
# kernels: why, and what it runs instead.
FALLBACK_WARNING = (
    'dopamine_per: the native kernels cannot be built here (%s), so the '
    'replay memory runs %s. Install a C++ compiler (e.g. `apt-get install '
    'g++`, or set $CXX) for the native ones; see the README, "Native ops".')
_WITH_NUMBA = "Numba's loops instead"
_WITH_NUMPY = (
    'its NumPy loops, several times slower on batches of 32-256 (see '
    "benchmarks/RESULTS.md; `pip install numba`, or 'dopamine_per[fast]', "
    "gives Numba's compiled ones meanwhile)")
_fallback_logged = False

# What `choose` takes: kernels, a name, or None for the environment's choice.
KernelsLike = Union[None, str, Kernels]


def available() -> List[str]:
  """Names of the kernels that can be used here.

  'numba' is listed where Numba imports, 'native' where its library builds
  (or was built) and loads; the first call may compile it (see `native`).
  """
  names = ['numpy']
  for name, kernels in (('numba', numba), ('native', native)):
    try:
      kernels()
    except ValueError:
      continue
    names.append(name)
  return names


def native() -> Kernels:
  """The C++ kernels (`native_kernels.NativeKernels`), created once.

  The first call builds their library, unless it was built before (it is
  cached across processes; see `dopamine_per.native.build`).

  Raises:
    ValueError: If the library cannot be built or loaded here (no C++
      compiler, a failed build); the message says why.
  """
  return _native_kernels('')


def numba() -> Kernels:
  """The Numba kernels (`numba_kernels.NumbaKernels`), created once.

  Raises:
    ValueError: If Numba cannot be imported here (the message says why).
  """
  return _numba_kernels('')


def _native_kernels(source: str) -> Kernels:
  """`native()`, its error naming the `source` of the choice."""
  global _native
  with _lock:
    if _native is None:
      try:
        _native = native_kernels.NativeKernels()
      except build.NativeBuildError as e:
        raise ValueError("Kernels 'native'{} cannot be built here: {}".format(
            source, e)) from e
    return _native


def _numba_kernels(source: str) -> Kernels:
  """`numba()`, its error naming the `source` of the choice."""
  global _numba, _numba_missing
  with _lock:
    if _numba is None and _numba_missing is None:
      try:
        from dopamine_per.replay_memory import numba_kernels  # pylint: disable=g-import-not-at-top
      except ImportError as e:
        _numba_missing = str(e) or 'not installed'
      else:
        _numba = numba_kernels.NumbaKernels()
    if _numba is None:
      raise ValueError("Kernels 'numba'{} need Numba, which cannot be imported "
                       "({}): pip install numba (or 'dopamine_per[fast]')."
                       .format(source, _numba_missing))
    return _numba


def choose(kernels: KernelsLike = None) -> Kernels:
  """Returns the kernels `kernels` names.

  Args:
    kernels: kernels (returned as they are), 'numpy', 'numba', 'native'
      (built on first use), 'auto' (the native kernels; where they cannot be
      built, Numba's where Numba is installed, else NumPy's, with one
      warning), or None: the DOPAMINE_PER_KERNELS environment variable,
      else 'auto'.

  Returns:
    `NUMPY`, `numba()` or `native()`.

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
    return _auto()
  if kernels == 'numpy':
    return NUMPY
  if kernels == 'numba':
    return _numba_kernels(source)
  if kernels == 'native':
    return _native_kernels(source)
  raise ValueError("Unknown kernels {!r}{}: use 'numpy', 'numba', 'native' "
                   "or 'auto'.".format(kernels, source))


def _auto() -> Kernels:
  """The native kernels, else Numba's, else NumPy's; warns the first time."""
  global _fallback_logged
  try:
    return native()
  except ValueError as e:
    reason = str(e.__cause__ or e)
  try:
    chosen, instead = numba(), _WITH_NUMBA
  except ValueError:
    chosen, instead = NUMPY, _WITH_NUMPY
  if not _fallback_logged:
    _fallback_logged = True
    logging.warning(FALLBACK_WARNING, reason, instead)
  return chosen
