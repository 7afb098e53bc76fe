"""Trees and memories on compiled kernels against NumPy's, bit for bit.

The tests every compiled kernels set must pass: `SumTreeEquivalence` (a
tree on `KERNELS` and one on NumPy's hold the same nodes, draw the same
samples and refuse the same values) and `MemoryEquivalence` (two Atari
memories give the same batches and trees). native_kernels_test subclasses
them with its `KERNELS`; here they are not collected (test modules import
this module, not the classes).
"""

import random

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory import sum_tree
from tests.support import kernel_cases

__all__ = ['MemoryEquivalence', 'SumTreeEquivalence']


class SumTreeEquivalence(parameterized.TestCase):
  """Trees on NumPy's and `KERNELS`: same nodes, samples and refusals."""

  KERNELS = None  # The compiled kernels' name, set by subclasses.

  def _trees(self, capacity, **kwargs):
    trees = (sum_tree.SumTree(capacity, kernels='numpy', **kwargs),
             sum_tree.SumTree(capacity, kernels=self.KERNELS, **kwargs))
    self.assertEqual([tree._kernels.name for tree in trees],  # pylint: disable=protected-access
                     ['numpy', self.KERNELS])
    return trees

  @parameterized.parameters(1, 32, 33, 1000, 2**15 + 5)
  def test_same_tree_and_samples(self, capacity):
    rng = np.random.default_rng(capacity)
    ours, theirs = self._trees(capacity)
    for step in range(60):
      size = int(rng.integers(1, 300))
      indices = rng.integers(0, capacity, size)
      values = kernel_cases.priorities(rng, size)
      if step % 3 == 0:
        index, value = int(indices[0]), float(values[0])
        ours.set(index, value)
        theirs.set(index, value)
      else:
        if step % 3 == 2:
          indices = indices.astype(np.int32)  # TensorFlow's.
        ours.set(indices, values)
        theirs.set(indices, values)
      np.testing.assert_array_equal(ours._flat, theirs._flat)  # pylint: disable=protected-access
      self.assertEqual(ours.total_priority(), theirs.total_priority())
      np.testing.assert_array_equal(ours.get(indices), theirs.get(indices))
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
    priorities = kernel_cases.priorities(rng, 5000)
    draws = []
    for kernels in ('numpy', self.KERNELS):
      tree = sum_tree.SumTree(5000, rng=np.random.default_rng(9),
                              kernels=kernels)
      tree.set(np.arange(5000), priorities)
      draws.append([tree.stratified_sample(b) for b in (1, 32, 300)] +
                   [tree.sample_batch(b) for b in (0, 7, 500)])
    for mine, other in zip(*draws):
      np.testing.assert_array_equal(mine, other)

  def test_rebuild_matches_incremental_updates(self):
    rng = np.random.default_rng(0)
    for tree in self._trees(5000):
      tree.set(rng.integers(0, 5000, 20000), rng.random(20000))
      incremental = tree._flat.copy()  # pylint: disable=protected-access
      tree._rebuild()  # pylint: disable=protected-access
      np.testing.assert_array_equal(tree._flat, incremental)  # pylint: disable=protected-access

  @parameterized.parameters(np.float32, np.float64)
  def test_same_values_refused(self, priority_dtype):
    # Issue 12: the compiled check-and-write and the NumPy path accept and
    # refuse the same values (range of priority_dtype, total overflow).
    rng = np.random.default_rng(3)
    info = np.finfo(priority_dtype)
    edges = [0.0, -0.0, float(info.smallest_subnormal), float(info.max),
             float(info.smallest_subnormal) / 4, float(info.max) * 1.5,
             1e308, 2.0**1022, 5e-324, -5e-324, np.inf, np.nan, 1.0, 3.5]
    trees = self._trees(40, priority_dtype=priority_dtype)
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
      np.testing.assert_array_equal(trees[0]._flat, trees[1]._flat)  # pylint: disable=protected-access
      self.assertEqual(trees[0].max_recorded_priority,
                       trees[1].max_recorded_priority)
    for tree in trees:
      tree.check_invariants()
      self.assertTrue(np.isfinite(tree.total_priority()))


def memory(kernels, **kwargs):
  """A prioritized memory on `kernels` (3-step returns, gamma 0.9)."""
  return prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
      update_horizon=3, gamma=0.9, kernels=kernels, **kwargs)


class MemoryEquivalence(absltest.TestCase):
  """Memories on NumPy's and on `KERNELS`' loops: the same batches."""

  KERNELS = None  # The compiled kernels' name, set by subclasses.

  def test_same_batches(self):
    memories = [memory(kernels, observation_shape=(84, 84), stack_size=4,
                       replay_capacity=300, batch_size=32)
                for kernels in ('numpy', self.KERNELS)]
    self.assertEqual([m._kernels.name for m in memories],  # pylint: disable=protected-access
                     ['numpy', self.KERNELS])
    names = [e.name for e in memories[0].get_transition_elements()]
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (50, 84, 84), dtype=np.uint8)
    for t in range(1000):  # Wraps around the capacity three times.
      terminal = int(rng.random() < 0.05)
      episode_end = not terminal and rng.random() < 0.02
      reward = float(rng.standard_normal() * 10.0**rng.integers(-3, 4))
      for memory_ in memories:
        memory_.add(frames[t % 50], t % 4, reward, terminal, None,
                    episode_end=episode_end)
      if t % 97 == 96:
        slots = np.arange(300)
        valid = memories[0].is_valid_transition(slots)
        np.testing.assert_array_equal(
            valid, memories[1].is_valid_transition(slots))
        indices = rng.choice(np.flatnonzero(valid), 40)
        batches = [m.sample_transition_batch(indices=indices)
                   for m in memories]
        for mine, other in zip(*batches):
          kernel_cases.assert_same(self, mine, other)
        states = [m.get_observation_stack(indices) for m in memories]
        kernel_cases.assert_same(self, *states)
        # Sampled batches, from the same draws; new priorities, as
        # TensorFlow's int32 indices.
        sampled = []
        for memory_ in memories:
          random.seed(t)
          np.random.seed(t)
          sampled.append(memory_.sample_transition_batch())
        for mine, other in zip(*sampled):
          kernel_cases.assert_same(self, mine, other)
        priorities = rng.random(32).astype(np.float32)
        for memory_ in memories:
          memory_.set_priority(sampled[0][names.index('indices')],
                               priorities)
        np.testing.assert_array_equal(memories[0].sum_tree._flat,  # pylint: disable=protected-access
                                      memories[1].sum_tree._flat)  # pylint: disable=protected-access
