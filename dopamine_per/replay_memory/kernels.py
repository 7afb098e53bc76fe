# coding=utf-8
"""The one place where the replay memory's kernels are chosen: `choose`.

A kernels object carries every per-batch loop of the sum tree and the
memories (the interface: `numpy_kernels.NumpyKernels`). There are two, with
bit-identical results: `NUMBA` (compiled with Numba, a requirement of the
package, so the default) and `NUMPY` (the reference, and the fallback where
Numba cannot be imported, e.g. a platform without its wheels; it misses
most of the speed goals of benchmarks/RESULTS.md). `SumTree` and the
memories take one as their `kernels` argument (gin-configurable on the
memories: ``OutOfGraphPrioritizedReplayBuffer.kernels = 'numpy'``); without
one they use the DOPAMINE_PER_KERNELS environment variable, else 'auto'.
The first time 'auto' falls back to NumPy it logs one warning saying so and
how to get Numba's.
"""

import os
from typing import List, Union

from absl import logging

from dopamine_per.replay_memory import numpy_kernels

try:
  from dopamine_per.replay_memory import numba_kernels  # pylint: disable=g-import-not-at-top
  _NUMBA_MISSING = ''
except ImportError as e:  # NumPy's loops only.
  numba_kernels = None
  _NUMBA_MISSING = str(e)

__all__ = ['ENV', 'FALLBACK_WARNING', 'Kernels', 'KernelsLike', 'NUMBA',
           'NUMPY', 'available', 'choose']

# The environment variable that chooses the kernels when no argument does:
# 'numpy', 'numba' or 'auto' (the default: Numba's, or NumPy's where Numba
# cannot be imported).
ENV = 'DOPAMINE_PER_KERNELS'

# The interface every kernels object has.
Kernels = numpy_kernels.NumpyKernels

NUMPY = numpy_kernels.NumpyKernels()
NUMBA = None if numba_kernels is None else numba_kernels.NumbaKernels()

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
  """Names of the kernels that can be used here."""
  return ['numpy'] + (['numba'] if NUMBA is not None else [])


def choose(kernels: KernelsLike = None) -> Kernels:
  """Returns the kernels `kernels` names.

  Args:
    kernels: kernels (returned as they are), 'numpy', 'numba', 'auto'
      (Numba's when Numba is installed, else NumPy's), or None: the
      DOPAMINE_PER_KERNELS environment variable, else 'auto'.

  Returns:
    `NUMPY` or `NUMBA`.

  Raises:
    ValueError: If the name is unknown, or is 'numba' without Numba
      installed.
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
  raise ValueError("Unknown kernels {!r}{}: use 'numpy', 'numba' or "
                   "'auto'.".format(kernels, source))


def _numpy_fallback() -> Kernels:
  """Returns `NUMPY` for 'auto' without Numba, warning the first time."""
  global _fallback_logged
  if not _fallback_logged:
    _fallback_logged = True
    logging.warning(FALLBACK_WARNING, _NUMBA_MISSING or 'not installed')
  return NUMPY
