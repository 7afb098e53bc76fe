# coding=utf-8
"""The one switch between the NumPy loops and the compiled (Numba) ones.

The replay memory's hot loops each exist twice, with bit-identical results:
vectorized NumPy, always available, and compiled with Numba (`numba_loops`,
from the `fast` extra: ``pip install 'dopamine_per[fast]'``). They are the sum
tree's (`sum_tree_kernels`), the sampling checks and n-step returns
(`transition_kernels`) and the gathering of stacked states (`frame_stacks`).

`choose` picks one set for all of them, from an argument or the
DOPAMINE_PER_KERNELS environment variable, and returns a `Kernels` that each
of those modules takes (they still accept the names 'numpy', 'numba' and
'auto').
"""

import dataclasses
import os
from typing import List, Union

try:
  from dopamine_per.replay_memory import numba_loops  # pylint: disable=g-import-not-at-top
except ImportError:  # Numba is not installed: NumPy's loops only.
  numba_loops = None

__all__ = ['ENV', 'LEGACY_ENV', 'Kernels', 'KernelsLike', 'NUMBA', 'NUMPY',
           'available', 'choose']

# The environment variable that chooses the kernels when no argument does:
# 'numpy', 'numba' or 'auto' (the default: Numba's when it is installed).
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
    return NUMPY if numba_loops is None else NUMBA
  if kernels == 'numpy':
    return NUMPY
  if kernels == 'numba':
    if numba_loops is None:
      raise ValueError("Kernels 'numba'{} need Numba: "
                       "pip install 'dopamine_per[fast]'.".format(source))
    return NUMBA
  raise ValueError("Unknown kernels {!r}{}: use 'numpy', 'numba' or "
                   "'auto'.".format(kernels, source))
