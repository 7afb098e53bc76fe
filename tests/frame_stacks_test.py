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
    # Output memory full of garbage, so that an unwritten row shows.
    pool = frame_stacks.BufferPool(size=1)
    pool.empty((17,) + shape + (stack,), dtype).fill(171)
    out = frame_stacks.gather_stacks(frames, windows, kernels=kernels,
                                     pool=pool)
    np.testing.assert_array_equal(out, _reference(frames, windows))
    self.assertEqual(out.shape, (17,) + shape + (stack,))
    self.assertEqual(out.dtype, dtype)
    self.assertTrue(out.flags.c_contiguous)
    self.assertEqual(out.ctypes.data % 64, 0)

  @parameterized.product(
      kernels=['numpy', 'numba'],
      case=[((84, 84), np.uint8, 4), ((6,), np.uint8, 3),
            ((3, 2), np.float32, 4)])
  def test_ending_at_wraps_around(self, kernels, case):
    shape, dtype, stack = case
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 200, (30,) + shape).astype(dtype)
    ends = np.concatenate([[0, 1, 29], rng.integers(0, 30, 14)])
    windows = (ends[:, None] + np.arange(1 - stack, 1)) % 30
    out = frame_stacks.gather_stacks_ending_at(frames, ends, stack,
                                               kernels=kernels)
    np.testing.assert_array_equal(out, _reference(frames, windows))
    self.assertEqual(out.ctypes.data % 64, 0)

  @parameterized.parameters('numpy', 'numba')
  def test_empty_batch(self, kernels):
    frames = np.zeros((10, 84, 84), np.uint8)
    out = frame_stacks.gather_stacks(frames, np.zeros((0, 4), np.int64),
                                     kernels=kernels)
    self.assertEqual(out.shape, (0, 84, 84, 4))


class BufferPoolTest(absltest.TestCase):

  def test_memory_is_reused_only_once_released(self):
    pool = frame_stacks.BufferPool(size=2)
    first = pool.empty((3, 5), np.float32)
    self.assertEqual(first.ctypes.data % 64, 0)
    address = first.ctypes.data
    view = first[1:]
    del first
    second = pool.empty((3, 5), np.float32)  # `view` still holds the first.
    self.assertNotEqual(second.ctypes.data, address)
    del view
    third = pool.empty((3, 5), np.float32)
    self.assertEqual(third.ctypes.data, address)
    self.assertEqual(third.shape, (3, 5))
    self.assertEqual(third.dtype, np.float32)

  def test_full_pool_still_gives_distinct_memory(self):
    pool = frame_stacks.BufferPool(size=1)
    held = [pool.empty((4,), np.int64) for _ in range(3)]
    self.assertLen({a.ctypes.data for a in held}, 3)

  def test_gathered_batches_stay_intact(self):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (40, 84, 84), dtype=np.uint8)
    pool = frame_stacks.BufferPool()
    kept = []
    for _ in range(6):
      windows = rng.integers(0, 40, (8, 4))
      kept.append((windows, frame_stacks.gather_stacks(frames, windows,
                                                       pool=pool)))
      frame_stacks.gather_stacks(frames, windows, pool=pool)  # Dropped.
    for windows, out in kept:
      np.testing.assert_array_equal(out, _reference(frames, windows))


if __name__ == '__main__':
  absltest.main()
