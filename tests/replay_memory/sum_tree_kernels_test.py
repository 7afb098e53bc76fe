"""Tests for dopamine_per.replay_memory.sum_tree_kernels.

The NumPy and Numba kernels must agree bit for bit: same tree after the same
updates, same leaves for the same targets.
"""

import os
import random
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.replay_memory import kernels
from dopamine_per.replay_memory import numba_loops
from dopamine_per.replay_memory import sum_tree
from dopamine_per.replay_memory import sum_tree_kernels


def _trees(capacity):
  return (sum_tree.SumTree(capacity, kernels='numpy'),
          sum_tree.SumTree(capacity, kernels='numba'))


class KernelEquivalenceTest(parameterized.TestCase):

  @parameterized.parameters(1, 32, 33, 1000, 2**15 + 5)
  def test_same_tree_and_samples(self, capacity):
    rng = np.random.default_rng(capacity)
    ours, theirs = _trees(capacity)
    for step in range(60):
      size = int(rng.integers(1, 300))
      indices = rng.integers(0, capacity, size)
      # Twelve decades and zeros: rounding differences would show.
      values = 10.0 ** rng.uniform(-6, 6, size) * (rng.random(size) < 0.8)
      if step % 3 == 0:
        index, value = int(indices[0]), float(values[0])
        ours.set(index, value)
        theirs.set(index, value)
      else:
        ours.set(indices, values)
        theirs.set(indices, values)
      np.testing.assert_array_equal(ours._flat, theirs._flat)
      self.assertEqual(ours.total_priority(), theirs.total_priority())
      if ours.total_priority() > 0:
        total = ours.total_priority()
        targets = np.concatenate([rng.random(200) * total, [0.0, total],
                                  [np.nextafter(total, 0.0)]])
        np.testing.assert_array_equal(ours.query(targets),
                                      theirs.query(targets))
        # The fused draw-and-descend paths, from the same `random` words.
        batch = int(rng.integers(1, 300))
        draws = []
        for tree in (ours, theirs):
          random.seed(step)
          draws.append((tree.stratified_sample(batch),
                        tree.sample_batch(batch)))
        for mine, other in zip(*draws):
          np.testing.assert_array_equal(mine, other)
    ours.check_invariants()
    theirs.check_invariants()

  def test_same_samples_from_a_generator(self):
    rng = np.random.default_rng(5)
    priorities = 10.0 ** rng.uniform(-6, 6, 5000) * (rng.random(5000) < 0.8)
    draws = []
    for kernels in ('numpy', 'numba'):
      tree = sum_tree.SumTree(5000, rng=np.random.default_rng(9),
                              kernels=kernels)
      tree.set(np.arange(5000), priorities)
      draws.append([tree.stratified_sample(b) for b in (1, 32, 300)] +
                   [tree.sample_batch(b) for b in (0, 7, 500)])
    for mine, other in zip(*draws):
      np.testing.assert_array_equal(mine, other)

  def test_rebuild_matches_incremental_updates(self):
    rng = np.random.default_rng(0)
    for tree in _trees(5000):
      tree.set(rng.integers(0, 5000, 20000), rng.random(20000))
      incremental = tree._flat.copy()
      tree._rebuild()
      np.testing.assert_array_equal(tree._flat, incremental)

  @parameterized.parameters(np.float32, np.float64)
  def test_same_values_refused(self, priority_dtype):
    # Issue 12: the compiled check-and-write and the NumPy path accept and
    # refuse the same values (range of priority_dtype, total overflow).
    rng = np.random.default_rng(3)
    info = np.finfo(priority_dtype)
    edges = [0.0, -0.0, float(info.smallest_subnormal), float(info.max),
             float(info.smallest_subnormal) / 4, float(info.max) * 1.5,
             1e308, 2.0**1022, 5e-324, -5e-324, np.inf, np.nan, 1.0, 3.5]
    trees = [sum_tree.SumTree(40, kernels=k, priority_dtype=priority_dtype)
             for k in ('numpy', 'numba')]
    for _ in range(300):
      size = int(rng.integers(1, 5))
      indices = rng.integers(0, 40, size)
      values = rng.choice(edges, size)
      outcomes = []
      for tree in trees:
        try:
          tree.set(indices, values)
          outcomes.append(None)
        except ValueError as e:
          outcomes.append(str(e))
      self.assertEqual(outcomes[0], outcomes[1])
      np.testing.assert_array_equal(trees[0]._flat, trees[1]._flat)
      self.assertEqual(trees[0].max_recorded_priority,
                       trees[1].max_recorded_priority)
    for tree in trees:
      tree.check_invariants()
      self.assertTrue(np.isfinite(tree.total_priority()))

  def test_scalar_row_sum_matches_level_sums(self):
    row = 10.0 ** np.random.default_rng(1).uniform(-8, 8, sum_tree.FANOUT)
    self.assertEqual(sum_tree._row_sum(row.tolist()),
                     sum_tree_kernels.NumpyKernels.level_sums(row))


class PrefetchTest(absltest.TestCase):

  def test_falls_back_to_a_no_op(self):
    import numba  # pylint: disable=g-import-not-at-top

    def failing_probe(array):
      raise numba.core.errors.LoweringError('no prefetch here')

    prefetch = numba_loops._choose_prefetch(probe=failing_probe)  # pylint: disable=protected-access
    self.assertIs(prefetch, numba_loops._no_prefetch)  # pylint: disable=protected-access

    @numba.njit
    def first(array):
      prefetch(array, 0)
      return array[0]

    self.assertEqual(first(np.full(3, 7.0)), 7.0)


class GetKernelsTest(absltest.TestCase):

  def test_names(self):
    self.assertIs(sum_tree_kernels.get_kernels('numpy'),
                  sum_tree_kernels.NumpyKernels)
    self.assertIs(sum_tree_kernels.get_kernels('numba'),
                  sum_tree_kernels.NumbaKernels)
    self.assertIs(sum_tree_kernels.get_kernels('auto'),
                  sum_tree_kernels.NumbaKernels)
    self.assertEqual(sum_tree_kernels.available(), ['numpy', 'numba'])

  def test_environment_variable(self):
    with mock.patch.dict(os.environ,
                         {sum_tree_kernels.KERNELS_ENV: 'numpy'}):
      self.assertEqual(sum_tree.SumTree(4)._kernels.name, 'numpy')
    with mock.patch.dict(os.environ,
                         {sum_tree_kernels.KERNELS_ENV: 'fortran'}):
      with self.assertRaisesRegex(ValueError, "Unknown.*'fortran'"):
        sum_tree.SumTree(4)

  def test_missing_numba_is_a_clear_error(self):
    # Whether Numba is installed is `kernels`' to know (its numba_loops).
    with mock.patch.object(kernels, 'numba_loops', None):
      with self.assertRaisesRegex(ValueError, r'dopamine_per\[fast\]'):
        sum_tree_kernels.get_kernels('numba')
      self.assertIs(sum_tree_kernels.get_kernels('auto'),
                    sum_tree_kernels.NumpyKernels)


if __name__ == '__main__':
  absltest.main()
