# coding=utf-8
"""The sum tree's kernels in C++: `NativeKernels`.

`NativeKernels` runs the sum tree's loops of `numpy_kernels.NumpyKernels`
each as one call into a CPython extension module
(dopamine_per/native/replay_python.cc), with the same results; its memory
loops are NumPy's (a memory with these kernels samples through its native
memory where it can: `native_memory`). The extension checks every buffer
(dtype, length, layout, alignment, a tree's offsets) and returns
NotImplemented for what it does not cover: the method here then converts
the indices or runs NumPy's loop. Creating a `NativeKernels` loads the
extension, compiling it on first use; it raises `build.NativeBuildError`
where it cannot.
"""

from typing import Any, Callable, Optional, Tuple

import numpy as np

from dopamine_per.native import extension
from dopamine_per.replay_memory.kernels import numpy_kernels

__all__ = ['NativeKernels']

_INT64 = np.dtype(np.int64)
_FLOAT64 = np.dtype(np.float64)


def _converted(indices: np.ndarray) -> Optional[np.ndarray]:
  """Integer `indices` as a new C-contiguous int64 array, or None.

  None where that is `indices` itself (the extension took or refused them
  as they are), for non-integers, and for uint64, which NumPy's loops
  promote to float64 with int64 (they fail or refuse such indices).
  """
  dtype = getattr(indices, 'dtype', None)
  if dtype is None or not (dtype.kind == 'i' or
                           (dtype.kind == 'u' and dtype.itemsize < 8)):
    return None
  converted = np.asarray(indices, dtype=np.int64, order='C')
  return None if converted is indices else converted


def _retried(function: Callable[..., Any], arguments: Tuple[Any, ...],
             position: int) -> Any:
  """`function(*arguments)` with the indices at `position` `_converted`.

  The second try of an extension call that returned NotImplemented (only
  then: the first try stays a plain call); NotImplemented again where the
  indices cannot be converted.
  """
  indices = _converted(arguments[position])
  if indices is None:
    return NotImplemented
  return function(*arguments[:position], indices, *arguments[position + 1:])


class NativeKernels(numpy_kernels.NumpyKernels):
  """`NumpyKernels`' sum tree loops in C++ (see the module docstring).

  Raises:
    dopamine_per.native.build.NativeBuildError: on creation, if the
      extension cannot be built or imported here.
  """

  name = 'native'
  compiled = True

  def __init__(self):
    module = extension.load()
    self._level_sums = module.level_sums
    self._update_parents = module.update_parents
    self._set_leaves = module.set_leaves
    self._get_leaves = module.get_leaves
    self._descend = module.descend
    self._descend_uniforms = module.descend_uniforms
    self._descend_draws = module.descend_draws

  # ------------------------------------------------------------ sum tree

  def level_sums(self, blocks):
    if blocks.ndim == 2:
      sums = np.empty(len(blocks), _FLOAT64)
      if self._level_sums(blocks, sums) is True:
        return sums
    return super().level_sums(blocks)

  def update_parents(self, flat, offsets, fanout, leaves):
    total = self._update_parents(flat, offsets, fanout, leaves)
    if total is NotImplemented:
      total = _retried(self._update_parents, (flat, offsets, fanout, leaves),
                       3)
      if total is NotImplemented:
        return super().update_parents(flat, offsets, fanout, leaves)
    return total

  def update_leaf(self, flat, offsets, fanout, leaf):
    total = self._update_parents(flat, offsets, fanout, leaf)
    if total is NotImplemented:
      return super().update_leaf(flat, offsets, fanout, leaf)
    return total

  def set_leaves(self, flat, offsets, fanout, capacity, leaves, values,
                 smallest, largest):
    result = self._set_leaves(flat, offsets, fanout, capacity, leaves, values,
                              smallest, largest)
    if result is NotImplemented:
      result = _retried(self._set_leaves, (flat, offsets, fanout, capacity,
                                           leaves, values, smallest, largest),
                        4)
      if result is NotImplemented:
        return super().set_leaves(flat, offsets, fanout, capacity, leaves,
                                  values, smallest, largest)
    return result

  def get_leaves(self, leaves, indices):
    values = np.empty(len(indices), _FLOAT64)
    result = self._get_leaves(leaves, indices, values)
    if result is NotImplemented:
      result = _retried(self._get_leaves, (leaves, indices, values), 1)
      if result is NotImplemented:
        return super().get_leaves(leaves, indices)
    return values if result is True else None

  def descend(self, flat, offsets, fanout, targets):
    masses = np.asarray(targets, dtype=np.float64, order='C')
    if masses.ndim == 1:
      leaves = np.empty(len(masses), _INT64)
      if self._descend(flat, offsets, fanout, masses, leaves) is True:
        return leaves
    return super().descend(flat, offsets, fanout, targets)

  def descend_uniforms(self, flat, offsets, fanout, uniforms, lower, width,
                       scale):
    leaves = np.empty(len(lower), _INT64)
    if self._descend_uniforms(flat, offsets, fanout, uniforms, lower, width,
                              scale, leaves) is True:
      return leaves
    return super().descend_uniforms(flat, offsets, fanout, uniforms, lower,
                                    width, scale)

  def descend_draws(self, flat, offsets, fanout, words, lower, width, scale):
    leaves = np.empty(len(lower), _INT64)
    if self._descend_draws(flat, offsets, fanout, words, lower, width, scale,
                           leaves) is True:
      return leaves
    return super().descend_draws(flat, offsets, fanout, words, lower, width,
                                 scale)
