"""Smoke tests for benchmarks/sum_tree_benchmark.py, so that it keeps running.

They check that the textbook tree the benchmark compares against agrees with
dopamine_per's SumTree, and run the whole benchmark on a small tree.
"""

from absl.testing import absltest
import numpy as np

from benchmarks import sum_tree_benchmark
from dopamine_per.replay_memory import sum_tree


class NaiveSumTreeTest(absltest.TestCase):

  def test_agrees_with_sum_tree(self):
    rng = np.random.default_rng(0)
    capacity = 100
    naive = sum_tree_benchmark.NaiveSumTree(capacity, rng)
    ours = sum_tree.SumTree(capacity, rng=np.random.default_rng(1))
    for _ in range(20):
      indices = rng.choice(capacity, size=10, replace=False)
      values = rng.integers(0, 5, size=10).astype(np.float64)
      naive.set(indices, values)
      ours.set(indices, values)
      np.testing.assert_array_equal(naive.get(indices), ours.get(indices))
      self.assertEqual(naive.levels[0][0], ours.total_priority())
      self.assertEqual(sum_tree_benchmark.check_same_queries(ours, naive, rng),
                       0)

  def test_stratified_sample_one_per_stratum(self):
    naive = sum_tree_benchmark.NaiveSumTree(8, np.random.default_rng(0))
    naive.fill(np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]))
    np.testing.assert_array_equal(naive.stratified_sample(4), [0, 2, 4, 6])


class RunBenchmarkTest(absltest.TestCase):

  def test_small_run(self):
    results = sum_tree_benchmark.run_benchmark(
        capacity=2**10, batch_sizes=[4, 256], rounds=2, burst_seconds=1e-4,
        seed=0)
    implementations = {key[2] for key in results if isinstance(key, tuple)}
    self.assertContainsSubset({'ours-numpy', 'ours-numba', 'naive'},
                              implementations)
    self.assertEqual(results['query_mismatches'], 0)
    report = sum_tree_benchmark.format_results(
        results, 2**10, [4, 256], 2, sum_tree_benchmark.describe_machine())
    for operation in sum_tree_benchmark.OPERATIONS:
      self.assertIn(f'| {operation} | 256 |', report)
    self.assertIn('Required: at least 20x over naive at batch 256; '
                  'ours-numba: set', report)
    self.assertIn('- CPU: ', report)


if __name__ == '__main__':
  absltest.main()
