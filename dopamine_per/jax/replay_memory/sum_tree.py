# coding=utf-8
"""Dopamine JAX's `SumTree`, its loops in C++ (native/binary_sum_tree.h).

A complete binary tree in one float64 array, `_nodes`, root first, as
Dopamine JAX lays it out (so its state dict is Dopamine's). Leaves are set
by adding their change along the path to the root, in Dopamine's order,
and descents subtract left sums as Dopamine's do: the same sums, bit for
bit, hence the same samples for the same draws. Unlike
`dopamine_per.replay_memory.sum_tree` (16-ary, every sum recomputed), its
sums carry the rounding of every change, as Dopamine JAX's do.
"""

import math
from typing import Any, Dict, Union

import numpy as np

from dopamine_per import errors
from dopamine_per.native import extension

__all__ = ['SumTree']


def _as_array(values: Any, dtype: Any, name: str) -> np.ndarray:
  array = np.ascontiguousarray(values, dtype=dtype)
  if array.ndim > 1:
    raise errors.ArgumentError('{} must be a scalar or 1-D, got shape {}'
                               .format(name, array.shape))
  return array.reshape(-1)


class SumTree(object):
  """Sums of non-negative values over `capacity` leaves.

  Attributes:
    max_recorded_priority: the largest value ever set (1.0 before any
      larger one), which Dopamine's agents give new transitions.
  """

  def __init__(self, capacity: int) -> None:
    if not isinstance(capacity, (int, np.integer)) or capacity <= 0:
      raise errors.ArgumentError(
          'Capacity to sum tree must be positive, got capacity={!r}.'.format(
              capacity))
    self._capacity = int(capacity)
    self._depth = math.ceil(math.log2(self._capacity)) + 1
    self._first_leaf_offset = 2**(self._depth - 1) - 1
    self._nodes = np.zeros(2**self._depth - 1, dtype=np.float64)
    self.max_recorded_priority = 1.0
    self._native = extension.load()

  @property
  def leaves(self) -> int:
    """How many leaves the tree has: `capacity` rounded up to a power of
    two."""
    return self._first_leaf_offset + 1

  def _leaf_indices(self, indices: Any) -> np.ndarray:
    leaves = _as_array(indices, np.int64, 'indices')
    outside = (leaves < 0) | (leaves >= self.leaves)
    if outside.any():
      raise errors.InvalidIndexError(
          'leaf index {} is outside [0, {}) (the sum tree over capacity {})'
          .format(leaves[outside][0], self.leaves, self._capacity))
    return leaves

  def set(self, indices: Any, values: Any) -> None:
    """Sets the leaves `indices` (an int or 1-D array) to `values`.

    Of an index given twice, its first value is set, as Dopamine's.

    Raises:
      errors.ArgumentError: (a ValueError and an AssertionError, as
        Dopamine asserts) if shapes differ or a value is negative, NaN or
        infinite; nothing is written.
      errors.InvalidIndexError: If an index is outside the leaves.
    """
    if type(indices) is int and type(values) is float:  # An add's.
      if (0 <= indices < self.leaves and values >= 0.0 and
          values != math.inf):
        if values > self.max_recorded_priority:
          self.max_recorded_priority = values
        self._native.binary_tree_set(self._nodes, self._first_leaf_offset,
                                     indices, values)
        return
    leaves = self._leaf_indices(indices)
    numbers = _as_array(values, np.float64, 'values')
    if leaves.shape != numbers.shape:
      raise errors.ArgumentError(
          'Indices and values must have the same shape, got {} and {}.'
          .format(leaves.shape, numbers.shape))
    bad = ~(np.isfinite(numbers) & (numbers >= 0.0))
    if bad.any():
      raise errors.ArgumentError(
          'Values must be positive (finite, >= 0), got {}.'.format(
              numbers[bad][0]))
    if not leaves.size:
      return
    self.max_recorded_priority = max(self.max_recorded_priority,
                                     numbers.max())
    self._native.binary_tree_set(self._nodes, self._first_leaf_offset,
                                 leaves, numbers)

  def get(self, index: Any) -> Union[float, np.ndarray]:
    """The value at leaf `index` (an int), or at each of an array's."""
    if np.ndim(index) == 0:
      return self._nodes[self._first_leaf_offset +
                         int(self._leaf_indices(index)[0])]
    return self._nodes[self._first_leaf_offset + self._leaf_indices(index)]

  @property
  def root(self) -> float:
    """The sum of all leaves."""
    return self._nodes[0]

  def query(self, targets: Any) -> np.ndarray:
    """The leaf of each target's running sum: the smallest index whose
    cumulative value exceeds it (int32, one per target).

    Raises:
      ValueError: If a target is outside [0, root).
    """
    points = _as_array(targets, np.float64, 'targets')
    if not ((points >= 0) & (points < self.root)).all():
      raise ValueError('Targets must be in the interval [0.0, {}).'.format(
          self.root))
    leaves = np.empty(points.shape, np.int64)
    self._native.binary_tree_query(self._nodes, self._first_leaf_offset,
                                   points, leaves)
    return leaves.astype(np.int32)

  def clear(self) -> None:
    """Sets every leaf (and sum) to 0."""
    self._nodes.fill(0.0)

  def to_state_dict(self) -> Dict[str, Any]:
    """{'nodes': the tree's float64 array}, as Dopamine's, and its
    max_recorded_priority (which Dopamine's does not keep: a resumed run
    gives new transitions the priority an uninterrupted one would)."""
    return {'nodes': self._nodes,
            'max_recorded_priority': float(self.max_recorded_priority)}

  def from_state_dict(self, state_dict: Dict[str, Any]) -> None:
    """Takes the nodes of a tree of the same capacity.

    Raises:
      errors.ArgumentError: If they are not such a tree's (nothing
        changed).
    """
    nodes = np.array(state_dict['nodes'], dtype=np.float64)
    if nodes.shape != self._nodes.shape:
      raise errors.ArgumentError(
          "state_dict['nodes'] has shape {}, expected {}".format(
              nodes.shape, self._nodes.shape))
    if not (np.isfinite(nodes) & (nodes >= 0)).all():
      raise errors.ArgumentError(
          "state_dict['nodes'] holds a negative or non-finite sum")
    self._nodes = nodes
    if 'max_recorded_priority' in state_dict:
      self.max_recorded_priority = float(state_dict['max_recorded_priority'])
