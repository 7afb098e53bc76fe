"""Tests for dopamine_per.replay_memory.frame_stacks: every path, same bytes."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.replay_memory import frame_stacks


def _reference(frames, windows):
  """The plain definition: gather [batch, stack, ...], frames to the end."""
  return np.moveaxis(frames[windows], 1, -1)


class GatherStacksTest(parameterized.TestCase):

  @parameterized.product(
      kernels=['numpy', 'numba'],
      case=[((84, 84), np.uint8, 4),     # Atari: the packed 4 x 8-bit path.
            ((84, 84), np.uint8, 3),     # Generic path.
            ((4,), np.float32, 1),
            ((3, 2), np.int16, 4),       # 4 frames, but 2 bytes each.
            ((5,), np.bool_, 2)])
  def test_matches_reference(self, kernels, case):
    shape, dtype, stack = case
    rng = np.random.default_rng(0)
    frames = (rng.integers(0, 200, (50,) + shape)).astype(dtype)
    windows = rng.integers(0, 50, (17, stack))
    out = frame_stacks.gather_stacks(frames, windows, kernels=kernels)
    np.testing.assert_array_equal(out, _reference(frames, windows))
    self.assertEqual(out.shape, (17,) + shape + (stack,))
    self.assertEqual(out.dtype, dtype)
    self.assertTrue(out.flags.c_contiguous)
    self.assertEqual(out.ctypes.data % 64, 0)

  @parameterized.parameters('numpy', 'numba')
  def test_empty_batch(self, kernels):
    frames = np.zeros((10, 84, 84), np.uint8)
    out = frame_stacks.gather_stacks(frames, np.zeros((0, 4), np.int64),
                                     kernels=kernels)
    self.assertEqual(out.shape, (0, 84, 84, 4))


if __name__ == '__main__':
  absltest.main()
