"""Tests for dopamine_per.replay_memory.transition_kernels.

The NumPy and Numba validity checks must agree on every slot, and agree
with the rule spelled out slot by slot.
"""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.replay_memory import transition_kernels


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


if __name__ == '__main__':
  absltest.main()
