"""Statistical helpers shared by the sampling tests.

No SciPy: the chi-square quantile uses the Wilson-Hilferty approximation,
which errs high in the far tail, so the stated false failure rate is an
upper bound.
"""

import statistics

import numpy as np

__all__ = ['chi_square_statistic', 'chi_square_threshold',
           'assert_matches_distribution']

# Probability that a correct sampler fails one of these tests.
FALSE_FAILURE_RATE = 1e-6


def chi_square_threshold(degrees_of_freedom: int,
                         false_failure_rate: float = FALSE_FAILURE_RATE
                        ) -> float:
  """The (1 - false_failure_rate) quantile of chi-square(degrees_of_freedom)."""
  z = statistics.NormalDist().inv_cdf(1.0 - false_failure_rate)
  k = float(degrees_of_freedom)
  return k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)) ** 0.5) ** 3


def chi_square_statistic(counts: np.ndarray, probabilities: np.ndarray
                        ) -> float:
  """Pearson's statistic of `counts` against `probabilities` (positive)."""
  counts = np.asarray(counts, dtype=np.float64)
  expected = counts.sum() * np.asarray(probabilities, dtype=np.float64)
  return float(np.sum((counts - expected) ** 2 / expected))


def assert_matches_distribution(test_case, samples: np.ndarray,
                                weights: np.ndarray) -> None:
  """Chi-square test, at FALSE_FAILURE_RATE, that `samples` follow `weights`.

  Args:
    test_case: the unittest.TestCase reporting the failure.
    samples: int array of drawn outcomes in [0, len(weights)).
    weights: nonnegative weights; outcomes of weight zero must never appear.
  """
  weights = np.asarray(weights, dtype=np.float64)
  counts = np.bincount(samples, minlength=len(weights))
  test_case.assertEqual(len(counts), len(weights), 'outcome out of range')
  support = weights > 0
  test_case.assertEqual(int(counts[~support].sum()), 0,
                        'sampled an outcome of weight zero')
  probabilities = weights[support] / weights[support].sum()
  statistic = chi_square_statistic(counts[support], probabilities)
  threshold = chi_square_threshold(int(support.sum()) - 1)
  test_case.assertLess(
      statistic, threshold,
      'chi-square {:.1f} >= {:.1f} (p={})'.format(statistic, threshold,
                                                  FALSE_FAILURE_RATE))
