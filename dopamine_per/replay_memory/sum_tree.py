# coding=utf-8
"""An exact, vectorized sum tree for prioritized experience replay.

A sum tree stores one nonnegative priority per replay slot and answers two
questions fast: "what is the total priority?" and "which slot holds the mass at
cumulative position x?". Sampling a slot with probability proportional to its
priority is then a descent from the root (Schaul et al., 2015, "Prioritized
Experience Replay", appendix B.2.1).

Layout. Dopamine keeps a binary tree and walks it one index and one level at a
time in Python. This tree is *wide*: every inner node sums ``FANOUT`` (16)
children, so a tree over 2**20 leaves has five levels, not twenty-one. A
batch of updates or queries is a handful of NumPy operations per level,
whatever the batch size, or one call of a compiled loop when Numba is
installed (the `fast` extra; `sum_tree_kernels`, bit-identical results).

Exactness. Every inner node is recomputed from its children when one of them
changes, never updated by adding a delta, so rounding errors cannot accumulate:
after any number of updates the root equals the float64 sum of the leaves to a
few ulps.

Compatibility. The public surface matches ``dopamine.tf.replay_memory.sum_tree``:
``SumTree(capacity)``, ``nodes`` (Dopamine's binary levels, root first, computed
on demand), ``max_recorded_priority``, ``set``, ``get``, ``sample`` and
``stratified_sample``, with the same exception types. Without an ``rng`` the
tree draws from Python's ``random`` module exactly as Dopamine does, so
``random.seed`` reproduces Dopamine's query values. See docs/compat.md.
"""

import functools
import math
import numbers
import operator
import random
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from dopamine_per import errors
from dopamine_per.replay_memory import sum_tree_kernels

__all__ = [
    'SumTree',
    'InvalidIndexError',
    'InvalidIndexTypeError',
    'FANOUT',
    'validate_indices',
    'validate_priorities',
    'validate_priority',
]

# Children per inner node. Measured (benchmarks/sum_tree_benchmark.py) at
# capacity 2**20: 16 children make a row of leaves two cache lines, so a
# descent touches about one line per level; stratified sampling is 15% faster
# than with 32 and batched updates cost the same.
FANOUT = 16

RngLike = Union[None, int, np.random.Generator]


class InvalidIndexError(IndexError, ValueError):
  """An index outside [0, capacity). Catchable as IndexError or ValueError."""


class InvalidIndexTypeError(TypeError, errors.ArgumentError):
  """A non-integer index: a TypeError, a ValueError and an AssertionError.

  Dopamine's prioritized memory asserts that indices are integers.
  """


def _python_random_words(count: int) -> bytes:
  """Returns the 2 * `count` Mersenne Twister words of `count` random()s.

  `random.random()` builds each double from two 32-bit words (see
  `sum_tree_kernels.uniforms_from_words`). `random.getrandbits(64 * count)`
  consumes the same words in the same order, so one call reproduces the
  scalar stream exactly, without a Python loop.

  Args:
    count: int, how many uniforms the words are for.

  Returns:
    bytes, 2 * `count` little-endian 32-bit words.
  """
  if count == 0:
    return b''
  return random.getrandbits(64 * count).to_bytes(8 * count, 'little')


def _python_random_uniforms(count: int) -> np.ndarray:
  """Returns `count` floats equal to `count` calls of `random.random()`."""
  return sum_tree_kernels.uniforms_from_words(_python_random_words(count))


def _cache_aligned_zeros(size: int) -> np.ndarray:
  """float64 zeros starting on a 64-byte boundary.

  A row of 16 siblings (128 bytes) then spans two cache lines, not three:
  a third fewer memory reads per level of a descent or an update.
  """
  raw = np.zeros(size + 8)
  start = (-raw.ctypes.data % 64) // 8
  return raw[start:start + size]


def _check_batch_size(batch_size: Any, minimum: int, expected: str) -> None:
  """Raises ValueError unless batch_size is an int (not a bool) >= minimum."""
  if type(batch_size) is int:  # pylint: disable=unidiomatic-typecheck
    valid = batch_size >= minimum  # The common case, without ABC checks.
  else:
    valid = (not isinstance(batch_size, bool) and
             isinstance(batch_size, numbers.Integral) and
             batch_size >= minimum)
  if not valid:
    raise ValueError('batch_size must be {}. Got: {}'.format(expected,
                                                            batch_size))


@functools.lru_cache(maxsize=64)
def _whole_range(batch_size: int) -> Tuple[np.ndarray, np.ndarray]:
  """Lower edges (0) and widths (1) of `batch_size` independent draws."""
  lower, width = np.zeros(batch_size), np.ones(batch_size)
  lower.flags.writeable = False
  width.flags.writeable = False
  return lower, width


@functools.lru_cache(maxsize=64)
def _strata(batch_size: int) -> Tuple[np.ndarray, np.ndarray]:
  """Lower edges and widths of `batch_size` equal strata of [0, 1].

  The edges are `np.linspace(0, 1, batch_size + 1)`, as Dopamine uses, so the
  queries `lower + width * u` equal its `random.uniform(lower, upper)`.
  """
  bounds = np.linspace(0.0, 1.0, batch_size + 1)
  lower, width = bounds[:-1], bounds[1:] - bounds[:-1]
  lower.flags.writeable = False
  width.flags.writeable = False
  return lower, width


def _unrolled_halving_sum(width: int) -> Callable[[List[float]], float]:
  """Compiles `sum_tree_kernels`' pairwise sum of `width` Python floats.

  Unrolled into one expression (under 1 us for 16 floats, a third of any
  loop), in exactly the kernels' order, for the scalar `set`.
  """
  terms = ['v[{}]'.format(i) for i in range(width)]
  while len(terms) > 1:
    terms = ['({} + {})'.format(a, b) for a, b in zip(terms[0::2], terms[1::2])]
  return eval('lambda v: ' + terms[0])  # pylint: disable=eval-used


_row_sum = _unrolled_halving_sum(FANOUT)


def _level_sizes(capacity: int, fanout: int) -> List[int]:
  """Sizes of the stored levels, leaves first; each a multiple of `fanout`."""
  sizes = [-(-capacity // fanout) * fanout]
  while sizes[-1] > fanout:
    parents = sizes[-1] // fanout
    sizes.append(-(-parents // fanout) * fanout)
  return sizes


class SumTree(object):
  """A sum tree over `capacity` nonnegative priorities.

  Leaves hold priorities; each inner node holds the sum of its `FANOUT`
  children; the root is the total priority. Leaves past `capacity` exist only
  as padding and always hold zero.

  Attributes:
    capacity: int, the number of leaves that can hold a priority.
    max_recorded_priority: float, the largest value ever set (at least 1.0),
      used by prioritized replay as the priority of new transitions.
  """

  def __init__(self, capacity: int, rng: RngLike = None,
               kernels: Optional[str] = None):
    """Creates an all-zero sum tree.

    Args:
      capacity: int, the number of leaves.
      rng: None to draw from Python's `random` module (Dopamine's behaviour,
        reproducible with `random.seed`), or a `numpy.random.Generator` or an
        int seed for an independent, checkpointable stream.
      kernels: 'numpy', 'numba' or 'auto' (None: the
        DOPAMINE_PER_SUM_TREE_KERNELS environment variable, default 'auto':
        Numba's when the `fast` extra is installed). Both give bit-identical
        results; see `sum_tree_kernels`.

    Raises:
      ValueError: If capacity is not positive, or the kernels are unknown or
        unavailable.
      dopamine_per.errors.ArgumentError: (a ValueError and an
        AssertionError, as Dopamine asserts) If capacity is not an int.
    """
    if isinstance(capacity, bool) or not isinstance(capacity,
                                                    numbers.Integral):
      raise errors.ArgumentError(
          'Sum tree capacity should be an int. Got: {!r}'.format(capacity))
    if capacity <= 0:
      raise ValueError(
          'Sum tree capacity should be positive. Got: {}'.format(capacity))
    self.capacity = int(capacity)
    self.max_recorded_priority = 1.0
    self._rng = None if rng is None else np.random.default_rng(rng)
    self._kernels = sum_tree_kernels.get_kernels(kernels)
    sizes = _level_sizes(self.capacity, FANOUT)
    # All levels, leaves first, in one array; `_offsets[k]` is where level k
    # starts and `_offsets[-1]` the end.
    self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    self._flat = _cache_aligned_zeros(int(self._offsets[-1]))
    self._levels = [self._flat[start:end] for start, end in
                    zip(self._offsets[:-1], self._offsets[1:])]
    # `_blocks[k]` views level k as rows of siblings: row j holds the children
    # of node j of level k + 1 (or of the root, for the top level).
    self._blocks = [level.reshape(-1, FANOUT) for level in self._levels]
    self._leaves = self._levels[0][:self.capacity]
    self._total = 0.0

  # ---------------------------------------------------------------- reading

  def total_priority(self) -> float:
    """Returns the sum of all priorities (the root). O(1)."""
    return self._total

  def _total_priority(self) -> float:
    """Dopamine's name for `total_priority`."""
    return self._total

  @property
  def nodes(self) -> List[np.ndarray]:
    """Dopamine's binary layout: one float64 array per level, root first.

    The leaf level has 2**ceil(log2(capacity)) entries. The arrays are computed
    from the leaves on each access (O(capacity)): they are a view for
    inspection and checkpoints, and writing to them changes nothing.
    """
    depth = max(self.capacity - 1, 0).bit_length()
    level = np.zeros(1 << depth)
    level[:self.capacity] = self._levels[0][:self.capacity]
    levels = [level]
    while len(level) > 1:
      level = level.reshape(-1, 2).sum(axis=1)
      levels.append(level)
    return levels[::-1]

  def get(self, node_index: Any) -> Union[float, np.ndarray]:
    """Returns the priority of one leaf or of a batch of leaves. O(batch).

    Args:
      node_index: an int or an integer array-like of leaf indices.

    Returns:
      A float for a scalar index, else a float64 array shaped like the input.

    Raises:
      InvalidIndexTypeError: If an index is not an integer.
      InvalidIndexError: If an index is outside [0, capacity).
    """
    if type(node_index) is not np.ndarray or not node_index.ndim:
      if _is_scalar(node_index):
        return float(self._levels[0][self._check_scalar_index(node_index)])
      node_index = np.asarray(node_index)
    kind = node_index.dtype.kind
    if (self._kernels.get_leaves is not None and kind == 'i' and
        node_index.ndim == 1):
      values = self._kernels.get_leaves(self._leaves, node_index)
      if values is not None:
        return values
    elif kind == 'u' or (kind == 'i' and (not node_index.size or
                                          node_index.min() >= 0)):
      try:
        # `take` on the first `capacity` leaves checks the upper bound.
        return self._leaves.take(node_index)
      except IndexError:
        pass
    return self._levels[0][self._check_indices(node_index)]  # Raises.

  # ---------------------------------------------------------------- writing

  def set(self, node_index: Any, value: Any) -> None:
    """Sets the priority of one leaf or of a batch of leaves.

    The whole batch is validated before anything is written. With repeated
    indices the last value wins. Parents are recomputed from their children,
    once per touched parent and level: O(batch * FANOUT * depth) work in
    O(depth) NumPy calls.

    Args:
      node_index: an int or an integer array-like of leaf indices.
      value: a float, or an array-like broadcastable to `node_index`'s shape;
        finite and nonnegative. Zero means "never sample".

    Raises:
      InvalidIndexTypeError: If an index is not an integer.
      InvalidIndexError: If an index is outside [0, capacity).
      ValueError: If a value is negative, NaN or infinite, or the shapes do
        not match.
    """
    if _is_scalar(node_index) and _is_scalar(value):
      self._set_one(self._check_scalar_index(node_index),
                    validate_priority(value))
      return
    if self.set_if_valid(node_index, value):
      return
    indices = self._check_indices(node_index).ravel()
    values = validate_priorities(value, np.shape(node_index)).ravel()
    if indices.size == 0:
      return
    self._levels[0][indices] = values
    self.max_recorded_priority = max(self.max_recorded_priority,
                                     float(values.max()))
    self._total = self._kernels.update_parents(self._flat, self._offsets,
                                               FANOUT, indices)

  def set_if_valid(self, node_index: Any, value: Any) -> bool:
    """`set` in one compiled pass if the batch is valid; else writes nothing.

    For callers that raise their own errors: on False, check the arguments
    (or call `set`) to get the precise error. Always False without compiled
    kernels, and for anything but a non-empty integer array of indices with
    values of the same shape (or one value).

    Args:
      node_index: integer array-like of leaf indices.
      value: a float or an array-like of the same shape.

    Returns:
      bool, whether the values were written.
    """
    if self._kernels.set_leaves is None:
      return False
    indices = np.asarray(node_index)
    if indices.dtype.kind not in 'iu' or not indices.size:
      return False
    try:
      values = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
      return False
    if values.shape != indices.shape:
      if values.ndim:
        return False
      values = np.full(indices.shape, values)
    if indices.dtype != np.int32:  # int32 (TF's indices) compiles as is.
      indices = indices.astype(np.int64, copy=False)
    result = self._kernels.set_leaves(self._flat, self._offsets, FANOUT,
                                      self.capacity, indices.ravel(),
                                      values.ravel())
    if result is None:
      return False
    self._total, largest = result
    if largest > self.max_recorded_priority:
      self.max_recorded_priority = largest
    return True

  def _set_one(self, index: int, value: float) -> None:
    """Scalar `set` without array overhead: O(FANOUT * depth)."""
    self._levels[0][index] = value
    if value > self.max_recorded_priority:
      self.max_recorded_priority = value
    if self._kernels is not sum_tree_kernels.NumpyKernels:
      self._total = self._kernels.update_leaf(self._flat, self._offsets,
                                              FANOUT, index)
      return
    for child_blocks, parents in zip(self._blocks, self._levels[1:]):
      index //= FANOUT
      parents[index] = _row_sum(child_blocks[index].tolist())
    self._total = _row_sum(self._blocks[-1][0].tolist())

  def _rebuild(self) -> None:
    """Recomputes every inner node from the leaves. O(capacity)."""
    level_sums = self._kernels.level_sums
    for child_blocks, parents in zip(self._blocks, self._levels[1:]):
      parents[:] = 0.0
      parents[:len(child_blocks)] = level_sums(child_blocks)
    self._total = float(level_sums(self._blocks[-1])[0])

  # --------------------------------------------------------------- sampling

  def query(self, targets: Any) -> np.ndarray:
    """Inverse CDF: the leaf holding cumulative mass `targets[i]`, vectorized.

    Leaf i owns the half-open interval [sum of leaves before i, that sum plus
    its priority). A target at or past the total (including rounding at the
    last edge) maps to the last leaf with positive priority, so a zero-priority
    leaf or padding is never returned. O(batch * FANOUT * depth) work in
    O(depth) NumPy calls.

    Args:
      targets: float or array-like of raw cumulative masses in [0, total].

    Returns:
      np.ndarray of int64 leaf indices, shaped like `targets`.

    Raises:
      ValueError: If the tree is empty or a target is outside [0, total] or
        NaN.
    """
    self._check_not_empty()
    targets = np.asarray(targets, dtype=np.float64)
    if not np.all((targets >= 0.0) & (targets <= self._total)):
      bad = targets[~((targets >= 0.0) & (targets <= self._total))].flat[0]
      raise ValueError('query targets must be in [0, total priority={}]. '
                       'Got: {}'.format(self._total, bad))
    return self._descend(targets.ravel()).reshape(targets.shape)

  def _descend(self, targets: np.ndarray) -> np.ndarray:
    """Walks a batch of targets from the root to the leaves."""
    return self._kernels.descend(self._flat, self._offsets, FANOUT, targets)

  def _descend_strata(self, lower: np.ndarray, width: np.ndarray
                     ) -> np.ndarray:
    """Descends to one draw in each stratum [lower, lower + width).

    One kernel call scales the draws to the strata and the total and
    descends; from `random`'s words (Dopamine's draws) without an rng.
    """
    if self._rng is None:
      return self._kernels.descend_draws(
          self._flat, self._offsets, FANOUT, _python_random_words(len(lower)),
          lower, width, self._total)
    return self._kernels.descend_uniforms(
        self._flat, self._offsets, FANOUT, self._rng.random(len(lower)), lower,
        width, self._total)

  def sample(self, query_value: Optional[float] = None) -> int:
    """Samples one leaf with probability proportional to its priority.

    Args:
      query_value: float in [0, 1], the position as a fraction of the total
        priority; None draws one (`random.random()` if the tree has no rng).

    Returns:
      int, a leaf index with positive priority.

    Raises:
      ValueError: If the tree is empty or query_value is outside [0, 1].
    """
    self._check_not_empty()
    if query_value is not None and not 0.0 <= query_value <= 1.0:
      raise ValueError(
          'query_value must be in [0, 1]. Got: {}'.format(query_value))
    if query_value is None:
      query_value = self._uniforms(1)[0]
    return int(self._descend(np.array([query_value * self._total]))[0])

  def sample_batch(self, batch_size: int) -> np.ndarray:
    """Draws `batch_size` independent samples in proportion to priority.

    The vectorized form of `batch_size` calls of `sample()`: without an rng
    it consumes the same `random` draws and returns the same leaves.

    Args:
      batch_size: int >= 0, the number of samples.

    Returns:
      np.ndarray of int64 leaf indices with positive priority.

    Raises:
      ValueError: If the tree is empty or batch_size is not an int >= 0.
    """
    self._check_not_empty()
    _check_batch_size(batch_size, 0, 'an integer >= 0')
    return self._descend_strata(*_whole_range(int(batch_size)))

  def stratified_sample(self, batch_size: int) -> np.ndarray:
    """Samples one leaf from each of `batch_size` equal strata of the mass.

    [0, total) is cut into `batch_size` equal segments, one uniform query is
    drawn in each (Schaul et al., 2015), and the results are returned in
    stratum order. Without an rng the queries equal Dopamine's
    `random.uniform(lower, upper)` draws.

    Args:
      batch_size: int, the number of strata and of samples.

    Returns:
      np.ndarray of int64 leaf indices with positive priority, shape
      [batch_size].

    Raises:
      ValueError: If the tree is empty or batch_size is not a positive int.
    """
    self._check_not_empty()
    _check_batch_size(batch_size, 1, 'a positive integer')
    return self._descend_strata(*_strata(int(batch_size)))

  def _uniforms(self, count: int) -> np.ndarray:
    if self._rng is None:
      return _python_random_uniforms(count)
    return self._rng.random(count)

  # ------------------------------------------------------------ checkpoints

  def get_state(self) -> Dict[str, Any]:
    """Returns the tree as plain data, in Dopamine's attribute names.

    `nodes` and `max_recorded_priority` are what Dopamine's SumTree pickles,
    so this dict can be restored by either library. `rng_state` holds the
    generator's state (None without an rng).
    """
    rng_state = None if self._rng is None else self._rng.bit_generator.state
    return {
        'nodes': self.nodes,
        'max_recorded_priority': float(self.max_recorded_priority),
        'rng_state': rng_state,
    }

  def set_state(self, state: Dict[str, Any]) -> None:
    """Restores a state from `get_state` or from a Dopamine SumTree.

    Only the leaves are read; inner nodes are recomputed (Dopamine's may have
    drifted). Everything is validated before anything changes.

    Args:
      state: dict with `nodes` (list of levels, leaves last) and
        `max_recorded_priority`, and optionally `rng_state`.

    Raises:
      ValueError: If the state does not fit this tree's capacity, or holds
        negative, NaN or infinite priorities.
    """
    try:
      leaves = np.asarray(state['nodes'][-1], dtype=np.float64)
      max_priority = float(state['max_recorded_priority'])
    except (KeyError, IndexError, TypeError, ValueError) as e:
      raise ValueError('Not a sum tree state: {!r}'.format(e)) from e
    expected = 1 << max(self.capacity - 1, 0).bit_length()
    if leaves.shape != (expected,):
      raise ValueError(
          'Sum tree state has {} leaves; a tree of capacity {} has {}.'.format(
              leaves.shape, self.capacity, expected))
    validate_priorities(leaves, leaves.shape, 'Sum tree state leaves')
    if np.any(leaves[self.capacity:] != 0.0):
      raise ValueError('Sum tree state has priorities past capacity {}.'.format(
          self.capacity))
    if not math.isfinite(max_priority) or max_priority < 0.0:
      raise ValueError(
          'Invalid max_recorded_priority: {}'.format(max_priority))
    rng_state = state.get('rng_state')
    if rng_state is not None:
      # Validate on a scratch generator, then restore in place: the caller
      # may share this tree's generator.
      rng = self._rng if self._rng is not None else np.random.default_rng()
      try:
        type(rng.bit_generator)().state = rng_state
      except (TypeError, ValueError, KeyError) as e:
        raise ValueError('Invalid rng_state: {!r}'.format(e)) from e
      rng.bit_generator.state = rng_state
      self._rng = rng
    self._levels[0][:self.capacity] = leaves[:self.capacity]
    self.max_recorded_priority = max_priority
    self._rebuild()

  # ------------------------------------------------------------- invariants

  def check_invariants(self) -> None:
    """Raises AssertionError unless the tree is internally consistent.

    Checks that every inner node equals the sum of its children (exactly,
    since both are computed the same way), that padding leaves are zero,
    that no priority is negative or non-finite, and that
    max_recorded_priority bounds every leaf. O(capacity); for tests.
    """
    leaves = self._levels[0]
    assert np.all(np.isfinite(leaves)) and np.all(leaves >= 0.0)
    assert np.all(leaves[self.capacity:] == 0.0), 'nonzero padding leaf'
    assert self.max_recorded_priority >= max(1.0, float(leaves.max()))
    level_sums = sum_tree_kernels.NumpyKernels.level_sums
    for k, (child_blocks, parents) in enumerate(
        zip(self._blocks, self._levels[1:])):
      expected = np.zeros_like(parents)
      expected[:len(child_blocks)] = level_sums(child_blocks)
      assert np.array_equal(parents, expected), 'level {} != sums'.format(k + 1)
    assert self._total == float(level_sums(self._blocks[-1])[0]), 'stale total'

  # ----------------------------------------------------------------- checks

  def _check_not_empty(self) -> None:
    if self._total <= 0.0:
      raise ValueError('Cannot sample from an empty sum tree.')

  def _check_scalar_index(self, node_index: Any) -> int:
    try:
      index = operator.index(node_index)
    except TypeError:
      raise InvalidIndexTypeError(
          'node_index must be an integer. Got: {!r}'.format(node_index)
      ) from None
    if not 0 <= index < self.capacity:
      raise InvalidIndexError('node_index must be in [0, {}). Got: {}'.format(
          self.capacity, index))
    return index

  def _check_indices(self, node_index: Any) -> np.ndarray:
    return validate_indices(node_index, self.capacity, 'node_index')


def validate_indices(indices: Any, capacity: int, name: str) -> np.ndarray:
  """Checks an array-like of leaf indices; returns it as an integer array.

  Args:
    indices: array-like of integers (any integer dtype).
    capacity: int, indices must lie in [0, capacity).
    name: str, the argument's name, for the error message.

  Returns:
    np.ndarray of the input's integer dtype (int64 if it is empty).

  Raises:
    InvalidIndexTypeError: If the indices are not integers.
    InvalidIndexError: If an index is outside [0, capacity).
  """
  array = np.asarray(indices)
  if array.dtype.kind not in 'iu':
    if array.size == 0:
      return array.astype(np.int64)
    raise InvalidIndexTypeError('{} must be integers. Got dtype {}: {!r}'.format(
        name, array.dtype, array.flat[0]))
  if array.size and (array.min() < 0 or array.max() >= capacity):
    bad = array[(array < 0) | (array >= capacity)].flat[0]
    raise InvalidIndexError('{} must be in [0, {}). Got: {}'.format(
        name, capacity, bad))
  return array


def _is_scalar(value: Any) -> bool:
  return type(value) in _FAST_SCALARS or isinstance(
      value, (numbers.Number, np.generic)) or (
          isinstance(value, np.ndarray) and value.ndim == 0)


_FAST_SCALARS = frozenset([int, float, np.int64, np.float64, np.int32,
                           np.float32])


def validate_priority(value: Any, name: str = 'value') -> float:
  """Checks one priority; returns it as a float.

  Args:
    value: a number (Python or NumPy scalar, or 0-d array).
    name: str, the argument's name, for the error message.

  Returns:
    float, the value.

  Raises:
    ValueError: If the value is not a number, or is negative, NaN or
      infinite.
  """
  try:
    number = float(value)
  except (TypeError, ValueError):
    raise ValueError('{} should be numbers. Got {!r}'.format(
        name, value)) from None
  if not 0.0 <= number < math.inf:
    raise ValueError('{} should be nonnegative and finite. Got {}'.format(
        name, number))
  return number


def validate_priorities(values: Any, shape: Tuple[int, ...],
                        name: str = 'value') -> np.ndarray:
  """Checks a batch of priorities and broadcasts it to `shape`.

  Args:
    values: a number or an array-like broadcastable to `shape`.
    shape: tuple of ints, the shape of the matching indices.
    name: str, the argument's name, for the error message.

  Returns:
    np.ndarray of float64 with shape `shape` (possibly a broadcast view).

  Raises:
    ValueError: If a value is not a number, is negative, NaN or infinite, or
      the shapes do not match.
  """
  try:
    array = np.asarray(values, dtype=np.float64)
  except (TypeError, ValueError):
    raise ValueError('{} should be numbers. Got {!r}'.format(
        name, values)) from None
  try:
    array = np.broadcast_to(array, shape)
  except ValueError:
    raise ValueError('{} of shape {} do not fit indices of shape {}.'.format(
        name, np.shape(values), shape)) from None
  ok = (array >= 0.0) & (array < math.inf)
  if not ok.all():
    raise ValueError('{} should be nonnegative and finite. Got {}'.format(
        name, array[~ok].flat[0]))
  return array
