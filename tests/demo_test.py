"""Tests for dopamine_per/demo.py, the demonstration run by scripts/demo.sh."""

import math
import os
import tempfile

from absl.testing import absltest
import numpy as np

from dopamine_per import demo


class RandomWalkCartPoleTest(absltest.TestCase):

  def _rollout(self, seed, steps):
    simulator = demo.RandomWalkCartPole(seed=seed)
    observations = [simulator.reset()]
    ends = []
    for _ in range(steps):
      observation, reward, terminal, cut_off = simulator.step(
          simulator.random_action())
      self.assertEqual(reward, 1.0)
      self.assertFalse(terminal and cut_off)
      ends.append((terminal, cut_off))
      observations.append(simulator.reset() if terminal or cut_off
                          else observation)
    return np.stack(observations), ends

  def test_same_seed_same_trajectory(self):
    first, first_ends = self._rollout(3, 500)
    second, second_ends = self._rollout(3, 500)
    np.testing.assert_array_equal(first, second)
    self.assertEqual(first_ends, second_ends)
    self.assertEqual(first.dtype, np.float32)
    self.assertEqual(first.shape[1:], (4,))

  def test_episodes_end_both_ways(self):
    _, ends = self._rollout(0, 5000)
    self.assertGreater(sum(terminal for terminal, _ in ends), 10)
    self.assertGreater(sum(cut_off for _, cut_off in ends), 10)


class ChiSquareCriticalValueTest(absltest.TestCase):

  def test_two_degrees_of_freedom_closed_form(self):
    # chi-square(2) is exponential with mean 2: P(X > x) = exp(-x / 2).
    self.assertAlmostEqual(demo.chi_square_critical_value(2, 1e-6),
                           -2.0 * math.log(1e-6), places=6)

  def test_four_degrees_of_freedom(self):
    x = demo.chi_square_critical_value(4, 0.05)
    self.assertAlmostEqual(x, 9.4877, places=3)  # the textbook table value

  def test_rejects_odd_degrees_of_freedom(self):
    with self.assertRaisesRegex(ValueError, 'positive and even'):
      demo.chi_square_critical_value(3, 0.05)


class SamplingTableTest(absltest.TestCase):

  def test_shares(self):
    priorities = {0: 1.0, 1: 1.0, 2: 2.0, 3: 4.0}
    sampled = np.array([0, 1, 2, 2, 3, 3, 3, 3])
    rows, chi_square = demo.sampling_table(priorities, sampled, 2)
    self.assertEqual([row[1] for row in rows], [2, 2])
    self.assertAlmostEqual(rows[0][3], 2.0 / 8.0)
    self.assertAlmostEqual(rows[0][4], 2.0 / 8.0)
    self.assertAlmostEqual(rows[1][3], 6.0 / 8.0)
    self.assertAlmostEqual(chi_square, 0.0)


class RunDemoTest(absltest.TestCase):

  def test_runs_and_writes_a_checkpoint(self):
    with tempfile.TemporaryDirectory() as base_dir:
      checkpoint_dir = demo.run_demo(base_dir, seed=1, num_samples=25_600)
      self.assertEqual(checkpoint_dir,
                       os.path.join(os.path.abspath(base_dir), 'checkpoints'))
      self.assertNotEmpty(os.listdir(checkpoint_dir))


if __name__ == '__main__':
  absltest.main()
