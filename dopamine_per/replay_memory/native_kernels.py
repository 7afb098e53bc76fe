# coding=utf-8
"""The kernel interface in C++: `NativeKernels`.

`NativeKernels` runs every loop of `numpy_kernels.NumpyKernels` (the
interface and its reference) as one call into a CPython extension module
(dopamine_per/native/replay_python.cc, on the loops of replay_core.h), with
the same results, and falls back to NumPy's for inputs its loops do not
cover: returns of 8 steps or more and
rewards that are not float32 scalars, terminal flags that are not a 1-D
array of bools or integers (the C loops test their bytes), arrays that are
not plain C-contiguous, aligned ones of the dtype the loops read (object
frames, strided storage), trees laid out otherwise, empty batches. Index
arrays of another integer dtype or layout are converted instead.

The extension takes the arrays through the buffer protocol and checks each
(dtype, length, layout, alignment; a tree's offsets against its flat array)
before its loop runs: it returns NotImplemented for what it does not cover,
and the method here then converts the indices or runs NumPy's loop. Outputs
are arrays allocated here (np.empty) that the extension fills.

Creating a `NativeKernels` loads the extension, compiling it with the
system's C++ compiler against Python's headers on first use
(`native.build.python_extension`, cached); it raises
`build.NativeBuildError` where it cannot. `kernels.choose('native')`
creates one only when asked.
"""

from typing import Any, Callable, Optional, Tuple

import numpy as np

from dopamine_per.native import extension
from dopamine_per.replay_memory import numpy_kernels

__all__ = ['NativeKernels']

_BOOL = np.dtype(np.bool_)
_INT64 = np.dtype(np.int64)
_FLOAT32 = np.dtype(np.float32)
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
  """`NumpyKernels`' loops in C++ (see the module docstring).

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
    self._update_leaf = module.update_leaf
    self._set_leaves = module.set_leaves
    self._get_leaves = module.get_leaves
    self._descend = module.descend
    self._descend_uniforms = module.descend_uniforms
    self._descend_draws = module.descend_draws
    self._valid_mask = module.valid_mask
    self._trajectories = module.trajectories
    self._gather_stacks = module.gather_stacks
    self._stacks_ending_at = module.stacks_ending_at
    self._transition_batch = module.transition_batch

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
    total = self._update_leaf(flat, offsets, fanout, leaf)
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

  # ------------------------------------------------------------ sampling

  def valid_mask(self, indices, capacity, add_count, horizon, stack,
                 episode_end, terminal):
    valid = np.empty(len(indices), _BOOL)
    done = self._valid_mask(indices, capacity, add_count, horizon, stack,
                            episode_end, terminal, valid)
    if done is NotImplemented:
      done = _retried(self._valid_mask, (indices, capacity, add_count,
                                         horizon, stack, episode_end,
                                         terminal, valid), 0)
      if done is NotImplemented:
        return super().valid_mask(indices, capacity, add_count, horizon,
                                  stack, episode_end, terminal)
    return valid

  def trajectories(self, indices, capacity, terminal, rewards, discounts):
    count = len(indices)
    next_indices = np.empty(count, _INT64)
    is_terminal = np.empty(count, _BOOL)
    returns = np.empty(count, _FLOAT32)
    done = self._trajectories(indices, capacity, terminal, rewards, discounts,
                              next_indices, is_terminal, returns)
    if done is NotImplemented:
      done = _retried(self._trajectories, (indices, capacity, terminal,
                                           rewards, discounts, next_indices,
                                           is_terminal, returns), 0)
      if done is NotImplemented:
        return super().trajectories(indices, capacity, terminal, rewards,
                                    discounts)
    return next_indices, is_terminal, returns

  def gather_stacks(self, frames, windows, out):
    done = self._gather_stacks(frames, windows, out)
    if done is NotImplemented:
      done = _retried(self._gather_stacks, (frames, windows, out), 1)
    # False: an index is out of range, and NumPy's loop raises IndexError.
    if done is True:
      return out
    return super().gather_stacks(frames, windows, out)

  def stacks_ending_at(self, frames, ends, stack, out):
    done = self._stacks_ending_at(frames, ends, stack, out)
    if done is NotImplemented:
      done = _retried(self._stacks_ending_at, (frames, ends, stack, out), 1)
      if done is NotImplemented:
        return super().stacks_ending_at(frames, ends, stack, out)
    return out

  def transition_batch(self, frames, stack, terminal, rewards, discounts,
                       indices, states, returns, is_terminal, indices_out,
                       sources, rows, lock):
    if self._transition_batch(
        frames, stack, terminal, rewards, discounts, indices, states,
        returns, is_terminal, indices_out, sources, rows,
        lock) is NotImplemented:
      # NumPy's, which calls this class's loops.
      super().transition_batch(frames, stack, terminal, rewards, discounts,
                               indices, states, returns, is_terminal,
                               indices_out, sources, rows, lock)
