"""Inputs of the kernel tests: trees laid out, random memory states.

The kernels take a tree as a flat float64 array of all levels and the
offsets where each level starts
(docs/architecture.md#the-sum-trees-flat-layout), and a memory's state as
its counters and per-slot arrays. The tests of compiled kernels compare
them with NumPy's (`assert_same`) on these inputs.
"""

from typing import Any, Tuple

from absl.testing import absltest
import numpy as np

from dopamine_per.replay_memory.kernels import numpy_kernels

_NUMPY = numpy_kernels.NumpyKernels()


def layout(capacity: int, fanout: int) -> Tuple[np.ndarray, np.ndarray]:
  """An all-zero tree of `capacity` leaves: (flat, offsets)."""
  sizes = [-(-capacity // fanout) * fanout]
  while sizes[-1] > fanout:
    sizes.append(-(-(sizes[-1] // fanout) // fanout) * fanout)
  offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
  return np.zeros(int(offsets[-1])), offsets


def memory_state(rng: np.random.Generator, capacity: int, full: bool,
                 terminal_dtype: Any) -> Tuple[int, np.ndarray, np.ndarray,
                                               np.ndarray]:
  """A random (add_count, episode_end, terminal, indices) to test.

  Some episode ends are not terminal (time limits); some indices are outside
  [0, capacity).
  """
  add_count = int(rng.integers(capacity, 3 * capacity) if full else
                  rng.integers(0, capacity))
  episode_end = rng.random(capacity) < 0.15
  terminal = (episode_end & (rng.random(capacity) < 0.5)).astype(
      terminal_dtype)
  return add_count, episode_end, terminal, rng.integers(-3, capacity + 3, 40)


def trajectory_inputs(rng: np.random.Generator, capacity: int,
                      reward_shape: Tuple[int, ...], reward_dtype: Any
                     ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Random (terminal, rewards, indices) for `trajectories`.

  The rewards span twelve decades of both signs, so that a different order
  of summation shows in the returns.
  """
  terminal = (rng.random(capacity) < 0.1).astype(np.uint8)
  rewards = (rng.standard_normal((capacity,) + reward_shape) *
             10.0**rng.integers(-6, 6, (capacity,) + reward_shape)
            ).astype(reward_dtype)
  return terminal, rewards, rng.integers(0, capacity, 50)


def priorities(rng: np.random.Generator, size: int) -> np.ndarray:
  """Twelve decades and zeros: a different order of sums would show."""
  return 10.0**rng.uniform(-6, 6, size) * (rng.random(size) < 0.8)


def filled(leaves: np.ndarray, fanout: int) -> Tuple[np.ndarray, np.ndarray]:
  """A tree over `leaves` (float64), its inner nodes computed."""
  flat, offsets = layout(len(leaves), fanout)
  flat[:len(leaves)] = leaves
  _NUMPY.update_parents(flat, offsets, fanout, np.arange(len(leaves)))
  return flat, offsets


def twin_trees(capacity: int, fanout: int, seed: int
              ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The same random tree twice (flat arrays), and its offsets."""
  flat, offsets = filled(
      priorities(np.random.default_rng(seed), capacity), fanout)
  return flat, flat.copy(), offsets


def assert_same(test: absltest.TestCase, mine: Any, theirs: Any) -> None:
  """Same values, dtypes and shapes (tuples element by element)."""
  if isinstance(theirs, tuple):
    test.assertIsInstance(mine, tuple)
    test.assertLen(mine, len(theirs))
    for a, b in zip(mine, theirs):
      assert_same(test, a, b)
    return
  if isinstance(theirs, np.ndarray):
    test.assertIsInstance(mine, np.ndarray)
    test.assertEqual(mine.dtype, theirs.dtype)
    test.assertEqual(mine.shape, theirs.shape)
  np.testing.assert_array_equal(mine, theirs)

