"""Tests for dopamine_per.replay_memory.kernels.numpy_kernels: the reference.

`NumpyKernels` is checked against its module docstring's rules, written out
slot by slot and leaf by leaf; native_kernels_test checks that the compiled
kernels give the same results.
"""

import random

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.replay_memory.kernels import numpy_kernels
from tests.support import kernel_cases

KERNELS = numpy_kernels.NumpyKernels()


def halving(values):
  """The pairwise sum of a power-of-two list, written out recursively."""
  if len(values) == 1:
    return values[0]
  half = len(values) // 2
  # Adjacent pairs first: the sum of each half is itself halving.
  return halving(values[:half]) + halving(values[half:])


def valid_rule(slot, capacity, add_count, horizon, stack, episode_end,
               terminal):
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


def dopamine_trajectory(slot, capacity, terminal, rewards, discounts):
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


def stacks_reference(frames, windows):
  """The plain definition: gather [batch, stack, ...], frames to the end."""
  return np.moveaxis(frames[windows], 1, -1)


class TreeTest(parameterized.TestCase):

  @parameterized.parameters(2, 4, 16, 32)
  def test_parents_are_halving_sums(self, fanout):
    rng = np.random.default_rng(fanout)
    capacity = fanout**3 + 3  # Four levels, the last row partly padding.
    leaves = 10.0**rng.uniform(-8, 8, capacity) * (rng.random(capacity) < .8)
    flat, offsets = kernel_cases.filled(leaves, fanout)
    for level in range(len(offsets) - 2):
      children = flat[offsets[level]:offsets[level + 1]].reshape(-1, fanout)
      parents = flat[offsets[level + 1]:offsets[level + 2]]
      for node, row in enumerate(children):
        self.assertEqual(parents[node], halving(row.tolist()))
      np.testing.assert_array_equal(parents[:len(children)],
                                    KERNELS.level_sums(children))
    top = flat[offsets[-2]:offsets[-1]]
    total = KERNELS.update_parents(flat, offsets, fanout, np.zeros(1, int))
    self.assertEqual(total, halving(top.tolist()))
    self.assertIsInstance(total, float)

  @parameterized.parameters(2, 16)
  def test_one_leaf_matches_a_batch_of_one(self, fanout):
    # update_leaf sums in Python floats, update_parents with NumPy.
    rng = np.random.default_rng(1)
    leaves = 10.0**rng.uniform(-8, 8, 600)
    batch, offsets = kernel_cases.filled(leaves, fanout)
    single = batch.copy()
    for leaf in rng.integers(0, 600, 50).tolist():
      value = float(10.0**rng.uniform(-8, 8))
      batch[leaf] = single[leaf] = value
      self.assertEqual(
          KERNELS.update_leaf(single, offsets, fanout, leaf),
          KERNELS.update_parents(batch, offsets, fanout, np.array([leaf])))
      np.testing.assert_array_equal(single, batch)

  def test_set_leaves_writes_and_refuses(self):
    flat, offsets = kernel_cases.layout(40, 4)
    leaves = np.array([3, 7, 3])
    result = KERNELS.set_leaves(flat, offsets, 4, 40, leaves,
                                np.array([2.0, 0.5, 4.0]), 0.25, 8.0)
    self.assertEqual(result, (4.5, 4.0))  # The last of repeated leaves wins.
    self.assertEqual((flat[3], flat[7]), (4.0, 0.5))
    expected = flat.copy()
    for bad_leaves, bad_values in (
        ([3, 40], [1.0, 1.0]), ([-1], [1.0]),       # Out of range.
        ([1], [-1.0]), ([1], [np.nan]), ([1], [np.inf]),
        ([1, 2], [1.0, 0.125]), ([1], [8.5])):      # Outside [0.25, 8].
      self.assertIsNone(KERNELS.set_leaves(
          flat, offsets, 4, 40, np.array(bad_leaves), np.array(bad_values),
          0.25, 8.0))
      np.testing.assert_array_equal(flat, expected)  # Nothing written.
    self.assertEqual(KERNELS.set_leaves(flat, offsets, 4, 40, np.array([3]),
                                        np.array([0.0]), 0.25, 8.0),
                     (0.5, 0.0))

  def test_get_leaves(self):
    leaves = np.arange(10.0)
    np.testing.assert_array_equal(
        KERNELS.get_leaves(leaves, np.array([9, 0, 9])), [9.0, 0.0, 9.0])
    self.assertEqual(KERNELS.get_leaves(leaves, np.zeros(0, int)).shape, (0,))
    for bad in ([10], [0, -1]):
      self.assertIsNone(KERNELS.get_leaves(leaves, np.array(bad)))

  @parameterized.parameters(2, 4, 16)
  def test_descend_matches_a_cumulative_sum(self, fanout):
    # Small integer priorities: every sum is exact, so the tree's answer is
    # the brute-force one: the first leaf whose running sum exceeds the
    # target, or past the total the last leaf with positive priority.
    rng = np.random.default_rng(fanout)
    leaves = rng.integers(0, 4, 300).astype(np.float64)
    leaves[-7:] = 0.0
    flat, offsets = kernel_cases.filled(leaves, fanout)
    running = np.cumsum(leaves)
    total = running[-1]
    targets = np.concatenate([np.arange(0.0, total, 0.5),
                              [total, total + 0.5, total * 2]])
    expected = np.searchsorted(running, targets, side='right')
    last = np.flatnonzero(leaves)[-1]
    expected[targets >= total] = last
    got = KERNELS.descend(flat, offsets, fanout, targets)
    self.assertEqual(got.dtype, np.int64)
    np.testing.assert_array_equal(got, expected)
    self.assertTrue(np.all(leaves[got] > 0))

  def test_descents_of_uniforms_and_of_words(self):
    flat, offsets = kernel_cases.filled(
        np.random.default_rng(0).random(1000), 16)
    lower, width = np.linspace(0, 1, 65)[:-1], np.full(64, 1 / 64)
    random.seed(3)
    words = random.getrandbits(64 * 64).to_bytes(8 * 64, 'little')
    random.seed(3)
    uniforms = np.array([random.random() for _ in range(64)])
    np.testing.assert_array_equal(numpy_kernels.uniforms_from_words(words),
                                  uniforms)
    scale = 123.0
    expected = KERNELS.descend(flat, offsets, 16,
                               (lower + width * uniforms) * scale)
    np.testing.assert_array_equal(
        KERNELS.descend_uniforms(flat, offsets, 16, uniforms, lower, width,
                                 scale), expected)
    np.testing.assert_array_equal(
        KERNELS.descend_draws(flat, offsets, 16, words, lower, width, scale),
        expected)
    self.assertEqual(len(numpy_kernels.uniforms_from_words(b'')), 0)


class ValidMaskTest(parameterized.TestCase):

  @parameterized.product(
      shape=[(50, 4, 1), (50, 4, 3), (50, 1, 5), (23, 3, 2)],
      full=[False, True])
  def test_matches_the_rule(self, shape, full):
    capacity, stack, horizon = shape
    rng = np.random.default_rng(capacity * stack + horizon)
    for trial in range(30):
      add_count, episode_end, terminal, indices = kernel_cases.memory_state(
          rng, capacity, full, [np.uint8, np.float32, np.bool_][trial % 3])
      got = KERNELS.valid_mask(indices, capacity, add_count, horizon, stack,
                               episode_end, terminal)
      expected = [valid_rule(int(i), capacity, add_count, horizon, stack,
                             episode_end, terminal) for i in indices]
      self.assertEqual(got.dtype, np.bool_)
      np.testing.assert_array_equal(got, expected)

  def test_empty_batch(self):
    got = KERNELS.valid_mask(np.zeros(0, np.int64), 10, 5, 1, 1,
                             np.zeros(10, bool), np.zeros(10, np.uint8))
    self.assertEqual(got.shape, (0,))


class TrajectoriesTest(parameterized.TestCase):

  @parameterized.product(
      horizon=[1, 3, 7, 8, 11],
      reward=[((), np.float32), ((), np.float64), ((2,), np.float32)])
  def test_matches_dopamines_formula(self, horizon, reward):
    reward_shape, reward_dtype = reward
    capacity = 60
    rng = np.random.default_rng(horizon)
    discounts = np.array([0.99**j for j in range(horizon)], np.float32)
    for _ in range(10):
      terminal, rewards, indices = kernel_cases.trajectory_inputs(
          rng, capacity, reward_shape, reward_dtype)
      next_indices, is_terminal, returns = KERNELS.trajectories(
          indices, capacity, terminal, rewards, discounts)
      self.assertEqual(returns.dtype, reward_dtype)
      self.assertEqual(returns.shape, (50,) + reward_shape)
      for b, slot in enumerate(indices):
        expected = dopamine_trajectory(int(slot), capacity, terminal,
                                       rewards, discounts)
        self.assertEqual(next_indices[b], expected[0])
        self.assertEqual(is_terminal[b], expected[1])
        np.testing.assert_array_equal(returns[b], expected[2])


class StacksTest(parameterized.TestCase):

  @parameterized.parameters(((84, 84), np.uint8, 4), ((3, 2), np.int16, 4),
                            ((5,), np.float32, 1), ((6,), np.bool_, 3))
  def test_gather_and_ending_at(self, shape, dtype, stack):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 200, (30,) + shape).astype(dtype)
    windows = rng.integers(0, 30, (9, stack))
    out = np.full((9,) + shape + (stack,), 171).astype(dtype)
    self.assertIs(KERNELS.gather_stacks(frames, windows, out), out)
    np.testing.assert_array_equal(out, stacks_reference(frames, windows))
    # Ending at a slot: the `stack` slots up to it, wrapping around.
    ends = np.array([0, 1, 29, 15])
    out = np.full((4,) + shape + (stack,), 171).astype(dtype)
    self.assertIs(KERNELS.stacks_ending_at(frames, ends, stack, out), out)
    windows = (ends[:, None] + np.arange(1 - stack, 1)) % 30
    np.testing.assert_array_equal(out, stacks_reference(frames, windows))

  def test_transition_batch(self):
    rng = np.random.default_rng(2)
    frames = rng.integers(0, 256, (40, 5, 5), dtype=np.uint8)
    terminal = (rng.random(40) < 0.2).astype(np.uint8)
    rewards = rng.standard_normal(40).astype(np.float32)
    discounts = np.array([1.0, 0.9, 0.81], np.float32)
    actions = rng.integers(0, 9, 40).astype(np.int32)
    priorities = rng.random(40)
    indices = rng.integers(0, 40, 12)
    states = np.zeros((24, 5, 5, 4), np.uint8)
    returns, indices_out = np.zeros(12, np.float32), np.zeros(12, np.int32)
    is_terminal = np.full(12, 7, np.int32)
    next_actions = np.zeros(12, np.int32)
    batch_priorities = np.zeros(12, np.float32)
    held = []

    class Lock(object):

      def __enter__(self):
        held.append(batch_priorities.any())

      def __exit__(self, *unused):
        held.append(batch_priorities.all())

    KERNELS.transition_batch(
        frames, 4, terminal, rewards, discounts, indices, states, returns,
        is_terminal, indices_out, {'action': actions, 'p': priorities},
        (('action', True, next_actions), ('p', False, batch_priorities)),
        Lock())
    next_indices, cut, sums = KERNELS.trajectories(indices, 40, terminal,
                                                   rewards, discounts)
    np.testing.assert_array_equal(returns, sums)
    np.testing.assert_array_equal(is_terminal, cut.astype(np.int32))
    np.testing.assert_array_equal(indices_out, indices)
    np.testing.assert_array_equal(next_actions, actions[next_indices])
    np.testing.assert_array_equal(batch_priorities,
                                  priorities[indices].astype(np.float32))
    self.assertEqual(held, [False, True])  # The rows, inside the lock.
    ends = np.concatenate([indices, next_indices])
    windows = (ends[:, None] + np.arange(-3, 1)) % 40
    np.testing.assert_array_equal(states, stacks_reference(frames, windows))


if __name__ == '__main__':
  absltest.main()
