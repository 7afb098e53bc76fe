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
* `NumbaKernels`: the same loops compiled with Numba (in `numba_loops`),
  (Numba, a requirement); several times faster on small and medium batches,
  where NumPy's per-call overhead dominates.

`get_kernels` returns the class for a choice made by `kernels.choose`, the
switch shared with the memory's loops.

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

import numpy as np

from dopamine_per.replay_memory import kernels

__all__ = ['NumpyKernels', 'NumbaKernels', 'get_kernels', 'available',
           'compiled']

# Before `kernels`, these chose the tree's kernels; kept for their callers.
KERNELS_ENV = kernels.ENV
available = kernels.available


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
  """Returns the class of compiled kernels, or None without Numba."""
  loops = kernels.numba_loops
  if loops is None:
    return None

  class NumbaKernels(object):
    """The sum tree's loops compiled with Numba (same arithmetic)."""

    name = 'numba'
    level_sums = staticmethod(NumpyKernels.level_sums)

    @staticmethod
    def set_leaves(flat, offsets, fanout, capacity, leaves, values,
                   smallest, largest):
      """Checks, writes and propagates a batch of leaves in one call.

      Args:
        flat: float64 array of all levels.
        offsets: int64 level offsets.
        fanout: int, children per node.
        capacity: int, leaves must lie in [0, capacity).
        leaves: int64 array of leaf indices.
        values: float64 array of the same length.
        smallest: float, the smallest positive value accepted.
        largest: float, the largest value accepted.

      Returns:
        (total, largest value) after the write; None, with nothing written,
        if an index is out of range or a value is neither 0 nor in
        [smallest, largest] (negative, NaN, infinite, too small or large).
      """
      ok, total, top = loops.set_leaves(flat, offsets, fanout, capacity,
                                        leaves, values, smallest, largest)
      return (total, top) if ok else None

    @staticmethod
    def update_parents(flat, offsets, fanout, leaves):
      return float(loops.update_parents(
          flat, offsets, fanout, leaves.astype(np.int64, copy=False)))

    @staticmethod
    def get_leaves(leaves, indices):
      """Returns leaves[indices] (float64), or None if one is out of range.

      Args:
        leaves: float64 array of the `capacity` leaves.
        indices: 1-D signed integer array.
      """
      ok, values = loops.get_leaves(leaves, indices)
      return values if ok else None

    update_leaf = staticmethod(loops.update_one_leaf)  # Returns a Python float.

    @staticmethod
    def descend(flat, offsets, fanout, targets):
      return loops.descend(flat, offsets, fanout,
                           np.ascontiguousarray(targets, dtype=np.float64))

    descend_uniforms = staticmethod(loops.uniforms_and_descend)
    descend_draws = staticmethod(loops.draws_and_descend)

  return NumbaKernels


NumbaKernels = _build_numba_kernels()


def get_kernels(choice: kernels.KernelsLike = None):
  """Returns the sum tree's loops for a choice of kernels.

  Args:
    choice: a `kernels.Kernels`, 'numpy', 'numba', 'auto' or None (the
      environment's choice); see `kernels.choose`.

  Returns:
    `NumpyKernels` or `NumbaKernels`.

  Raises:
    ValueError: If `choice` is unknown, or 'numba' without Numba installed.
  """
  return NumbaKernels if kernels.choose(choice).compiled else NumpyKernels


def compiled(choice: kernels.KernelsLike = None) -> bool:
  """`kernels.choose(choice).compiled`: whether Numba's loops run."""
  return kernels.choose(choice).compiled
