"""Tests for dopamine_per.replay_memory.transition_kernels.

The NumPy and Numba loops must agree with the rules spelled out slot by
slot: validity exactly, returns bit for bit with Dopamine's formula.
"""

import os
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory import sum_tree_kernels
from dopamine_per.replay_memory import transition_kernels
from tests.support import fixtures


def _rule(slot, capacity, add_count, horizon, stack, episode_end, terminal):
  """The validity rule of the module docstring, for one slot."""
  if not 0 <= slot < capacity:
    return False
  cursor = add_count % capacity
  if add_count >= capacity:
    near_cursor = {(cursor + k) % capacity for k in range(-horizon, stack)}
    if slot in near_cursor:
      return False
  elif not stack - 1 <= slot < cursor - horizon:
    return False
  if any(episode_end[(slot + k) % capacity] for k in range(1 - stack, 0)):
    return False
  for k in range(horizon):
    step = (slot + k) % capacity
    if terminal[step]:
      return True
    if episode_end[step]:
      return False
  return True


class ValidMaskTest(parameterized.TestCase):

  @parameterized.product(
      kernels=['numpy', 'numba'],
      shape=[(50, 4, 1), (50, 4, 3), (50, 1, 5), (23, 3, 2)],
      full=[False, True])
  def test_matches_the_rule(self, kernels, shape, full):
    capacity, stack, horizon = shape
    rng = np.random.default_rng(capacity * stack + horizon)
    for trial in range(30):
      add_count = int(rng.integers(capacity, 3 * capacity) if full else
                      rng.integers(0, capacity))
      episode_end = rng.random(capacity) < 0.15
      # Terminal slots end episodes; some episode ends are not terminal.
      terminal = (episode_end & (rng.random(capacity) < 0.5)).astype(
          [np.uint8, np.float32, np.bool_][trial % 3])
      indices = rng.integers(-3, capacity + 3, 40)
      got = transition_kernels.valid_mask(
          indices, capacity, add_count, horizon, stack, episode_end,
          terminal, kernels=kernels)
      expected = [_rule(int(i), capacity, add_count, horizon, stack,
                        episode_end, terminal) for i in indices]
      np.testing.assert_array_equal(got, expected)

  def test_empty_batch(self):
    for kernels in ('numpy', 'numba'):
      got = transition_kernels.valid_mask(
          np.zeros(0, np.int64), 10, 5, 1, 1, np.zeros(10, bool),
          np.zeros(10, np.uint8), kernels=kernels)
      self.assertEqual(got.shape, (0,))


def _trajectory(slot, capacity, terminal, rewards, discounts):
  """Dopamine's n-step trajectory of one slot: (next slot, cut, return)."""
  length = len(discounts)
  for k in range(len(discounts)):
    if terminal[(slot + k) % capacity]:
      length = k + 1
      break
  steps = [(slot + k) % capacity for k in range(length)]
  # Dopamine's product and sum (its discounts broadcast over reward axes).
  trailing = (1,) * (rewards.ndim - 1)
  value = np.sum(discounts[:length].reshape((length,) + trailing) *
                 rewards[steps], axis=0)
  return (slot + length) % capacity, length < len(discounts) or bool(
      terminal[steps[-1]]), value


class TrajectoriesTest(parameterized.TestCase):

  @parameterized.product(
      kernels=['numpy', 'numba'], horizon=[1, 3, 7, 8, 11],
      reward=[((), np.float32), ((), np.float64), ((2,), np.float32)])
  def test_matches_dopamines_formula(self, kernels, horizon, reward):
    reward_shape, reward_dtype = reward
    capacity = 60
    rng = np.random.default_rng(horizon)
    discounts = np.array([0.99**j for j in range(horizon)], np.float32)
    for _ in range(10):
      terminal = (rng.random(capacity) < 0.1).astype(np.uint8)
      # Twelve decades of both signs: a different summation order shows.
      rewards = (rng.standard_normal((capacity,) + reward_shape) *
                 10.0**rng.integers(-6, 6, (capacity,) + reward_shape)
                ).astype(reward_dtype)
      indices = rng.integers(0, capacity, 50)
      next_indices, is_terminal, returns = transition_kernels.trajectories(
          indices, capacity, terminal, rewards, discounts, kernels=kernels)
      self.assertEqual(returns.dtype, reward_dtype)
      self.assertEqual(returns.shape, (50,) + reward_shape)
      for b, slot in enumerate(indices):
        expected = _trajectory(int(slot), capacity, terminal, rewards,
                               discounts)
        self.assertEqual(next_indices[b], expected[0])
        self.assertEqual(is_terminal[b], expected[1])
        np.testing.assert_array_equal(returns[b], expected[2])


class MemoryKernelsTest(absltest.TestCase):
  """A memory with NumPy's loops and one with Numba's give the same batches."""

  def test_same_batches(self):
    memories = []
    for kernels in ('numpy', 'numba'):
      with mock.patch.dict(os.environ, {sum_tree_kernels.KERNELS_ENV: kernels}):
        memories.append(
            prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
                (5, 5), 4, 300, 32, update_horizon=3, gamma=0.9))
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (50, 5, 5), dtype=np.uint8)
    for t in range(1000):  # Wraps around the capacity three times.
      terminal = int(rng.random() < 0.05)
      episode_end = not terminal and rng.random() < 0.02
      reward = float(rng.standard_normal() * 10.0**rng.integers(-3, 4))
      for memory in memories:
        memory.add(frames[t % 50], t % 4, reward, terminal, None,
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
          np.testing.assert_array_equal(mine, other)

  def test_the_compiled_atari_path_follows_a_load(self):
    # The memory keeps its compiled Atari path, which holds the storage
    # arrays; a load replaces them, and the path must read the new ones.
    def memory():
      with mock.patch.dict(os.environ, {sum_tree_kernels.KERNELS_ENV: 'numba'}):
        return prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
            (6, 6), 4, 200, 16, update_horizon=3, gamma=0.9)

    rng = np.random.default_rng(1)
    saved, loaded = memory(), memory()
    for source, offset in ((saved, 0), (loaded, 7)):
      for t in range(150):
        source.add(np.full((6, 6), (t + offset) % 256, np.uint8), t % 3,
                   float(rng.random()), int(t % 40 == 39), None)
    checkpoint_dir = fixtures.temp_dir(self)
    saved.save(checkpoint_dir, 0)
    loaded.load(checkpoint_dir, 0)
    self.assertTrue(loaded._transitions_and_states.compiled)
    indices = np.flatnonzero(saved.is_valid_transition(np.arange(200)))[:16]
    for mine, other in zip(loaded.sample_transition_batch(indices=indices),
                           saved.sample_transition_batch(indices=indices)):
      np.testing.assert_array_equal(mine, other)


if __name__ == '__main__':
  absltest.main()
