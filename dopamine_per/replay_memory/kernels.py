# coding=utf-8
"""The one switch between the NumPy loops and the compiled (Numba) ones.

The replay memory's hot loops each exist twice, with bit-identical results:
compiled with Numba (`numba_loops`; Numba is a requirement of the package,
so these are the default) and vectorized NumPy, the fallback where Numba
cannot be imported (e.g. a platform without its wheels), which misses most
of the speed goals of benchmarks/RESULTS.md (all of those against cpprb at
batch 32). They are the sum tree's (`sum_tree_kernels`), the sampling checks
and n-step returns (`transition_kernels`) and the gathering of stacked
states (`frame_stacks`).

`choose` picks one set for all of them, from an argument or the
DOPAMINE_PER_KERNELS environment variable, and returns a `Kernels` that each
of those modules takes (they still accept the names 'numpy', 'numba' and
'auto'). The first time 'auto' falls back to NumPy it logs one warning
saying so and how to get Numba's.
"""

import dataclasses
import os
from typing import List, Union

from absl import logging

try:
  from dopamine_per.replay_memory import numba_loops  # pylint: disable=g-import-not-at-top
  _NUMBA_MISSING = ''
except ImportError as e:  # NumPy's loops only.
  numba_loops = None
  _NUMBA_MISSING = str(e)

__all__ = ['ENV', 'FALLBACK_WARNING', 'LEGACY_ENV', 'Kernels', 'KernelsLike',
           'NUMBA', 'NUMPY', 'available', 'choose']

# The environment variable that chooses the kernels when no argument does:
# 'numpy', 'numba' or 'auto' (the default: Numba's, or NumPy's where Numba
# cannot be imported).
ENV = 'DOPAMINE_PER_KERNELS'
# Its name before it chose the memory's loops too; still read, but ENV wins
# when both are set.
LEGACY_ENV = 'DOPAMINE_PER_SUM_TREE_KERNELS'


@dataclasses.dataclass(frozen=True)
class Kernels(object):
  """A choice of loops.

  Attributes:
    name: str, 'numpy' or 'numba'.
    compiled: bool, whether the loops are Numba's (`numba_loops`).
  """
  name: str
  compiled: bool


NUMPY = Kernels('numpy', compiled=False)
NUMBA = Kernels('numba', compiled=True)

# The warning that 'auto' logs the first time it falls back to NumPy.
FALLBACK_WARNING = (
    'dopamine_per: Numba cannot be imported (%s), so the replay memory runs '
    'its NumPy loops, several times slower on batches of 32-256 (see '
    "benchmarks/RESULTS.md); `pip install numba` (or 'dopamine_per[fast]') "
    'gives the compiled ones.')
_fallback_logged = False

# What the modules that run kernels take: a choice, a name, or None for the
# environment's choice.
KernelsLike = Union[None, str, Kernels]


def available() -> List[str]:
  """Names of the kernels that can be used here."""
  return ['numpy'] + (['numba'] if numba_loops is not None else [])


def choose(kernels: KernelsLike = None) -> Kernels:
  """Returns the kernels `kernels` names.

  Args:
    kernels: a `Kernels` (returned as is), 'numpy', 'numba', 'auto' (Numba's
      when Numba is installed, else NumPy's), or None: the DOPAMINE_PER_KERNELS
      environment variable, else DOPAMINE_PER_SUM_TREE_KERNELS, else 'auto'.

  Returns:
    `NUMPY` or `NUMBA`.

  Raises:
    ValueError: If the name is unknown, or is 'numba' without Numba installed.
  """
  if kernels is NUMPY or (kernels is NUMBA and numba_loops is not None):
    return kernels  # The common case: a memory passing its choice on.
  source = ''
  if isinstance(kernels, Kernels):
    kernels = kernels.name
  elif kernels is None:
    variable = ENV if ENV in os.environ else LEGACY_ENV
    kernels = os.environ.get(variable, 'auto')
    source = ' (from ${})'.format(variable)
  if kernels == 'auto':
    return NUMBA if numba_loops is not None else _numpy_fallback()
  if kernels == 'numpy':
    return NUMPY
  if kernels == 'numba':
    if numba_loops is None:
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
