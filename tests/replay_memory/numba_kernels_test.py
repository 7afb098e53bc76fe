"""Tests for dopamine_per.replay_memory.numba_kernels: NumPy's, compiled.

`NumbaKernels` must give `NumpyKernels`' results bit for bit, method by
method: on the inputs its loops compile for (checked to be compiled) and on
those it hands back to NumPy's (returns longer than 8 steps, rewards that
are not float32 scalars, frames that are not plain C-contiguous arrays).
A sum tree and a memory on either kernels then hold the same trees and give
the same batches. numpy_kernels_test checks NumPy's against the rules.
"""

import random

from absl.testing import absltest
from absl.testing import parameterized
import numba
import numpy as np

from dopamine_per.replay_memory import numba_kernels
from dopamine_per.replay_memory import numpy_kernels
from tests.support import fixtures
from tests.support import kernel_cases
from tests.support import kernel_equivalence

NUMPY = numpy_kernels.NumpyKernels()
NUMBA = numba_kernels.NumbaKernels()


_FANOUTS = (2, 4, 16, 32)  # 16 has its own unrolled loops.


class TreeKernelsTest(parameterized.TestCase):

  @parameterized.parameters(*_FANOUTS)
  def test_update_parents(self, fanout):
    ours, theirs, offsets = kernel_cases.twin_trees(fanout**3 + 5, fanout,
                                                    fanout)
    np.testing.assert_array_equal(ours, theirs)
    rng = np.random.default_rng(1)
    for step in range(40):
      size = int(rng.integers(1, 300))
      leaves = rng.integers(0, fanout**3 + 5, size)  # With repeats.
      values = kernel_cases.priorities(rng, size)
      ours[leaves] = theirs[leaves] = values
      if step % 2:
        leaves = leaves.astype(np.int32)
      self.assertEqual(NUMBA.update_parents(ours, offsets, fanout, leaves),
                       NUMPY.update_parents(theirs, offsets, fanout, leaves))
      np.testing.assert_array_equal(ours, theirs)

  @parameterized.parameters(*_FANOUTS)
  def test_update_leaf(self, fanout):
    ours, theirs, offsets = kernel_cases.twin_trees(1000, fanout, 2)
    rng = np.random.default_rng(2)
    for leaf in rng.integers(0, 1000, 100).tolist():
      ours[leaf] = theirs[leaf] = float(kernel_cases.priorities(rng, 1)[0])
      total = NUMBA.update_leaf(ours, offsets, fanout, leaf)
      self.assertEqual(total, NUMPY.update_leaf(theirs, offsets, fanout,
                                                leaf))
      np.testing.assert_array_equal(ours, theirs)

  @parameterized.parameters(4, 16)
  def test_set_leaves(self, fanout):
    ours, theirs, offsets = kernel_cases.twin_trees(40, fanout, 3)
    rng = np.random.default_rng(3)
    smallest, largest = 2.0**-149, 3.4e38
    edges = [0.0, -0.0, smallest, largest, smallest / 4, largest * 2,
             5e-324, -5e-324, -1.0, np.inf, -np.inf, np.nan, 1.0, 3.5]
    outcomes = set()
    for _ in range(300):
      size = int(rng.integers(1, 5))
      leaves = rng.integers(-1, 41, size)  # Sometimes out of range.
      values = np.array(rng.choice(edges, size), np.float64)
      mine = NUMBA.set_leaves(ours, offsets, fanout, 40, leaves, values,
                              smallest, largest)
      other = NUMPY.set_leaves(theirs, offsets, fanout, 40, leaves, values,
                               smallest, largest)
      self.assertEqual(mine, other, (leaves, values))
      outcomes.add(mine is None)
      np.testing.assert_array_equal(ours, theirs)
    self.assertEqual(outcomes, {True, False})  # Both were exercised.

  def test_get_leaves(self):
    leaves = np.random.default_rng(4).random(50)
    for indices in ([0, 49, 7, 7], [], [50], [3, -1]):
      indices = np.array(indices, np.int64)
      mine = NUMBA.get_leaves(leaves, indices)
      other = NUMPY.get_leaves(leaves, indices)
      if other is None:
        self.assertIsNone(mine)
      else:
        kernel_cases.assert_same(self, mine, other)
    self.assertIsNone(NUMBA.get_leaves(leaves, np.array([50])))

  @parameterized.parameters(*_FANOUTS)
  def test_descend(self, fanout):
    flat, _, offsets = kernel_cases.twin_trees(3000, fanout, 5)
    total = NUMPY.update_parents(flat, offsets, fanout, np.zeros(1, int))
    rng = np.random.default_rng(5)
    targets = np.concatenate([rng.random(500) * total,
                              [0.0, total, np.nextafter(total, 0.0),
                               total * 1.5]])  # Past the total: rounding.
    kernel_cases.assert_same(self,
                             NUMBA.descend(flat, offsets, fanout, targets),
                             NUMPY.descend(flat, offsets, fanout, targets))
    # Targets of another dtype or layout are converted alike.
    strided = targets[::2].astype(np.float32)
    kernel_cases.assert_same(self,
                             NUMBA.descend(flat, offsets, fanout, strided),
                             NUMPY.descend(flat, offsets, fanout, strided))

  @parameterized.parameters(2, 16)
  def test_descend_uniforms_and_draws(self, fanout):
    flat, _, offsets = kernel_cases.twin_trees(3000, fanout, 6)
    scale = NUMPY.update_parents(flat, offsets, fanout, np.zeros(1, int))
    for batch in (1, 32, 257):
      lower = np.linspace(0.0, 1.0, batch + 1)[:-1]
      width = np.full(batch, 1.0 / batch)
      uniforms = np.random.default_rng(batch).random(batch)
      kernel_cases.assert_same(
          self, NUMBA.descend_uniforms(flat, offsets, fanout, uniforms, lower,
                                       width, scale),
          NUMPY.descend_uniforms(flat, offsets, fanout, uniforms, lower,
                                 width, scale))
      random.seed(batch)
      words = random.getrandbits(64 * batch).to_bytes(8 * batch, 'little')
      kernel_cases.assert_same(
          self, NUMBA.descend_draws(flat, offsets, fanout, words, lower,
                                    width, scale),
          NUMPY.descend_draws(flat, offsets, fanout, words, lower, width,
                              scale))


class SumTreeEquivalenceTest(kernel_equivalence.SumTreeEquivalence):
  KERNELS = 'numba'

class PrefetchTest(absltest.TestCase):

  def test_falls_back_to_a_no_op(self):

    def failing_probe(array):
      raise numba.core.errors.LoweringError('no prefetch here')

    prefetch = numba_kernels._choose_prefetch(probe=failing_probe)  # pylint: disable=protected-access
    self.assertIs(prefetch, numba_kernels._no_prefetch)  # pylint: disable=protected-access

    @numba.njit
    def first(array):
      prefetch(array, 0)
      return array[0]

    self.assertEqual(first(np.full(3, 7.0)), 7.0)


class ValidMaskTest(parameterized.TestCase):

  @parameterized.product(
      shape=[(50, 4, 1), (50, 4, 3), (50, 1, 5), (23, 3, 2)],
      full=[False, True],
      terminal_dtype=[np.uint8, np.float32, np.bool_, np.int64])
  def test_same_mask(self, shape, full, terminal_dtype):
    capacity, stack, horizon = shape
    rng = np.random.default_rng(capacity * stack + horizon)
    for _ in range(30):
      add_count, episode_end, terminal, indices = kernel_cases.memory_state(
          rng, capacity, full, terminal_dtype)
      arguments = (indices, capacity, add_count, horizon, stack, episode_end,
                   terminal)
      kernel_cases.assert_same(self, NUMBA.valid_mask(*arguments),
                               NUMPY.valid_mask(*arguments))

  def test_empty_batch(self):
    arguments = (np.zeros(0, np.int64), 10, 5, 1, 1, np.zeros(10, bool),
                 np.zeros(10, np.uint8))
    kernel_cases.assert_same(self, NUMBA.valid_mask(*arguments),
                             NUMPY.valid_mask(*arguments))


class TrajectoriesTest(parameterized.TestCase):

  @parameterized.product(
      horizon=[1, 3, 7, 8, 11],  # From 8 steps on: NumPy's (pairwise sums).
      reward=[((), np.float32), ((), np.float64), ((2,), np.float32)],
      discount_dtype=[np.float32, np.float64])
  def test_same_trajectories(self, horizon, reward, discount_dtype):
    reward_shape, reward_dtype = reward
    capacity = 60
    rng = np.random.default_rng(horizon)
    discounts = np.array([0.99**j for j in range(horizon)], discount_dtype)
    for _ in range(10):
      terminal, rewards, indices = kernel_cases.trajectory_inputs(
          rng, capacity, reward_shape, reward_dtype)
      arguments = (indices, capacity, terminal, rewards, discounts)
      kernel_cases.assert_same(self, NUMBA.trajectories(*arguments),
                               NUMPY.trajectories(*arguments))
    compiled = (horizon < 8 and reward == ((), np.float32) and
                discount_dtype == np.float32)
    self.assertEqual(
        numba_kernels._compiled_returns(terminal, rewards, discounts),  # pylint: disable=protected-access
        compiled)


# (frame shape, dtype, stack): the packed path (4 frames of 1 byte: Atari),
# the generic compiled path, and frames the compiled loops do not take.
_ATARI = ((84, 84), np.uint8, 4)
_PACKED = [_ATARI, ((6,), np.int8, 4), ((5,), np.bool_, 4)]
_GENERIC = [((84, 84), np.uint8, 3), ((4,), np.float32, 1),
            ((3, 2), np.int16, 4), ((5,), np.bool_, 2)]
# Numba has no complex gathers here, and no float16 at all.
_NUMPY_ONLY = [((3,), np.complex64, 2), ((3,), np.float16, 2)]


class StacksTest(parameterized.TestCase):

  @parameterized.parameters(*_PACKED, *_GENERIC, *_NUMPY_ONLY)
  def test_gather_stacks(self, shape, dtype, stack):
    rng = np.random.default_rng(0)
    frames = kernel_cases.frames(rng, 50, shape, dtype)
    for batch in (17, 1, 0):  # Odd: the 4x8 loop pairs the last row alone.
      windows = rng.integers(0, 50, (batch, stack))
      outs = [kernel_cases.garbage((batch,) + shape + (stack,), dtype)
              for _ in range(2)]
      self.assertIs(NUMBA.gather_stacks(frames, windows, outs[0]), outs[0])
      NUMPY.gather_stacks(frames, windows, outs[1])
      kernel_cases.assert_same(self, *outs)
    self.assertEqual(numba_kernels._packs_4x8(frames, stack),  # pylint: disable=protected-access
                     (shape, dtype, stack) in _PACKED)
    self.assertEqual(numba_kernels._plain(frames),  # pylint: disable=protected-access
                     (shape, dtype, stack) not in _NUMPY_ONLY)

  @parameterized.parameters(*_PACKED, *_GENERIC)
  def test_frames_that_are_not_plain_arrays(self, shape, dtype, stack):
    rng = np.random.default_rng(1)
    # Not C-contiguous:
    frames = kernel_cases.frames(rng, 60, shape, dtype)[::2]
    self.assertFalse(numba_kernels._plain(frames))  # pylint: disable=protected-access
    windows = rng.integers(0, 30, (9, stack))
    outs = [kernel_cases.garbage((9,) + shape + (stack,), dtype)
            for _ in range(2)]
    NUMBA.gather_stacks(frames, windows, outs[0])
    NUMPY.gather_stacks(frames, windows, outs[1])
    kernel_cases.assert_same(self, *outs)
    ends = np.array([0, 1, 29, 13])
    outs = [kernel_cases.garbage((4,) + shape + (stack,), dtype)
            for _ in range(2)]
    NUMBA.stacks_ending_at(frames, ends, stack, outs[0])
    NUMPY.stacks_ending_at(frames, ends, stack, outs[1])
    kernel_cases.assert_same(self, *outs)

  @parameterized.parameters(*_PACKED, *_GENERIC, *_NUMPY_ONLY)
  def test_stacks_ending_at_wrap_around(self, shape, dtype, stack):
    rng = np.random.default_rng(2)
    frames = kernel_cases.frames(rng, 30, shape, dtype)
    for ends in (np.concatenate([[0, 1, 29], rng.integers(0, 30, 14)]),
                 np.array([2]), np.zeros(0, np.int64)):
      outs = [kernel_cases.garbage((len(ends),) + shape + (stack,), dtype)
              for _ in range(2)]
      self.assertIs(NUMBA.stacks_ending_at(frames, ends, stack, outs[0]),
                    outs[0])
      NUMPY.stacks_ending_at(frames, ends, stack, outs[1])
      kernel_cases.assert_same(self, *outs)

  @parameterized.named_parameters(
      ('atari', (6, 6), np.uint8, 4, 3, (), np.float32),
      ('stack_3', (6, 6), np.uint8, 3, 3, (), np.float32),
      ('float_frames', (6,), np.float32, 4, 3, (), np.float32),
      ('horizon_8', (6, 6), np.uint8, 4, 8, (), np.float32),
      ('float64_rewards', (6, 6), np.uint8, 4, 3, (), np.float64),
      ('vector_rewards', (6, 6), np.uint8, 4, 3, (2,), np.float32))
  def test_transition_batch(self, shape, dtype, stack, horizon,
                            reward_shape, reward_dtype):
    rng = np.random.default_rng(3)
    frames = kernel_cases.frames(rng, 40, shape, dtype)
    terminal = (rng.random(40) < 0.15).astype(np.uint8)
    rewards = rng.standard_normal((40,) + reward_shape).astype(reward_dtype)
    discounts = np.array([0.9**j for j in range(horizon)], np.float32)
    sources = {'reward': rewards, 'action': rng.integers(0, 9, 40)}
    for batch in (13, 0):
      indices = rng.integers(0, 40, batch)
      outs = []
      for kernels in (NUMBA, NUMPY):
        garbage = kernel_cases.garbage
        out = (garbage((2 * batch,) + shape + (stack,), dtype),
               garbage((batch,) + reward_shape, reward_dtype),
               garbage((batch,), np.uint8), garbage((batch,), np.int32),
               garbage((batch,) + reward_shape, reward_dtype),
               garbage((batch,), np.int64))
        kernels.transition_batch(
            frames, stack, terminal, rewards, discounts, indices, *out[:4],
            sources, (('reward', True, out[4]), ('action', False, out[5])),
            None)
        outs.append(out)
      kernel_cases.assert_same(self, *outs)


class MemoryKernelsTest(kernel_equivalence.MemoryEquivalence):
  """A memory on NumPy's loops and one on Numba's give the same batches."""

  KERNELS = 'numba'

  def test_the_compiled_atari_path_reads_a_loaded_storage(self):
    # A load replaces the storage's arrays: the compiled loops must read,
    # and the next adds write, the loaded ones.
    def memory():
      return kernel_equivalence.memory(
          'numba', observation_shape=(6, 6), stack_size=4,
          replay_capacity=200, batch_size=16)

    rng = np.random.default_rng(1)
    saved, loaded = memory(), memory()
    for source, offset in ((saved, 0), (loaded, 7)):
      for t in range(150):
        source.add(np.full((6, 6), (t + offset) % 256, np.uint8), t % 3,
                   float(rng.random()), int(t % 40 == 39), None)
    checkpoint_dir = fixtures.temp_dir(self)
    saved.save(checkpoint_dir, 0)
    loaded.load(checkpoint_dir, 0)
    self.assertIs(loaded._kernels, saved._kernels)
    self.assertTrue(loaded._kernels.compiled)
    for t in range(150, 180):  # Wraps around.
      for memory_ in (saved, loaded):
        memory_.add(np.full((6, 6), t % 256, np.uint8), t % 3, 0.5, 0, None)
    indices = np.flatnonzero(saved.is_valid_transition(np.arange(200)))[:16]
    for mine, other in zip(loaded.sample_transition_batch(indices=indices),
                           saved.sample_transition_batch(indices=indices)):
      np.testing.assert_array_equal(mine, other)


if __name__ == '__main__':
  absltest.main()
