# coding=utf-8
"""The one place where the replay memory's kernels are chosen: `choose`.

A kernels object carries every per-batch loop of the sum tree and the
memories (the interface: `numpy_kernels.NumpyKernels`). There are two, with
bit-identical results: `native()` (the loops in C++, compiled on first use;
the default) and `NUMPY` (the reference, and the fallback). `SumTree` and
the memories take one as their `kernels` argument; without one they use
the DOPAMINE_PER_KERNELS environment variable, else 'auto'. The first time
'auto' cannot have the native kernels it logs one warning saying why.
"""

import os
import threading
from typing import List, Optional, Union

from absl import logging

from dopamine_per.native import build
from dopamine_per.replay_memory.kernels import native_kernels
from dopamine_per.replay_memory.kernels import numpy_kernels

__all__ = ['ENV', 'FALLBACK_WARNING', 'Kernels', 'KernelsLike', 'NUMPY',
           'available', 'choose', 'native']

# The environment variable that chooses the kernels when no argument does.
ENV = 'DOPAMINE_PER_KERNELS'

# The interface every kernels object has.
Kernels = numpy_kernels.NumpyKernels

NUMPY = numpy_kernels.NumpyKernels()

# The native kernels, created by the first `native()`.
_native: Optional[Kernels] = None
_lock = threading.Lock()

# The warning that 'auto' logs the first time it cannot have the native
# kernels; its one %s is why.
FALLBACK_WARNING = (
    'dopamine_per: the native kernels cannot be built here (%s), so the '
    'replay memory runs its NumPy loops, several times slower on batches of '
    '32-256 (see benchmarks/RESULTS.md); the reason says what to do. See '
    'the README, "Native ops".')
_fallback_logged = False

# What `choose` takes: kernels, a name, or None for the environment's choice.
KernelsLike = Union[None, str, Kernels]


def available() -> List[str]:
  """Names of the kernels that can be used here (may compile 'native')."""
  names = ['numpy']
  try:
    native()
  except ValueError:
    return names
  return names + ['native']


def native() -> Kernels:
  """The C++ kernels (`native_kernels.NativeKernels`), created once.

  Raises:
    ValueError: If the library cannot be built or loaded here (no C++
      compiler, a failed build); the message says why.
  """
  return _native_kernels('')


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


def choose(kernels: KernelsLike = None) -> Kernels:
  """Returns the kernels `kernels` names.

  Args:
    kernels: kernels (returned as they are), 'numpy', 'native' (built on
      first use), 'auto' (the native kernels; where they cannot be built,
      NumPy's, with one warning), or None: the DOPAMINE_PER_KERNELS
      environment variable, else 'auto'.

  Returns:
    `NUMPY` or `native()`.

  Raises:
    ValueError: If the name is unknown (or 'numba', whose kernels were
      removed), or is 'native' where its library cannot be built (the
      message says why).
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
  if kernels == 'native':
    return _native_kernels(source)
  if kernels == 'numba':
    # Configs written for earlier versions may still ask for them.
    raise ValueError("Kernels {!r}{}: the Numba kernels were removed; use "
                     "'native' (or 'numpy', or 'auto').".format(
                         kernels, source))
  raise ValueError("Unknown kernels {!r}{}: use 'numpy', 'native' or "
                   "'auto'.".format(kernels, source))


def _auto() -> Kernels:
  """The native kernels, else NumPy's; warns the first time."""
  global _fallback_logged
  try:
    return native()
  except ValueError as e:
    reason = str(e.__cause__ or e)
  if not _fallback_logged:
    _fallback_logged = True
    logging.warning(FALLBACK_WARNING, reason)
  return NUMPY
