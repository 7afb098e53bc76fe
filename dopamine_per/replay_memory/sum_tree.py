# coding=utf-8
"""An exact, vectorized sum tree for prioritized experience replay.

One nonnegative priority per replay slot; sampling in proportion to them
is a descent from the root (Schaul et al., 2015, appendix B.2.1). Every
inner node sums ``FANOUT`` (16) children, all levels in one flat float64
array (docs/architecture.md#the-sum-trees-flat-layout), and a batch of
updates or queries is one kernel call (`choice.choose`). Inner nodes are
recomputed from their children, never updated by a delta, so rounding
errors cannot accumulate.

The public surface is ``dopamine.tf.replay_memory.sum_tree``'s, with the
same exception types; without an ``rng`` the tree draws from Python's
``random`` exactly as Dopamine does. What differs: docs/compat.md#sum_tree.
"""

import functools
import math
import numbers
import random
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from dopamine_per import errors
from dopamine_per.replay_memory.kernels import choice
from dopamine_per.replay_memory.kernels import numpy_kernels
from dopamine_per.replay_memory.memory import validation

__all__ = [
    'SumTree',
    'FANOUT',
    'python_random_words',
]

# Children per inner node: a row of 16 float64 siblings is two cache lines.
FANOUT = 16

RngLike = Union[None, int, np.random.Generator]

_FLOAT64 = np.dtype(np.float64)
_INT32 = np.dtype(np.int32)
_INT64 = np.dtype(np.int64)


def python_random_words(count: int) -> bytes:
  """The words of `count` `random.random()`s (two 32-bit words each, see
  `numpy_kernels.uniforms_from_words`), drawn by one `getrandbits`: what a
  tree without an rng draws for `count` strata."""
  if count == 0:
    return b''
  return random.getrandbits(64 * count).to_bytes(8 * count, 'little')


def _cache_aligned_zeros(size: int) -> np.ndarray:
  """float64 zeros starting on a 64-byte boundary (a row of 16 siblings
  then spans two cache lines, not three)."""
  raw = np.zeros(size + 8)
  start = (-raw.ctypes.data % 64) // 8
  return raw[start:start + size]


# The largest batch size whose strata are cached (128 entries, 8 MiB at
# most): larger ones are rebuilt on each call, not kept (issue 12).
_CACHED_BATCH_SIZE = 4096


def _new_strata(batch_size: int, stratified: bool
               ) -> Tuple[np.ndarray, np.ndarray]:
  """Lower edges and widths (read-only) of `batch_size` draws.

  Stratified: Dopamine's strata, between `np.linspace(0, 1, batch_size +
  1)`, so that `lower + width * u` equals its `random.uniform(lower,
  upper)`. Else each draw spans [0, 1).
  """
  if stratified:
    bounds = np.linspace(0.0, 1.0, batch_size + 1)
    arrays = bounds[:-1], bounds[1:] - bounds[:-1]
  else:
    arrays = np.zeros(batch_size), np.ones(batch_size)
  for array in arrays:
    array.flags.writeable = False  # Cached arrays are shared.
  return arrays


_cached_strata = functools.lru_cache(maxsize=128)(_new_strata)


def _strata(batch_size: Any, stratified: bool) -> Tuple[np.ndarray,
                                                        np.ndarray]:
  """`_new_strata` of a checked batch size (an int >= 1 if stratified,
  else >= 0; else ValueError), cached for small sizes."""
  minimum = int(stratified)
  if type(batch_size) is not int or batch_size < minimum:  # pylint: disable=unidiomatic-typecheck
    try:
      batch_size = validation.check_int('batch_size', batch_size, minimum)
    except ValueError:
      raise ValueError('batch_size must be {}. Got: {}'.format(
          'a positive integer' if stratified else 'an integer >= 0',
          batch_size)) from None
  if batch_size <= _CACHED_BATCH_SIZE:
    return _cached_strata(batch_size, stratified)
  return _new_strata(batch_size, stratified)


def _leaf_batch(node_index: Any, value: Any
               ) -> Optional[Tuple[np.ndarray, np.ndarray]]:
  """`set_if_valid`'s arguments as 1-D indices and float64 values, or None
  for what it leaves to `set` (a scalar index, an empty batch, ...)."""
  indices = np.asarray(node_index)
  if indices.dtype.kind not in 'iu' or not indices.ndim or not indices.size:
    return None
  try:
    values = np.asarray(value)
  except Exception:  # pylint: disable=broad-except
    return None
  if values.dtype is not _FLOAT64:
    if values.dtype.kind not in 'fiu':  # Not bools, complex, strings.
      return None
    values = values.astype(np.float64)
  if values.shape != indices.shape:
    if values.ndim:
      return None
    values = np.full(indices.shape, values)
  # int32 (TF's indices) compiles as is.
  if indices.dtype is not _INT64 and indices.dtype != _INT32:
    indices = indices.astype(np.int64, copy=False)
  return indices.ravel(), values.ravel()


def _level_sizes(capacity: int, fanout: int) -> List[int]:
  """Sizes of the stored levels, leaves first; each a multiple of `fanout`."""
  sizes = [-(-capacity // fanout) * fanout]
  while sizes[-1] > fanout:
    parents = sizes[-1] // fanout
    sizes.append(-(-parents // fanout) * fanout)
  return sizes


def levels_of(leaves: np.ndarray) -> List[np.ndarray]:
  """Dopamine's binary layout above a leaf level (a power of two long):
  one float64 array per level, root first, each node its children's sum."""
  levels = [leaves]
  while len(levels[-1]) > 1:
    levels.append(levels[-1].reshape(-1, 2).sum(axis=1))
  return levels[::-1]


class SumTree(object):
  """A sum tree over `capacity` nonnegative priorities.

  Leaves hold priorities; each inner node holds the sum of its `FANOUT`
  children. Leaves past `capacity` are padding and always hold zero. A
  priority is a real number that `priority_dtype` holds
  (`validation.check_priority`); an update that would make the float64
  total infinite is refused too.

  Attributes:
    capacity: int, the number of leaves that can hold a priority.
    max_recorded_priority: float, the largest value ever set (at least 1.0),
      used by prioritized replay as the priority of new transitions.
    priority_dtype: np.dtype, the float dtype every priority must fit.
  """

  def __init__(self, capacity: int, rng: RngLike = None,
               kernels: choice.KernelsLike = None,
               priority_dtype: Any = np.float64):
    """Creates an all-zero sum tree.

    Args:
      capacity: the number of leaves.
      rng: None to draw from Python's `random` module (as Dopamine,
        reproducible with `random.seed`), or a `numpy.random.Generator` or
        an int seed for an independent, checkpointable stream.
      kernels: the loops, as `choice.choose` takes them (all give
        bit-identical results).
      priority_dtype: float16, float32 or float64, the dtype every priority
        must fit; float64 accepts every positive finite float, as Dopamine.

    Raises:
      ValueError: If capacity is not positive, the kernels are unknown or
        unavailable, or priority_dtype is not such a float dtype.
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
    # [total, max_recorded_priority]: one array, which the native ops
    # update when they set priorities (see `native_layout`).
    self._scalars = np.array([0.0, 1.0])
    self._rng = None if rng is None else np.random.default_rng(rng)
    self._kernels = choice.choose(kernels)
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
    self._read_only_leaves = self._leaves.view()
    self._read_only_leaves.flags.writeable = False
    self.priority_dtype = validation.check_priority_dtype(priority_dtype)
    self._smallest, self._largest = validation.priority_bounds(
        self.priority_dtype)
    # While every leaf is at most this, no total can overflow (a full tree
    # of it sums to float64's largest). Beyond it `_check_total` decides.
    self._safe_largest = np.finfo(np.float64).max / float(
        FANOUT ** len(sizes))
    # The compiled check-and-write accepts values up to this; past it (or
    # with max_recorded_priority past _safe_largest) `set` decides.
    self._fast_largest = min(self._largest, self._safe_largest)

  # ---------------------------------------------------------------- reading

  @property
  def max_recorded_priority(self) -> float:
    """The largest priority ever set, at least 1.0 (assignable, checked).

    Raises:
      ValueError: If an assigned value is not a valid priority or is below
        1.0 or the largest leaf (as a checkpoint's); nothing changes.
    """
    return float(self._scalars[1])

  @max_recorded_priority.setter
  def max_recorded_priority(self, value: float) -> None:
    number = validation.check_priority(value, 'max_recorded_priority',
                                       self.priority_dtype)
    largest = max(1.0, float(self._levels[0].max(initial=0.0)))
    if number < largest:
      raise ValueError(
          'max_recorded_priority must bound every priority and 1.0: {!r} is '
          'below {!r}; nothing was changed.'.format(number, largest))
    self._scalars[1] = number

  @property
  def rng(self) -> Optional[np.random.Generator]:
    """The generator the tree draws from, or None: Python's `random`."""
    return self._rng

  @property
  def leaves(self) -> np.ndarray:
    """The `capacity` leaf priorities, float64: a read-only view that
    follows every change (write with `set`)."""
    return self._read_only_leaves

  @property
  def nbytes(self) -> int:
    """The bytes of the tree's nodes (every level, padding included)."""
    return self._flat.nbytes + self._offsets.nbytes + self._scalars.nbytes

  @property
  def _total(self) -> float:
    return float(self._scalars[0])

  @_total.setter
  def _total(self, value: float) -> None:
    self._scalars[0] = value

  def native_layout(self) -> Dict[str, Any]:
    """The arrays the native ops share with this tree, and its bounds.

    Returns:
      dict: 'flat', 'offsets', 'fanout', 'scalars' ([total,
      max_recorded_priority], which an op setting priorities updates),
      'smallest' and 'largest' (what `set_if_valid` accepts besides 0).
    """
    return {'flat': self._flat, 'offsets': self._offsets, 'fanout': FANOUT,
            'scalars': self._scalars, 'smallest': self._smallest,
            'largest': self._fast_largest}

  def total_priority(self) -> float:
    """Returns the sum of all priorities (the root). O(1)."""
    return self._total

  def _total_priority(self) -> float:
    """Dopamine's name for `total_priority`."""
    return self._total

  @property
  def nodes(self) -> List[np.ndarray]:
    """Dopamine's binary layout: one float64 array per level, root first.

    The leaf level has 2**ceil(log2(capacity)) entries. Computed from the
    leaves on each access (O(capacity)): writing to them changes nothing.
    """
    return levels_of(self._leaf_level())

  def _leaf_level(self) -> np.ndarray:
    """Dopamine's leaf level: the priorities, zeros to a power of two."""
    level = np.zeros(1 << max(self.capacity - 1, 0).bit_length())
    level[:self.capacity] = self._levels[0][:self.capacity]
    return level

  def get(self, node_index: Any) -> Union[float, np.ndarray]:
    """Returns the priority of one leaf or of a batch of leaves. O(batch).

    Args:
      node_index: an int or an integer array-like of leaf indices.

    Returns:
      A float for a scalar index, else a float64 array shaped like it.

    Raises:
      errors.InvalidIndexTypeError: If an index is not an integer.
      errors.InvalidIndexError: If an index is outside [0, capacity).
    """
    if type(node_index) is not np.ndarray or not node_index.ndim:
      if validation.is_scalar(node_index):
        return float(self._levels[0][validation.check_index(
            node_index, self.capacity, 'node_index')])
      node_index = np.asarray(node_index)
    kind = node_index.dtype.kind
    if kind == 'i' and node_index.ndim == 1:
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
    return self._levels[0][validation.check_indices(  # Raises.
        node_index, self.capacity, 'node_index')]

  # ---------------------------------------------------------------- writing

  def set(self, node_index: Any, value: Any) -> None:
    """Sets the priority of one leaf or of a batch of leaves.

    The whole batch is validated before anything is written. With repeated
    indices the last value wins. O(batch * FANOUT * depth).

    Args:
      node_index: an int or an integer array-like of leaf indices.
      value: a priority (see `validation.check_priority`; 0 means "never
        sample"), or an array-like of them broadcastable to `node_index`.

    Raises:
      errors.InvalidIndexTypeError: If an index is not an integer.
      errors.InvalidIndexError: If an index is outside [0, capacity).
      ValueError: If a value is not a real number (a string, bytes, a bool,
        a complex number, an int beyond any float), is negative, NaN,
        infinite or outside `priority_dtype`'s range, if the shapes do not
        match, or if the update would make the total priority infinite.
    """
    if validation.is_scalar(node_index) and validation.is_scalar(value):
      index = validation.check_index(node_index, self.capacity,
                                        'node_index')
      number = validation.check_priority(value, 'value', self.priority_dtype)
      if (number > self._safe_largest or  # Arrays only when needed: hot.
          self._scalars[1] > self._safe_largest):
        self._check_total(np.array([index]), np.array([number]))
      self.set_validated(index, number)
      return
    if self.set_if_valid(node_index, value):
      return
    indices = validation.check_indices(node_index, self.capacity,
                                       'node_index').ravel()
    values = validation.check_priorities(value, np.shape(node_index), 'value',
                                         self.priority_dtype).ravel()
    if indices.size == 0:
      return
    largest = float(values.max())
    self._check_total(indices, values)
    self._levels[0][indices] = values
    self._scalars[1] = max(self._scalars[1], largest)
    self._total = self._kernels.update_parents(self._flat, self._offsets,
                                               FANOUT, indices)

  def set_if_valid(self, node_index: Any, value: Any) -> bool:
    """`set` in one compiled pass if the batch is valid; else writes nothing.

    For callers that raise their own errors: on False, `set` gives the
    precise error. Always False for anything but a non-empty 1-D integer
    array of indices with real values of the same shape (or one value),
    and for values so large that the total's overflow must be checked.

    Returns:
      bool, whether the values were written.
    """
    # A batch already as the kernels take it (a sample's indices, the
    # agent's float64 priorities) goes straight to them.
    scalars = self._scalars  # [total, max_recorded_priority]
    if scalars[1] > self._safe_largest:
      return False
    indices, values = node_index, value
    if not (type(indices) is np.ndarray and type(values) is np.ndarray and  # pylint: disable=unidiomatic-typecheck
            values.dtype is _FLOAT64 and indices.ndim == 1 and
            values.shape == indices.shape and indices.size and
            (indices.dtype is _INT64 or indices.dtype is _INT32)):
      batch = _leaf_batch(node_index, value)
      if batch is None:
        return False
      indices, values = batch
    result = self._kernels.set_leaves(self._flat, self._offsets, FANOUT,
                                      self.capacity, indices, values,
                                      self._smallest, self._fast_largest)
    if result is None:
      return False
    scalars[0], largest = result
    if largest > scalars[1]:
      scalars[1] = largest
    return True

  def _check_total(self, indices: np.ndarray, values: np.ndarray) -> None:
    """Raises ValueError if writing checked `values` at checked `indices`
    would make the total inf."""
    if (float(values.max()) > self._safe_largest or
        self._scalars[1] > self._safe_largest) and not self._finite_total(
            indices, values):
      raise ValueError(
          'value: setting {} at indices {} would make the total priority '
          'infinite (the float64 sum overflows); nothing was written.'.format(
              validation.head(values), validation.head(indices)))

  def _finite_total(self, indices: Any, values: np.ndarray) -> bool:
    """Whether the tree with `values` at leaves `indices` has a finite
    total (summed on a copy as `_rebuild` sums: O(capacity))."""
    flat = self._flat.copy()
    flat[indices] = values
    with np.errstate(over='ignore', invalid='ignore'):
      return math.isfinite(self._sum_levels(flat))

  def set_validated(self, index: int, value: float) -> None:
    """Sets one leaf whose index and value the caller has validated.

    A scalar `set` without its checks, for a hot path (the prioritized
    memory's `add`). Unchecked arguments corrupt the tree.

    Args:
      index: int in [0, capacity).
      value: a valid priority (`check_priority`) keeping the total finite.
    """
    self._levels[0][index] = value
    if value > self._scalars[1]:
      self._scalars[1] = value
    self._total = self._kernels.update_leaf(self._flat, self._offsets,
                                            FANOUT, index)

  def _rebuild(self) -> None:
    """Recomputes every inner node from the leaves. O(capacity)."""
    self._total = self._sum_levels(self._flat)

  def _sum_levels(self, flat: np.ndarray) -> float:
    """Recomputes the inner nodes of `flat` (laid out as this tree's);
    returns the total."""
    level_sums = self._kernels.level_sums
    offsets = self._offsets
    for k in range(len(offsets) - 2):
      children = flat[offsets[k]:offsets[k + 1]].reshape(-1, FANOUT)
      parents = flat[offsets[k + 1]:offsets[k + 2]]
      parents[:] = 0.0
      parents[:len(children)] = level_sums(children)
    return float(level_sums(flat[offsets[-2]:].reshape(-1, FANOUT))[0])

  # --------------------------------------------------------------- sampling

  def query(self, targets: Any) -> np.ndarray:
    """Inverse CDF: the leaf holding cumulative mass `targets[i]`, vectorized.

    Leaf i owns the half-open interval [sum of leaves before i, that sum plus
    its priority). A target at or past the total (including rounding at the
    last edge) maps to the last leaf with positive priority, so a zero-priority
    leaf or padding is never returned.

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
    """Descends to one draw in each stratum [lower, lower + width), in one
    kernel call (from `random`'s words, Dopamine's draws, without an rng)."""
    if self._rng is None:
      return self._kernels.descend_draws(
          self._flat, self._offsets, FANOUT, python_random_words(len(lower)),
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
      query_value = (self._rng.random(1) if self._rng is not None else
                     numpy_kernels.uniforms_from_words(
                         python_random_words(1)))[0]
    return int(self._descend(np.array([query_value * self._total]))[0])

  def sample_batch(self, batch_size: int) -> np.ndarray:
    """Draws `batch_size` independent samples in proportion to priority.

    The vectorized form of `batch_size` calls of `sample()`: without an rng
    it consumes the same `random` draws and returns the same leaves.

    Args:
      batch_size: int >= 0.

    Returns:
      int64 leaf indices with positive priority.

    Raises:
      ValueError: If the tree is empty or batch_size is not an int >= 0.
    """
    self._check_not_empty()
    return self._descend_strata(*_strata(batch_size, False))

  def stratified_sample(self, batch_size: int) -> np.ndarray:
    """Samples one leaf from each of `batch_size` equal strata of the mass.

    [0, total) is cut into `batch_size` equal segments, one uniform query is
    drawn in each (Schaul et al., 2015), and the results are returned in
    stratum order. Without an rng the queries equal Dopamine's
    `random.uniform(lower, upper)` draws.

    Args:
      batch_size: int, the number of strata and of samples.

    Returns:
      int64 [batch_size] leaf indices with positive priority.

    Raises:
      ValueError: If the tree is empty or batch_size is not a positive int.
    """
    self._check_not_empty()
    return self._descend_strata(*_strata(batch_size, True))

  # ------------------------------------------------------------ checkpoints

  def get_state(self, leaves_only: bool = False) -> Dict[str, Any]:
    """Returns the tree as plain data, in Dopamine's attribute names.

    `nodes` and `max_recorded_priority` are what Dopamine's SumTree pickles,
    so this dict can be restored by either library. `rng_state` holds the
    generator's state (None without an rng). With `leaves_only`, `nodes`
    holds the leaf level alone (what `set_state` reads; the inner levels
    cost as much again to compute).
    """
    rng_state = None if self._rng is None else self._rng.bit_generator.state
    return {
        'nodes': [self._leaf_level()] if leaves_only else self.nodes,
        'max_recorded_priority': float(self.max_recorded_priority),
        'rng_state': rng_state,
    }

  def set_state(self, state: Dict[str, Any]) -> None:
    """Restores a state from `get_state` or from a Dopamine SumTree.

    Only the leaves are read; inner nodes are recomputed. Everything is
    validated before anything changes: the state must leave the tree as
    `set` could have.

    Args:
      state: dict with `nodes` (list of levels, leaves last) and
        `max_recorded_priority`, and optionally `rng_state`.

    Raises:
      ValueError: If the state is malformed, does not fit this tree's
        capacity, holds priorities `set` would refuse (or summing to inf),
        a max_recorded_priority that is not one at least 1.0 and the
        largest leaf, or an unusable rng_state.
    """
    leaves, max_priority = validation.check_sum_tree_state(
        state, self.capacity, self.priority_dtype)
    leaves = leaves[:self.capacity]
    if (float(leaves.max()) * leaves.size >= 2.0 ** 1000 and
        not self._finite_total(slice(0, self.capacity), leaves)):
      raise ValueError('Sum tree state leaves sum to more than float64 holds '
                       '(the total priority would be infinite).')
    rng_state = state.get('rng_state')
    if rng_state is not None:
      # Validate on a scratch generator, then restore in place: the caller
      # may share this tree's generator.
      rng = self._rng if self._rng is not None else np.random.default_rng()
      try:
        type(rng.bit_generator)().state = rng_state
      except Exception as e:  # pylint: disable=broad-except
        raise ValueError('Invalid rng_state: {}'.format(
            type(e).__name__)) from e
      rng.bit_generator.state = rng_state
      self._rng = rng
    self._levels[0][:self.capacity] = leaves
    self._scalars[1] = max_priority  # Checked with the leaves.
    self._rebuild()

  # ------------------------------------------------------------- invariants

  def check_invariants(self) -> None:
    """Raises AssertionError unless the tree is internally consistent.

    Every inner node equals the sum of its children exactly, padding leaves
    are zero, priorities are finite and >= 0, and max_recorded_priority
    bounds every leaf. O(capacity); for tests.
    """

    leaves = self._levels[0]
    assert np.all(np.isfinite(leaves)) and np.all(leaves >= 0.0)
    assert np.all(leaves[self.capacity:] == 0.0), 'nonzero padding leaf'
    assert self.max_recorded_priority >= max(1.0, float(leaves.max()))
    level_sums = choice.NUMPY.level_sums
    for k, (child_blocks, parents) in enumerate(
        zip(self._blocks, self._levels[1:])):
      expected = np.zeros_like(parents)
      expected[:len(child_blocks)] = level_sums(child_blocks)
      assert np.array_equal(parents, expected), 'level {} != sums'.format(k + 1)
    assert self._total == float(level_sums(self._blocks[-1])[0]), 'stale total'

  # ----------------------------------------------------------------- checks

  def _check_not_empty(self) -> None:
    if self._scalars[0] <= 0.0:
      raise ValueError('Cannot sample from an empty sum tree.')
