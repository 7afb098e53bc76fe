# coding=utf-8
"""The two hot loops of the sum tree, in NumPy and (optionally) compiled.

`sum_tree.SumTree` keeps every level of its tree in one flat float64 array:
level 0 (the leaves) first, each level a whole number of rows of `fanout`
siblings, the top level a single row whose sum is the total. Two operations
walk that layout and decide the tree's speed:

* `update_parents`: after leaves were written, recompute every ancestor of
  them from its children;
* `descend`: for each target mass, walk from the root to the leaf holding it.

`descend_uniforms` and `descend_draws` are `descend` with its targets made
from uniform draws or from raw random words (see `uniforms_from_words`), so
that a compiled sample is one call.

Both come in two implementations with the same float operations in the same
order, so they give bit-identical trees and samples:

* `NumpyKernels`: vectorized over the batch (a few NumPy calls per level);
  always available.
* `NumbaKernels`: the same loops compiled with Numba, from the `fast` extra
  (``pip install dopamine_per[fast]``); several times faster on small and
  medium batches, where NumPy's per-call overhead dominates.

The arithmetic that both share:

* A parent is the pairwise ("halving") sum of its `fanout` children:
  adjacent pairs first, then pairs of those, and so on.
* A descent computes the running (left-to-right) sums of the children of the
  current node and takes the first child whose running sum exceeds the
  remaining mass; the running sum before it is subtracted. If the remaining
  mass reaches past the node's last running sum (rounding), it takes the last
  child with positive mass. Either way the child has positive mass, so a
  descent never ends on a zero-priority leaf or on padding.
"""

import os
from typing import Optional

from absl import logging
import numpy as np

__all__ = ['NumpyKernels', 'NumbaKernels', 'get_kernels', 'available']

# Environment variable choosing the default kernels: 'numpy', 'numba' or
# 'auto' (numba when installed).
KERNELS_ENV = 'DOPAMINE_PER_SUM_TREE_KERNELS'


def uniforms_from_words(words: bytes) -> np.ndarray:
  """Turns pairs of 32-bit Mersenne Twister words into floats in [0, 1).

  `random.random()` builds each double from two consecutive words: 27 bits
  of the first and 26 of the second. Given the bytes of
  `random.getrandbits(64 * count)` (little-endian), this returns the same
  `count` doubles as `count` calls of `random.random()`.

  Args:
    words: bytes, a whole number of pairs of little-endian 32-bit words.

  Returns:
    float64 array, one per pair.
  """
  words = np.frombuffer(words, dtype='<u4')
  high = (words[0::2] >> 5).astype(np.float64)
  low = (words[1::2] >> 6).astype(np.float64)
  return (high * 67108864.0 + low) * (1.0 / 9007199254740992.0)


def _halving_sums(rows: np.ndarray) -> np.ndarray:
  """Pairwise sums over the last axis (a power of two long)."""
  while rows.shape[-1] > 1:
    rows = rows[..., 0::2] + rows[..., 1::2]
  return rows[..., 0]


class NumpyKernels(object):
  """The sum tree's loops, vectorized over the batch with NumPy."""

  name = 'numpy'
  # Compiled kernels can also check and write, or check and read, in one
  # call (see NumbaKernels); NumPy's paths are SumTree.set and get themselves.
  set_leaves = None
  get_leaves = None

  @staticmethod
  def level_sums(blocks: np.ndarray) -> np.ndarray:
    """Sums of each row of `blocks` ([rows, fanout]) in the shared order."""
    return _halving_sums(blocks)

  @staticmethod
  def update_parents(flat: np.ndarray, offsets: np.ndarray, fanout: int,
                     leaves: np.ndarray) -> float:
    """Recomputes the ancestors of `leaves`; returns the new total.

    Args:
      flat: float64 array of all levels (see the module docstring).
      offsets: int64 array, offsets[k] is where level k starts in `flat`;
        offsets[-1] is len(flat).
      fanout: int, children per node (a power of two).
      leaves: int64 array of the leaf indices whose values changed.

    Returns:
      float, the sum of the top level (the total priority).
    """
    nodes = leaves
    for level in range(len(offsets) - 2):
      children = flat[offsets[level]:offsets[level + 1]].reshape(-1, fanout)
      parents = flat[offsets[level + 1]:offsets[level + 2]]
      nodes = nodes // fanout
      parents[nodes] = _halving_sums(children[nodes])
    return float(_halving_sums(flat[offsets[-2]:offsets[-1]]))

  @staticmethod
  def descend(flat: np.ndarray, offsets: np.ndarray, fanout: int,
              targets: np.ndarray) -> np.ndarray:
    """Returns the leaf holding each cumulative mass in `targets`.

    Args:
      flat: float64 array of all levels.
      offsets: int64 level offsets (see `update_parents`).
      fanout: int, children per node.
      targets: float64 array of masses in [0, total].

    Returns:
      int64 array of leaf indices, shaped like `targets`.
    """
    remaining = targets.copy()
    nodes = np.zeros(len(targets), dtype=np.int64)
    rows = np.arange(len(targets))
    for level in range(len(offsets) - 2, -1, -1):
      blocks = flat[offsets[level]:offsets[level + 1]].reshape(-1, fanout)
      children = blocks[nodes]                       # [batch, fanout]
      running = np.cumsum(children, axis=1)
      chosen = (running <= remaining[:, None]).sum(axis=1)
      overflow = chosen == fanout
      if overflow.any():
        positive = children[overflow] > 0.0
        chosen[overflow] = fanout - 1 - np.argmax(positive[:, ::-1], axis=1)
      before = running[rows, chosen - 1]
      remaining -= np.where(chosen > 0, before, 0.0)
      nodes = nodes * fanout + chosen
    return nodes

  @staticmethod
  def descend_uniforms(flat: np.ndarray, offsets: np.ndarray, fanout: int,
                       uniforms: np.ndarray, lower: np.ndarray,
                       width: np.ndarray, scale: float) -> np.ndarray:
    """`descend` to the targets (lower + width * uniforms) * scale.

    Args:
      flat, offsets, fanout: the tree (see `descend`).
      uniforms: float64 array of draws in [0, 1), one per target.
      lower: float64 array, the start of each target's stratum (fraction of
        the mass).
      width: float64 array, the width of each stratum.
      scale: float, the total mass.

    Returns:
      int64 array of leaf indices, one per target.
    """
    return NumpyKernels.descend(flat, offsets, fanout,
                                (lower + width * uniforms) * scale)

  @staticmethod
  def descend_draws(flat: np.ndarray, offsets: np.ndarray, fanout: int,
                    words: bytes, lower: np.ndarray, width: np.ndarray,
                    scale: float) -> np.ndarray:
    """`descend_uniforms` of `uniforms_from_words(words)`."""
    return NumpyKernels.descend_uniforms(flat, offsets, fanout,
                                         uniforms_from_words(words), lower,
                                         width, scale)


def _build_numba_kernels():
  """Compiles the Numba kernels; returns the class, or None without Numba."""
  try:
    import numba  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None

  jit = numba.njit(cache=True, nogil=True)
  # Inlined where called, so that a constant fanout unrolls their loops.
  inline_jit = numba.njit(cache=True, nogil=True, inline='always')

  @jit
  def halving_sum(flat, start, fanout, scratch):
    for j in range(fanout // 2):
      scratch[j] = flat[start + 2 * j] + flat[start + 2 * j + 1]
    width = fanout // 2
    while width > 1:
      width //= 2
      for j in range(width):
        scratch[j] = scratch[2 * j] + scratch[2 * j + 1]
    return scratch[0]

  @jit
  def halving_sum_16(flat, start):
    # halving_sum for 16 children, unrolled (same order, in registers).
    a = (flat[start] + flat[start + 1]) + (flat[start + 2] + flat[start + 3])
    b = ((flat[start + 4] + flat[start + 5]) +
         (flat[start + 6] + flat[start + 7]))
    c = ((flat[start + 8] + flat[start + 9]) +
         (flat[start + 10] + flat[start + 11]))
    d = ((flat[start + 12] + flat[start + 13]) +
         (flat[start + 14] + flat[start + 15]))
    return (a + b) + (c + d)

  @jit
  def update_parents_16(flat, offsets, leaves):
    top = len(offsets) - 2
    for b in range(len(leaves)):
      node = leaves[b]
      for level in range(top):
        node //= 16
        flat[offsets[level + 1] + node] = halving_sum_16(
            flat, offsets[level] + node * 16)
    return halving_sum_16(flat, offsets[top])

  @jit
  def update_one_leaf(flat, offsets, fanout, leaf):
    return update_parents(flat, offsets, fanout,
                          np.full(1, leaf, dtype=np.int64))

  @jit
  def update_parents(flat, offsets, fanout, leaves):
    if fanout == 16:
      return update_parents_16(flat, offsets, leaves)
    scratch = np.empty(max(fanout // 2, 1))
    top = len(offsets) - 2
    for b in range(len(leaves)):
      node = leaves[b]
      for level in range(top):
        node //= fanout
        flat[offsets[level + 1] + node] = halving_sum(
            flat, offsets[level] + node * fanout, fanout, scratch)
    return halving_sum(flat, offsets[top], fanout, scratch)

  @inline_jit
  def choose_child(flat, start, fanout, remaining):
    # Branch-free: the running sums never decrease, so the children whose
    # running sum is <= remaining are a prefix; count it and keep its last
    # sum. Without branches the scans of different targets overlap.
    running = 0.0
    before = 0.0
    chosen = 0
    for j in range(fanout):
      running += flat[start + j]
      below = running <= remaining
      chosen += below
      before = running if below else before
    if chosen == fanout:
      chosen = fanout - 1
      while flat[start + chosen] <= 0.0 and chosen > 0:
        chosen -= 1
      before = 0.0
      for j in range(chosen):
        before += flat[start + j]
    return chosen, before

  @inline_jit
  def descend_levels(flat, offsets, fanout, targets):
    # Level by level, so that the loads of different targets are independent
    # and overlap: a third faster than target by target on large trees.
    count = len(targets)
    nodes = np.zeros(count, dtype=np.int64)
    remaining = targets.copy()
    for level in range(len(offsets) - 2, -1, -1):
      for b in range(count):
        chosen, before = choose_child(
            flat, offsets[level] + nodes[b] * fanout, fanout, remaining[b])
        if chosen > 0:
          remaining[b] -= before
        nodes[b] = nodes[b] * fanout + chosen
    return nodes

  @jit
  def descend(flat, offsets, fanout, targets):
    if fanout == 16:  # A constant: the child scan is unrolled.
      return descend_levels(flat, offsets, 16, targets)
    return descend_levels(flat, offsets, fanout, targets)

  @inline_jit
  def word(data, index):
    # The little-endian 32-bit word `index` of a bytes object.
    start = 4 * index
    return (np.uint32(data[start]) | (np.uint32(data[start + 1]) << 8) |
            (np.uint32(data[start + 2]) << 16) |
            (np.uint32(data[start + 3]) << 24))

  @jit
  def uniforms_and_descend(flat, offsets, fanout, uniforms, lower, width,
                           scale):
    targets = np.empty(len(lower))
    for i in range(len(lower)):
      targets[i] = (lower[i] + width[i] * uniforms[i]) * scale
    return descend(flat, offsets, fanout, targets)

  @jit
  def draws_and_descend(flat, offsets, fanout, words, lower, width, scale):
    uniforms = np.empty(len(lower))
    for i in range(len(lower)):
      high = np.float64(word(words, 2 * i) >> 5)
      low = np.float64(word(words, 2 * i + 1) >> 6)
      uniforms[i] = (high * 67108864.0 + low) * (1.0 / 9007199254740992.0)
    return uniforms_and_descend(flat, offsets, fanout, uniforms, lower, width,
                                scale)

  @jit
  def set_leaves(flat, offsets, fanout, capacity, leaves, values):
    for i in range(len(leaves)):
      if leaves[i] < 0 or leaves[i] >= capacity:
        return False, 0.0, 0.0
      if not (values[i] >= 0.0 and values[i] < np.inf):  # NaN fails too.
        return False, 0.0, 0.0
    largest = 0.0
    for i in range(len(leaves)):
      flat[leaves[i]] = values[i]
      largest = max(largest, values[i])
    return True, update_parents(flat, offsets, fanout, leaves), largest

  @jit
  def get_leaves(leaves, indices):
    out = np.empty(len(indices))
    for i in range(len(indices)):
      if indices[i] < 0 or indices[i] >= len(leaves):
        return False, out
      out[i] = leaves[indices[i]]
    return True, out

  class NumbaKernels(object):
    """The sum tree's loops compiled with Numba (same arithmetic)."""

    name = 'numba'
    level_sums = staticmethod(NumpyKernels.level_sums)

    @staticmethod
    def set_leaves(flat, offsets, fanout, capacity, leaves, values):
      """Checks, writes and propagates a batch of leaves in one call.

      Args:
        flat: float64 array of all levels.
        offsets: int64 level offsets.
        fanout: int, children per node.
        capacity: int, leaves must lie in [0, capacity).
        leaves: int64 array of leaf indices.
        values: float64 array of the same length.

      Returns:
        (total, largest value) after the write; None, with nothing written,
        if an index is out of range or a value negative, NaN or infinite.
      """
      ok, total, largest = set_leaves(flat, offsets, fanout, capacity,
                                      leaves, values)
      return (total, largest) if ok else None

    @staticmethod
    def update_parents(flat, offsets, fanout, leaves):
      return float(update_parents(flat, offsets, fanout,
                                  leaves.astype(np.int64, copy=False)))

    @staticmethod
    def get_leaves(leaves, indices):
      """Returns leaves[indices] (float64), or None if one is out of range.

      Args:
        leaves: float64 array of the `capacity` leaves.
        indices: 1-D signed integer array.
      """
      ok, values = get_leaves(leaves, indices)
      return values if ok else None

    update_leaf = staticmethod(update_one_leaf)  # Returns a Python float.

    @staticmethod
    def descend(flat, offsets, fanout, targets):
      return descend(flat, offsets, fanout,
                     np.ascontiguousarray(targets, dtype=np.float64))

    descend_uniforms = staticmethod(uniforms_and_descend)
    descend_draws = staticmethod(draws_and_descend)

  return NumbaKernels


NumbaKernels = _build_numba_kernels()


def available() -> list:
  """Names of the kernels that can be used here."""
  return ['numpy'] + (['numba'] if NumbaKernels is not None else [])


def get_kernels(name: Optional[str] = None):
  """Returns the kernels called `name`: 'numpy', 'numba' or 'auto'.

  Args:
    name: str or None. None reads the DOPAMINE_PER_SUM_TREE_KERNELS
      environment variable ('auto' when unset). 'auto' means Numba's kernels
      when Numba is installed, else NumPy's.

  Returns:
    `NumpyKernels` or `NumbaKernels`.

  Raises:
    ValueError: If `name` is unknown, or 'numba' without Numba installed.
  """
  if name is None:
    name = os.environ.get(KERNELS_ENV, 'auto')
  if name == 'auto':
    return NumbaKernels or NumpyKernels
  if name == 'numpy':
    return NumpyKernels
  if name == 'numba':
    if NumbaKernels is None:
      raise ValueError("Sum tree kernels 'numba' need Numba: "
                       "pip install 'dopamine_per[fast]'.")
    return NumbaKernels
  raise ValueError("Unknown sum tree kernels {!r}: use 'numpy', 'numba' or "
                   "'auto'.".format(name))
