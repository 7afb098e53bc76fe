"""Smoke tests for benchmarks/sum_tree_benchmark.py, on small trees.

The trees it compares must agree with dopamine_per's SumTree.
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
    naive.load(np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]))
    np.testing.assert_array_equal(naive.stratified_sample(4), [0, 2, 4, 6])


class PeerAdapterTest(absltest.TestCase):
  """The peers' adapters hold and sample the priorities they are given."""

  def _check(self, tree):
    tree.load(np.ones(64))
    tree.set(np.array([40]), np.array([1000.0]))
    samples = np.asarray(tree.stratified_sample(32))
    # Slot 40 holds [40, 1040) of a total of 1063: strata 2 to 30 of 32 lie
    # inside it, so a stratified sampler draws it at least 29 times.
    self.assertGreaterEqual(int(np.sum(samples == 40)), 29)
    self.assertTrue(np.all((samples >= 0) & (samples < 64)))

  def test_dopamine(self):
    tree = sum_tree_benchmark.DopamineSumTreeAdapter(64)
    self._check(tree)
    np.testing.assert_array_equal(tree.get(np.array([3, 40])), [1.0, 1000.0])

  def test_cpprb(self):
    self._check(sum_tree_benchmark.CpprbSumTreeAdapter(64))


class RunBenchmarkTest(absltest.TestCase):

  def test_small_run(self):
    capacities, batch_sizes = [2**8, 2**10], [32, 256]
    results = sum_tree_benchmark.run_benchmark(
        capacities, batch_sizes, rounds=4, burst_seconds=1e-4, seed=0,
        pool_size=8, slow_case_seconds=0.0)
    implementations = {key[3] for key in results if isinstance(key, tuple)}
    self.assertEqual(set(sum_tree_benchmark.default_implementations()),
                     implementations)
    self.assertContainsSubset({'ours-native', 'ours-numpy', 'naive'},
                              implementations)
    self.assertEqual(results['query_mismatches'], 0)
    # `fill` is timed once per capacity, with the capacity as its batch.
    self.assertIn(('fill', 2**10, 2**10, 'naive'), results)
    self.assertNotIn(('fill', 2**10, 256, 'naive'), results)
    # Slow cases stop after 3 rounds; none has fewer.
    self.assertEqual(min(results['rounds'].values()), 3)
    report = sum_tree_benchmark.format_section(results, 4)
    self.assertTrue(report.startswith('## Sum tree\n'))
    for operation in sum_tree_benchmark.OPERATIONS:
      self.assertIn(f'| {operation} | 2**10 |', report)
    self.assertIn('Targets at capacity 2**10 (the issues set them at 2**20)',
                  report)
    self.assertRegex(report, r'\| issue 2: 20x naive \| set, batch 256 \| '
                     r'20x \| [0-9.]+x \((met|NOT met)\) \|')
    if 'dopamine' in implementations:
      self.assertIn('| issue 3: 20x Dopamine TF | stratified_sample, batch '
                    '32 |', report)
    document = sum_tree_benchmark.format_results(
        results, 4, sum_tree_benchmark.describe_machine())
    self.assertIn('- CPU: ', document)
    self.assertIn('- memory: ', document)


if __name__ == '__main__':
  absltest.main()
