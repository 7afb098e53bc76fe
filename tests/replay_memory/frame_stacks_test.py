"""Tests for dopamine_per.replay_memory.frame_stacks: every path, same bytes."""

import tracemalloc

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

  def test_many_sizes_keep_at_most_max_bytes(self):
    # Issue 12: the pool kept its last buffers whatever their size (3 x
    # 500k-state batches, then 750 MB with the sum tree's strata). Measured
    # with tracemalloc, which sees NumPy's data buffers.
    pool = frame_stacks.BufferPool(size=3, max_bytes=3 << 20)
    tracemalloc.start()
    self.addCleanup(tracemalloc.stop)
    start = tracemalloc.get_traced_memory()[0]
    for size in range(1 << 20, 5 << 20, 65536):  # 64 sizes of 1 to 5 MB.
      out = pool.empty((size,), np.uint8)
      self.assertEqual(out.ctypes.data % 64, 0)
      del out
      self.assertLessEqual(pool.held_bytes, 3 << 20)
    held = tracemalloc.get_traced_memory()[0] - start
    self.assertLessEqual(held, (3 << 20) + 65536)
    del pool
    self.assertLess(tracemalloc.get_traced_memory()[0] - start, 65536)

  def test_free_buffers_of_another_size_go_first(self):
    pool = frame_stacks.BufferPool(size=2, max_bytes=1 << 20)
    pool.empty((1000,), np.uint8)  # Dropped by the caller at once.
    held = pool.empty((2000,), np.uint8)
    pool.empty((3000,), np.uint8)  # Replaces the free 1000-byte buffer.
    self.assertEqual(pool.held_bytes, 2000 + 3000 + 2 * 64)
    also_held = pool.empty((4000,), np.uint8)  # Replaces the free one.
    self.assertEqual(pool.held_bytes, 2000 + 4000 + 2 * 64)
    pool.empty((5000,), np.uint8)  # All in use: replaces the newest.
    self.assertEqual(pool.held_bytes, 2000 + 5000 + 2 * 64)
    del held, also_held

  def test_outputs_over_the_budget_are_not_kept(self):
    pool = frame_stacks.BufferPool(size=3, max_bytes=1000)
    small = pool.empty((100,), np.uint8)
    large = pool.empty((2000,), np.uint8)
    self.assertEqual(large.shape, (2000,))
    self.assertEqual(pool.held_bytes, 100 + 64)
    del small, large


if __name__ == '__main__':
  absltest.main()
