"""Tests for dopamine_per.replay_memory.native_kernels: NumPy's, in C++.

`NativeKernels` must give `NumpyKernels`' results bit for bit, method by
method: on the inputs the C loops take (checked to reach them: NumPy's
method is not called) and on those it hands back to NumPy's (checked to be
handed back): returns of 8 steps or more, rewards that are not float32
scalars, terminal flags that are not bools or integers, frames that are not
plain C-contiguous arrays, empty batches. A sum tree and a memory on either
kernels then hold the same trees and give the same batches.
numpy_kernels_test checks NumPy's against the rules.
"""

import contextlib
import random
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.native import extension
from dopamine_per.replay_memory import native_kernels
from dopamine_per.replay_memory import numpy_kernels
from dopamine_per.replay_memory import prioritized_replay_buffer
from tests.support import kernel_cases
from tests.support import kernel_equivalence

NUMPY = numpy_kernels.NumpyKernels()
NATIVE = native_kernels.NativeKernels()

_FANOUTS = (2, 4, 16, 32)  # 16 has its own unrolled sum.


@contextlib.contextmanager
def _numpy_calls(test, method, expected):
  """Checks that the block calls NumPy's `method` `expected` times.

  `NativeKernels` falls back by calling its parent's method: NumPy's loop.
  Only NATIVE's calls count (call NUMPY's outside the block).
  """
  original = getattr(numpy_kernels.NumpyKernels, method)
  with mock.patch.object(numpy_kernels.NumpyKernels, method, autospec=True,
                         side_effect=original) as calls:
    yield
  test.assertEqual(calls.call_count, expected,
                   '{} fell back {} times, not {}'.format(
                       method, calls.call_count, expected))


def _outcome(function, *arguments):
  """(result, None), or (None, the type of the exception it raised)."""
  try:
    return function(*arguments), None
  except (IndexError, ValueError) as e:
    return None, type(e)


class TreeKernelsTest(parameterized.TestCase):

  @parameterized.parameters(*_FANOUTS, 1, 1024)
  def test_level_sums(self, fanout):
    rng = np.random.default_rng(fanout)
    blocks = kernel_cases.priorities(rng, 37 * fanout).reshape(37, fanout)
    with _numpy_calls(self, 'level_sums', 0):
      mine = NATIVE.level_sums(blocks)
    kernel_cases.assert_same(self, mine, NUMPY.level_sums(blocks))

  def test_level_sums_falls_back(self):
    rng = np.random.default_rng(0)
    wide = kernel_cases.priorities(rng, 20 * 32).reshape(20, 32)
    for blocks in (wide[:, :16],  # Not C-contiguous.
                   wide.astype(np.float32).reshape(40, 16),
                   wide.reshape(10, 4, 16)):  # Not [rows, fanout].
      with _numpy_calls(self, 'level_sums', 1):
        mine = NATIVE.level_sums(blocks)
      kernel_cases.assert_same(self, mine, NUMPY.level_sums(blocks))

  @parameterized.parameters(*_FANOUTS)
  def test_update_parents(self, fanout):
    ours, theirs, offsets = kernel_cases.twin_trees(fanout**3 + 5, fanout,
                                                    fanout)
    rng = np.random.default_rng(1)
    for step in range(40):
      size = int(rng.integers(1, 300))
      leaves = rng.integers(0, fanout**3 + 5, size)  # With repeats.
      values = kernel_cases.priorities(rng, size)
      ours[leaves] = theirs[leaves] = values
      if step % 3 == 1:
        leaves = leaves.astype(np.int32)
      elif step % 3 == 2:
        leaves = np.repeat(leaves, 2)[::2]  # Strided.
      with _numpy_calls(self, 'update_parents', 0):
        total = NATIVE.update_parents(ours, offsets, fanout, leaves)
      self.assertEqual(total,
                       NUMPY.update_parents(theirs, offsets, fanout, leaves))
      np.testing.assert_array_equal(ours, theirs)

  @parameterized.parameters(*_FANOUTS)
  def test_update_leaf(self, fanout):
    ours, theirs, offsets = kernel_cases.twin_trees(1000, fanout, 2)
    rng = np.random.default_rng(2)
    for leaf in rng.integers(0, 1000, 100):
      ours[leaf] = theirs[leaf] = float(kernel_cases.priorities(rng, 1)[0])
      with _numpy_calls(self, 'update_leaf', 0):
        total = NATIVE.update_leaf(ours, offsets, fanout, leaf)
      self.assertIsInstance(total, float)
      self.assertEqual(total,
                       NUMPY.update_leaf(theirs, offsets, fanout, int(leaf)))
      np.testing.assert_array_equal(ours, theirs)

  def test_a_tree_the_c_loops_cannot_take_falls_back(self):
    ours, theirs, offsets = kernel_cases.twin_trees(100, 16, 3)
    ours.flags.writeable = False  # NumPy's loop refuses to write it.
    with _numpy_calls(self, 'update_leaf', 1):
      with self.assertRaisesRegex(ValueError, 'read-only'):
        NATIVE.update_leaf(ours, offsets, 16, 7)
    # Offsets of another dtype.
    ours.flags.writeable = True
    ours[7] = theirs[7] = 2.5
    with _numpy_calls(self, 'update_leaf', 1):
      total = NATIVE.update_leaf(ours, offsets.astype(np.int32), 16, 7)
    self.assertEqual(total, NUMPY.update_leaf(theirs, offsets, 16, 7))
    np.testing.assert_array_equal(ours, theirs)

  @parameterized.parameters(*_FANOUTS)
  def test_set_leaves(self, fanout):
    ours, theirs, offsets = kernel_cases.twin_trees(40, fanout, 3)
    rng = np.random.default_rng(3)
    smallest, largest = 2.0**-149, 3.4e38
    edges = [0.0, -0.0, smallest, largest, smallest / 4, largest * 2,
             5e-324, -5e-324, -1.0, np.inf, -np.inf, np.nan, 1.0, 3.5]
    outcomes = set()
    for step in range(300):
      size = int(rng.integers(1, 5))
      leaves = rng.integers(-1, 41, size)  # Sometimes out of range.
      # int64, TensorFlow's int32, and others (converted).
      leaves = leaves.astype((np.int64, np.int32, np.int16)[step % 3])
      values = np.array(rng.choice(edges, size), np.float64)
      with _numpy_calls(self, 'set_leaves', 0):
        mine = NATIVE.set_leaves(ours, offsets, fanout, 40, leaves, values,
                                 smallest, largest)
      other = NUMPY.set_leaves(theirs, offsets, fanout, 40, leaves, values,
                               smallest, largest)
      self.assertEqual(mine, other, (leaves, values))
      if mine is not None:
        self.assertEqual([type(x) for x in mine], [float, float])
      outcomes.add(mine is None)
      np.testing.assert_array_equal(ours, theirs)
    self.assertEqual(outcomes, {True, False})  # Both were exercised.

  def test_set_leaves_falls_back(self):
    ours, theirs, offsets = kernel_cases.twin_trees(40, 16, 4)
    leaves = np.array([3, 9, 3])
    for values in (np.array([1.5, 2.5, 1e-46], np.float32),  # NumPy compares
                   np.array([0.5, 2.0, 4.0, 8.0])[::-1][:3],  # in float32.
                   np.array([[1.0, 2.0, 3.0]])):  # Not [count].
      with _numpy_calls(self, 'set_leaves', 1), np.errstate(over='ignore'):
        mine = NATIVE.set_leaves(ours, offsets, 16, 40, leaves, values,
                                 1e-300, 1e300)
      with np.errstate(over='ignore'):  # 1e300 in float32.
        other = NUMPY.set_leaves(theirs, offsets, 16, 40, leaves, values,
                                 1e-300, 1e300)
      self.assertEqual(mine, other)
      np.testing.assert_array_equal(ours, theirs)
    # An empty batch: NumPy's loop has no largest value to return.
    empty = np.zeros(0, np.int64)
    with _numpy_calls(self, 'set_leaves', 1):
      with self.assertRaises(ValueError):
        NATIVE.set_leaves(ours, offsets, 16, 40, empty, np.zeros(0), 1.0, 2.0)
    with self.assertRaises(ValueError):
      NUMPY.set_leaves(theirs, offsets, 16, 40, empty, np.zeros(0), 1.0, 2.0)

  def test_get_leaves(self):
    leaves = np.random.default_rng(4).random(50)
    cases = {(0, 49, 7, 7): 0, (50,): 0, (3, -1): 0, (-50,): 0, (): 1}
    for indices, fallbacks in cases.items():
      for dtype in (np.int64, np.int32, np.uint8, np.uint64):
        positions = np.array(indices, np.int64).astype(dtype)
        # NumPy's loop takes uint64 (which the C loop cannot).
        with _numpy_calls(self, 'get_leaves', 1 if dtype is np.uint64 else
                          fallbacks):
          mine = NATIVE.get_leaves(leaves, positions)
        other = NUMPY.get_leaves(leaves, positions)
        if other is None:
          self.assertIsNone(mine)
        else:
          kernel_cases.assert_same(self, mine, other)
    self.assertIsNone(NATIVE.get_leaves(leaves, np.array([50])))

  @parameterized.parameters(*_FANOUTS)
  def test_descend(self, fanout):
    flat, _, offsets = kernel_cases.twin_trees(3000, fanout, 5)
    total = NUMPY.update_parents(flat, offsets, fanout, np.zeros(1, int))
    rng = np.random.default_rng(5)
    targets = np.concatenate([rng.random(500) * total,
                              [0.0, total, np.nextafter(total, 0.0),
                               total * 1.5]])  # Past the total: rounding.
    # Targets of another dtype or layout are converted alike.
    for masses in (targets, targets[::2].astype(np.float32),
                   targets[:7].tolist()):
      with _numpy_calls(self, 'descend', 0):
        mine = NATIVE.descend(flat, offsets, fanout, masses)
      kernel_cases.assert_same(self, mine,
                               NUMPY.descend(flat, offsets, fanout, masses))
    with _numpy_calls(self, 'descend', 1):
      mine = NATIVE.descend(flat, offsets, fanout, np.zeros(0))
    kernel_cases.assert_same(self, mine, NUMPY.descend(flat, offsets, fanout,
                                                       np.zeros(0)))

  @parameterized.parameters(*_FANOUTS)
  def test_descend_at_the_edges(self, fanout):
    # Small integer priorities, zeros among them, sum exactly: a mass at an
    # edge between two leaves belongs to the second (with positive mass).
    rng = np.random.default_rng(fanout)
    capacity = fanout**2 + 3
    flat, offsets = kernel_cases.layout(capacity, fanout)
    flat[:capacity] = rng.integers(0, 4, capacity)
    total = NUMPY.update_parents(flat, offsets, fanout, np.arange(capacity))
    edges = np.concatenate([[0.0], np.cumsum(flat[:capacity])])
    self.assertEqual(edges[-1], total)
    with _numpy_calls(self, 'descend', 0):
      mine = NATIVE.descend(flat, offsets, fanout, edges)
    kernel_cases.assert_same(self, mine,
                             NUMPY.descend(flat, offsets, fanout, edges))
    self.assertTrue((flat[mine] > 0).all())

  @parameterized.parameters(*_FANOUTS)
  def test_descend_uniforms_and_draws(self, fanout):
    flat, _, offsets = kernel_cases.twin_trees(3000, fanout, 6)
    scale = NUMPY.update_parents(flat, offsets, fanout, np.zeros(1, int))
    for batch in (1, 32, 257):
      lower = np.linspace(0.0, 1.0, batch + 1)[:-1]
      width = np.full(batch, 1.0 / batch)
      uniforms = np.random.default_rng(batch).random(batch)
      with _numpy_calls(self, 'descend_uniforms', 0):
        mine = NATIVE.descend_uniforms(flat, offsets, fanout, uniforms, lower,
                                       width, scale)
      kernel_cases.assert_same(
          self, mine, NUMPY.descend_uniforms(flat, offsets, fanout, uniforms,
                                             lower, width, scale))
      random.seed(batch)
      words = random.getrandbits(64 * batch).to_bytes(8 * batch, 'little')
      with _numpy_calls(self, 'descend_draws', 0):
        mine = NATIVE.descend_draws(flat, offsets, fanout, words, lower,
                                    width, scale)
      kernel_cases.assert_same(
          self, mine, NUMPY.descend_draws(flat, offsets, fanout, words, lower,
                                          width, scale))

  def test_descents_fall_back(self):
    flat, _, offsets = kernel_cases.twin_trees(3000, 16, 7)
    scale = NUMPY.update_parents(flat, offsets, 16, np.zeros(1, int))
    lower = np.linspace(0.0, 1.0, 9)[:-1]
    width = np.full(8, 1.0 / 8)
    uniforms = np.random.default_rng(7).random(8)
    # float32 strata: NumPy's sums are float32 then.
    cases = [(uniforms, lower.astype(np.float32), width.astype(np.float32)),
             (uniforms, lower, np.full(1, 1.0 / 8)),  # Broadcast.
             (uniforms[:0], lower[:0], width[:0])]
    for arguments in cases:
      with _numpy_calls(self, 'descend_uniforms', 1):
        mine = NATIVE.descend_uniforms(flat, offsets, 16, *arguments, scale)
      kernel_cases.assert_same(
          self, mine, NUMPY.descend_uniforms(flat, offsets, 16, *arguments,
                                             scale))
    words = bytearray(random.Random(0).getrandbits(512).to_bytes(64, 'little'))
    with _numpy_calls(self, 'descend_draws', 1):
      mine = NATIVE.descend_draws(flat, offsets, 16, words, lower, width,
                                  scale)
    kernel_cases.assert_same(
        self, mine, NUMPY.descend_draws(flat, offsets, 16, words, lower, width,
                                        scale))


class SumTreeEquivalenceTest(kernel_equivalence.SumTreeEquivalence):
  KERNELS = 'native'

class ValidMaskTest(parameterized.TestCase):

  @parameterized.product(
      # (capacity, stack, horizon)
      shape=[(50, 4, 1), (50, 4, 3), (50, 1, 5), (23, 3, 2), (60, 4, 7)],
      full=[False, True],
      terminal_dtype=[np.uint8, np.bool_, np.int32, np.int64, np.float32])
  def test_same_mask(self, shape, full, terminal_dtype):
    capacity, stack, horizon = shape
    rng = np.random.default_rng(capacity * stack + horizon)
    # The C loop tests a flag's bytes: NumPy's takes float flags.
    fallbacks = 30 if terminal_dtype is np.float32 else 0
    valid = 0
    with _numpy_calls(self, 'valid_mask', fallbacks):
      results = []
      for _ in range(30):
        add_count, episode_end, terminal, indices = kernel_cases.memory_state(
            rng, capacity, full, terminal_dtype)
        arguments = (indices, capacity, add_count, horizon, stack,
                     episode_end, terminal)
        results.append((arguments, NATIVE.valid_mask(*arguments)))
    for arguments, mine in results:
      other = NUMPY.valid_mask(*arguments)
      kernel_cases.assert_same(self, mine, other)
      valid += other.sum()
    self.assertGreater(valid, 0)  # Not all refused.

  @parameterized.parameters((3, 4, 1), (3, 1, 5), (4, 2, 3), (4, 6, 7))
  def test_memories_smaller_than_a_transition(self, capacity, stack,
                                              horizon):
    # No slot is valid where stack + horizon > capacity.
    rng = np.random.default_rng(capacity)
    for full in (False, True) * 10:
      add_count, episode_end, terminal, indices = kernel_cases.memory_state(
          rng, capacity, full, np.uint8)
      arguments = (indices, capacity, add_count, horizon, stack, episode_end,
                   terminal)
      with _numpy_calls(self, 'valid_mask', 0):
        mine = NATIVE.valid_mask(*arguments)
      kernel_cases.assert_same(self, mine, NUMPY.valid_mask(*arguments))
      self.assertFalse(mine.any())

  def test_indices_of_other_integer_dtypes(self):
    rng = np.random.default_rng(8)
    add_count, episode_end, terminal, indices = kernel_cases.memory_state(
        rng, 50, True, np.uint8)
    for slots, fallbacks in ((indices.astype(np.int32), 0),
                             (np.repeat(indices, 2)[::2], 0),  # Strided.
                             (np.abs(indices).astype(np.uint16), 0),
                             # NumPy's promotes uint64 to float (and
                             # raises): left to it.
                             (np.abs(indices).astype(np.uint64), 1)):
      arguments = (slots, 50, add_count, 3, 4, episode_end, terminal)
      with _numpy_calls(self, 'valid_mask', fallbacks):
        mine, error = _outcome(NATIVE.valid_mask, *arguments)
      other, other_error = _outcome(NUMPY.valid_mask, *arguments)
      self.assertEqual(error, other_error)
      if error is None:
        kernel_cases.assert_same(self, mine, other)

  def test_arrays_the_c_loop_cannot_read_fall_back(self):
    rng = np.random.default_rng(9)
    add_count, episode_end, terminal, indices = kernel_cases.memory_state(
        rng, 50, True, np.uint8)
    cases = [(episode_end, np.stack([terminal, terminal], axis=1)),  # 2-D.
             (episode_end, np.repeat(terminal, 2)[::2]),  # Strided.
             (episode_end.astype(np.uint8), terminal),  # Not bools.
             (np.zeros(0, bool), terminal)]  # Short: NumPy's raises.
    for ends, flags in cases:
      arguments = (indices, 50, add_count, 3, 4, ends, flags)
      with _numpy_calls(self, 'valid_mask', 1):
        mine, error = _outcome(NATIVE.valid_mask, *arguments)
      other, other_error = _outcome(NUMPY.valid_mask, *arguments)
      self.assertEqual(error, other_error)
      if error is None:
        kernel_cases.assert_same(self, mine, other)

  def test_empty_batch(self):
    arguments = (np.zeros(0, np.int64), 10, 5, 1, 1, np.zeros(10, bool),
                 np.zeros(10, np.uint8))
    with _numpy_calls(self, 'valid_mask', 1):
      mine = NATIVE.valid_mask(*arguments)
    kernel_cases.assert_same(self, mine, NUMPY.valid_mask(*arguments))


class TrajectoriesTest(parameterized.TestCase):

  @parameterized.product(
      horizon=[1, 3, 7, 8, 9],  # From 8 steps on: NumPy's (pairwise sums).
      reward=[((), np.float32), ((), np.float64), ((2,), np.float32)],
      discount_dtype=[np.float32, np.float64],
      terminal_dtype=[np.uint8, np.bool_, np.int32])
  def test_same_trajectories(self, horizon, reward, discount_dtype,
                             terminal_dtype):
    reward_shape, reward_dtype = reward
    capacity = 60
    rng = np.random.default_rng(horizon)
    discounts = np.array([0.99**j for j in range(horizon)], discount_dtype)
    compiled = (horizon < 8 and reward == ((), np.float32) and
                discount_dtype == np.float32)
    cut = 0
    for _ in range(10):
      terminal, rewards, indices = kernel_cases.trajectory_inputs(
          rng, capacity, reward_shape, reward_dtype)
      arguments = (indices, capacity, terminal.astype(terminal_dtype),
                   rewards, discounts)
      with _numpy_calls(self, 'trajectories', 0 if compiled else 1):
        mine = NATIVE.trajectories(*arguments)
      other = NUMPY.trajectories(*arguments)
      kernel_cases.assert_same(self, mine, other)
      cut += other[1].sum()
    if horizon > 1:
      self.assertGreater(cut, 0)  # Some returns were cut at a terminal.

  @parameterized.parameters((60, 3), (60, 7), (5, 7))
  def test_slots_wrap_around(self, capacity, horizon):
    # Slots outside [0, capacity), and trajectories longer than the memory:
    # the C loop wraps them as NumPy's modulo does.
    rng = np.random.default_rng(capacity + horizon)
    terminal, rewards, _ = kernel_cases.trajectory_inputs(rng, capacity, (),
                                                          np.float32)
    indices = np.array([-1, capacity, capacity + 2, -capacity - 3, 3 - 10**9])
    discounts = np.array([0.9**j for j in range(horizon)], np.float32)
    arguments = (indices, capacity, terminal, rewards, discounts)
    with _numpy_calls(self, 'trajectories', 0):
      mine = NATIVE.trajectories(*arguments)
    kernel_cases.assert_same(self, mine, NUMPY.trajectories(*arguments))

  def test_other_inputs_fall_back(self):
    rng = np.random.default_rng(10)
    terminal, rewards, indices = kernel_cases.trajectory_inputs(
        rng, 60, (), np.float32)
    discounts = np.array([0.9**j for j in range(3)], np.float32)
    cases = [(indices, terminal.astype(np.float32), rewards),
             (indices, terminal, np.repeat(rewards, 2)[::2]),  # Strided.
             (indices, terminal[:40], rewards),  # Short: NumPy's raises.
             (indices[:0], terminal, rewards)]
    for slots, flags, values in cases:
      arguments = (slots, 60, flags, values, discounts)
      with _numpy_calls(self, 'trajectories', 1):
        mine, error = _outcome(NATIVE.trajectories, *arguments)
      other, other_error = _outcome(NUMPY.trajectories, *arguments)
      self.assertEqual(error, other_error)
      if error is None:
        kernel_cases.assert_same(self, mine, other)


# (frame shape, dtype, stack): Atari, the other stacks and item sizes of
# the C gathers (1, 2, 4, 8 and 16 bytes); 35 and 143 pixels: the Atari
# loop's tail alone, and two lines of 64 with a tail of 15.
_ATARI = ((84, 84), np.uint8, 4)
_FRAME_CASES = [_ATARI, ((5, 7), np.uint8, 4), ((11, 13), np.uint8, 4),
                ((84, 84), np.uint8, 3),
                ((84, 84), np.uint8, 1),
                ((6,), np.int8, 4), ((5,), np.bool_, 2),
                ((3, 2), np.uint16, 4), ((7,), np.float16, 3),
                ((4,), np.float32, 1), ((6,), np.float32, 4),
                ((3,), np.float64, 2), ((), np.int32, 4),
                ((3,), np.complex128, 3)]


def _object_frames(capacity):
  """Frames [capacity, 3] of Python objects (strings), which C cannot copy."""
  return np.array([['{}-{}'.format(slot, k) for k in range(3)]
                   for slot in range(capacity)], object)


def _outs(shape, dtype):
  """Two outputs to fill (garbage; Nones for Python objects)."""
  if np.dtype(dtype).hasobject:
    return [np.full(shape, None, object) for _ in range(2)]
  return [kernel_cases.garbage(shape, dtype) for _ in range(2)]


class StacksTest(parameterized.TestCase):

  @parameterized.parameters(*_FRAME_CASES)
  def test_gather_stacks(self, shape, dtype, stack):
    rng = np.random.default_rng(0)
    frames = kernel_cases.frames(rng, 50, shape, dtype)
    for batch in (17, 1, 0):
      # NumPy's indexing: [-50, 0) counts from the end.
      windows = rng.integers(-50, 50, (batch, stack))
      outs = [kernel_cases.garbage((batch,) + shape + (stack,), dtype)
              for _ in range(2)]
      with _numpy_calls(self, 'gather_stacks', 0 if batch else 1):
        self.assertIs(NATIVE.gather_stacks(frames, windows, outs[0]),
                      outs[0])
      NUMPY.gather_stacks(frames, windows, outs[1])
      kernel_cases.assert_same(self, *outs)
    out = kernel_cases.garbage((2,) + shape + (stack,), dtype)
    for bad in (50, -51):  # The C loop checks them, then NumPy's raises.
      windows = np.array([[1] * stack, [bad] * stack])
      with _numpy_calls(self, 'gather_stacks', 1):
        with self.assertRaises(IndexError):
          NATIVE.gather_stacks(frames, windows, out)

  @parameterized.parameters(*_FRAME_CASES)
  def test_stacks_ending_at_wrap_around(self, shape, dtype, stack):
    rng = np.random.default_rng(2)
    frames = kernel_cases.frames(rng, 30, shape, dtype)
    for ends in (np.concatenate([[0, 1, 2, 29, -1, 31, -45],
                                 rng.integers(0, 30, 14)]),
                 np.array([2], np.int32), np.zeros(0, np.int64)):
      outs = [kernel_cases.garbage((len(ends),) + shape + (stack,), dtype)
              for _ in range(2)]
      with _numpy_calls(self, 'stacks_ending_at', 0 if len(ends) else 1):
        self.assertIs(NATIVE.stacks_ending_at(frames, ends, stack, outs[0]),
                      outs[0])
      NUMPY.stacks_ending_at(frames, ends, stack, outs[1])
      kernel_cases.assert_same(self, *outs)

  @parameterized.parameters(_ATARI, ((3, 2), np.uint16, 3))
  def test_frames_that_are_not_plain_arrays_fall_back(self, shape, dtype,
                                                      stack):
    rng = np.random.default_rng(1)
    strided = kernel_cases.frames(rng, 60, shape, dtype)[::2]
    for frames, out_dtype in ((strided, dtype), (strided.copy(), np.float32),
                              (_object_frames(30), object)):
      frame_shape = frames.shape[1:]
      windows = rng.integers(0, 30, (9, stack))
      outs = _outs((9,) + frame_shape + (stack,), out_dtype)
      with _numpy_calls(self, 'gather_stacks', 1):
        NATIVE.gather_stacks(frames, windows, outs[0])
      NUMPY.gather_stacks(frames, windows, outs[1])
      kernel_cases.assert_same(self, *outs)
      ends = np.array([0, 1, 29, 13])
      outs = _outs((4,) + frame_shape + (stack,), out_dtype)
      with _numpy_calls(self, 'stacks_ending_at', 1):
        NATIVE.stacks_ending_at(frames, ends, stack, outs[0])
      NUMPY.stacks_ending_at(frames, ends, stack, outs[1])
      kernel_cases.assert_same(self, *outs)

  def test_an_out_of_another_shape_falls_back(self):
    frames = kernel_cases.frames(np.random.default_rng(3), 30, (4,), np.uint8)
    for out, error in ((np.zeros((3, 4, 2), np.uint8), IndexError),
                       (np.zeros((3, 8), np.uint8), ValueError)):
      with _numpy_calls(self, 'stacks_ending_at', 1):
        with self.assertRaises(error):  # From NumPy's loop.
          NATIVE.stacks_ending_at(frames, np.arange(3), 4, out)


def _batch_inputs(rng, capacity, shape, dtype, horizon, terminal_dtype):
  """A random memory's arrays, and the sources a batch's rows read."""
  frames = kernel_cases.frames(rng, capacity, shape, dtype)
  terminal = (rng.random(capacity) < 0.15).astype(terminal_dtype)
  rewards = rng.standard_normal(capacity).astype(np.float32)
  discounts = np.array([0.9**j for j in range(horizon)], np.float32)
  sources = {'action': rng.integers(0, 9, capacity).astype(np.int32),
             'reward': rewards,
             'extra': rng.standard_normal((capacity, 2, 3)),
             'priorities': kernel_cases.priorities(rng, capacity)}
  return frames, terminal, rewards, discounts, sources


def _batch_outputs(count, frames, stack, terminal_out_dtype, with_states):
  """Garbage outputs of `transition_batch`: (states, returns, is_terminal,
  indices_out, rows)."""
  garbage = kernel_cases.garbage
  states = (garbage((2 * count,) + frames.shape[1:] + (stack,), frames.dtype)
            if with_states else None)
  rows = (('action', False, garbage((count,), np.int32)),
          ('action', True, garbage((count,), np.int32)),
          ('reward', True, garbage((count,), np.float32)),
          ('extra', False, garbage((count, 2, 3), np.float64)),
          ('priorities', False, garbage((count,), np.float32)))
  return (states, garbage((count,), np.float32),
          garbage((count,), terminal_out_dtype), garbage((count,), np.int32),
          rows)


def _filled(outputs):
  """The arrays `transition_batch` filled, for comparison."""
  states, returns, is_terminal, indices_out, rows = outputs
  return (states, returns, is_terminal, indices_out) + tuple(
      out for _, _, out in rows)


class TransitionBatchTest(parameterized.TestCase):
  """A whole batch in one call: NumPy's composition of the loops, bit for
  bit, or handed back to it."""

  @parameterized.named_parameters(
      ('atari', (84, 84), np.uint8, 4, 3, np.uint8, np.uint8, True),
      ('stack_3', (84, 84), np.uint8, 3, 3, np.uint8, np.uint8, True),
      ('stack_1', (84, 84), np.uint8, 1, 1, np.uint8, np.uint8, True),
      ('uint16_frames', (3, 2), np.uint16, 4, 3, np.uint8, np.uint8, True),
      ('cartpole', (4,), np.float32, 1, 1, np.uint8, np.uint8, True),
      ('horizon_7_bool_terminals', (6, 6), np.uint8, 4, 7, np.bool_,
       np.bool_, True),
      ('int32_terminal_outputs', (6,), np.float64, 3, 3, np.uint8, np.int32,
       True),
      ('no_states', (6, 6), np.uint8, 4, 3, np.int32, np.uint8, False))
  def test_same_batch(self, shape, dtype, stack, horizon, terminal_dtype,
                      terminal_out_dtype, with_states):
    rng = np.random.default_rng(21)
    frames, terminal, rewards, discounts, sources = _batch_inputs(
        rng, 60, shape, dtype, horizon, terminal_dtype)
    indices = rng.integers(0, 60, 17)
    mine, theirs = [_batch_outputs(17, frames, stack, terminal_out_dtype,
                                   with_states) for _ in range(2)]
    with _numpy_calls(self, 'transition_batch', 0):
      NATIVE.transition_batch(frames, stack, terminal, rewards, discounts,
                              indices, *mine[:4], sources, mine[4], None)
    NUMPY.transition_batch(frames, stack, terminal, rewards, discounts,
                           indices, *theirs[:4], sources, theirs[4], None)
    kernel_cases.assert_same(self, _filled(mine), _filled(theirs))
    # NumPy's composition is the loops': the same arrays, one by one.
    next_indices, is_terminal, returns = NUMPY.trajectories(
        indices, 60, terminal, rewards, discounts)
    np.testing.assert_array_equal(theirs[1], returns)
    np.testing.assert_array_equal(theirs[2], is_terminal)
    np.testing.assert_array_equal(theirs[3], indices)
    np.testing.assert_array_equal(theirs[4][1][2],
                                  sources['action'][next_indices])
    np.testing.assert_array_equal(
        theirs[4][4][2], sources['priorities'][indices].astype(np.float32))
    if with_states:
      np.testing.assert_array_equal(theirs[0], NUMPY.stacks_ending_at(
          frames, np.concatenate([indices, next_indices]), stack,
          np.empty_like(theirs[0])))

  def test_absent_outputs_are_skipped(self):
    rng = np.random.default_rng(22)
    frames, terminal, rewards, discounts, sources = _batch_inputs(
        rng, 40, (5,), np.uint8, 3, np.uint8)
    indices = rng.integers(0, 40, 9)
    out = kernel_cases.garbage((9,), np.int32)
    with _numpy_calls(self, 'transition_batch', 0):
      NATIVE.transition_batch(frames, 4, terminal, rewards, discounts,
                              indices, None, None, None, None, sources,
                              (('action', False, out),), None)
    np.testing.assert_array_equal(out, sources['action'][indices])

  @parameterized.named_parameters(
      ('object_extras', 'object_extra'),
      ('float_terminal_outputs', 'float_terminal'),
      ('float64_rewards', 'float64_rewards'),
      ('a_source_of_another_dtype', 'cast'),
      ('a_missing_source', 'missing'),
      ('indices_beyond_the_memory', 'beyond'),
      ('vector_rewards', 'vector_rewards'),
      ('float_terminals', 'float_terminals'),
      ('object_frames', 'object_frames'),
      ('horizon_9', 'horizon_9'),  # Returns of 8+ terms: NumPy sums pairwise.
      ('an_empty_batch', 'empty'))
  def test_other_inputs_fall_back(self, case):
    rng = np.random.default_rng(23)
    horizon = 9 if case == 'horizon_9' else 3
    frames, terminal, rewards, discounts, sources = _batch_inputs(
        rng, 40, (6, 6), np.uint8, horizon, np.uint8)
    if case == 'object_frames':
      frames = _object_frames(40)
    elif case == 'vector_rewards':
      rewards = sources['reward'] = rng.standard_normal(
          (40, 2)).astype(np.float32)
    elif case == 'float_terminals':
      terminal = terminal.astype(np.float32)
    indices = rng.integers(0, 40, 0 if case == 'empty' else 11)
    count = len(indices)
    terminal_out_dtype = np.float32 if case == 'float_terminal' else np.uint8
    outputs = [list(_batch_outputs(count, frames, 4, terminal_out_dtype,
                                   case != 'object_frames'))
               for _ in range(2)]
    if case == 'object_frames':
      for o in outputs:
        o[0] = np.full((2 * count,) + frames.shape[1:] + (4,), None, object)
    if case == 'vector_rewards':  # Returns and rewards of [count, 2].
      for o in outputs:
        o[1] = kernel_cases.garbage((count, 2), np.float32)
        o[4] = o[4][:2] + (('reward', True, kernel_cases.garbage(
            (count, 2), np.float32)),) + o[4][3:]
    if case == 'object_extra':
      sources['extra'] = np.array(['slot-{}'.format(slot)
                                   for slot in range(40)], object)
      for o in outputs:
        o[4] = o[4][:3] + (('extra', False, np.full(11, None, object)),)
    elif case == 'float64_rewards':
      rewards = rewards.astype(np.float64)
    elif case == 'cast':  # int16 actions into int32 outputs.
      sources['action'] = sources['action'].astype(np.int16)
    elif case == 'missing':
      del sources['extra']
    elif case == 'beyond':
      indices[3] = 40
    if case == 'missing':
      for kernels, given in ((NATIVE, outputs[0]), (NUMPY, outputs[1])):
        with self.assertRaises(KeyError):
          kernels.transition_batch(frames, 4, terminal, rewards, discounts,
                                   indices, *given[:4], sources, given[4],
                                   None)
      return
    with _numpy_calls(self, 'transition_batch', 1):
      mine = _outcome(NATIVE.transition_batch, frames, 4, terminal, rewards,
                      discounts, indices, *outputs[0][:4], sources,
                      outputs[0][4], None)
    theirs = _outcome(NUMPY.transition_batch, frames, 4, terminal, rewards,
                      discounts, indices, *outputs[1][:4], sources,
                      outputs[1][4], None)
    self.assertEqual(mine, theirs)
    if theirs[1] is None:
      kernel_cases.assert_same(self, _filled(outputs[0]),
                               _filled(outputs[1]))
    else:
      self.assertEqual(case, 'beyond')

  def test_the_lock_is_held_for_the_rows_not_the_frames(self):
    rng = np.random.default_rng(25)
    frames, terminal, rewards, discounts, sources = _batch_inputs(
        rng, 40, (6, 6), np.uint8, 3, np.uint8)  # Frames below 200.
    indices = rng.integers(0, 40, 7)

    class Lock(object):
      """Records what the kernels had written when it was taken and let go."""

      def __init__(self, outputs):
        self.outputs = outputs
        self.events = []

      def _written(self):
        states, _, _, _, rows = self.outputs
        return ((states != 250).any(), (rows[0][2] != -7).any())

      def __enter__(self):
        self.events.append(('acquire',) + self._written())

      def __exit__(self, *unused):
        self.events.append(('release',) + self._written())

    # NumPy's loop, and the native one handed a lock that is not one of its
    # own, which it leaves to NumPy's (it calls no Python lock): one call of
    # NumPy's loop each.
    for kernels in (NUMPY, NATIVE):
      outputs = _batch_outputs(7, frames, 4, np.uint8, True)
      outputs[0][...] = 250
      outputs[4][0][2][...] = -7
      lock = Lock(outputs)
      with _numpy_calls(self, 'transition_batch', 1):
        kernels.transition_batch(frames, 4, terminal, rewards, discounts,
                                 indices, *outputs[:4], sources, outputs[4],
                                 lock)
      # Taken before any row, let go after the rows, before the frames.
      self.assertEqual(lock.events, [('acquire', False, False),
                                     ('release', False, True)])
      self.assertFalse((outputs[0] == 250).any())

  def test_a_native_lock_is_taken_in_c_and_let_go(self):
    rng = np.random.default_rng(26)
    frames, terminal, rewards, discounts, sources = _batch_inputs(
        rng, 40, (6, 6), np.uint8, 3, np.uint8)
    indices = rng.integers(0, 40, 7)
    memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
        (2,), 1, 10, 2)
    lock = memory.native_memory().tree_lock
    expected = _batch_outputs(7, frames, 4, np.uint8, True)
    NUMPY.transition_batch(frames, 4, terminal, rewards, discounts, indices,
                           *expected[:4], sources, expected[4], None)
    for held in (False, True):  # Re-entrant: this thread may hold it.
      outputs = _batch_outputs(7, frames, 4, np.uint8, True)
      with contextlib.ExitStack() as stack:
        if held:
          stack.enter_context(lock)
        with _numpy_calls(self, 'transition_batch', 0):
          NATIVE.transition_batch(frames, 4, terminal, rewards, discounts,
                                  indices, *outputs[:4], sources,
                                  outputs[4], lock)
        self.assertEqual(lock.held(), held)
      self.assertFalse(lock.held())
      kernel_cases.assert_same(self, _filled(outputs), _filled(expected))

  def test_arguments_that_do_not_fit_are_refused(self):
    module = extension.load()
    rng = np.random.default_rng(24)
    frames, terminal, rewards, discounts, sources = _batch_inputs(
        rng, 40, (6, 6), np.uint8, 3, np.uint8)
    indices = rng.integers(0, 40, 5)
    states, returns, is_terminal, indices_out, rows = _batch_outputs(
        5, frames, 4, np.uint8, True)
    before = [a.copy() for a in _filled(
        (states, returns, is_terminal, indices_out, rows))]
    read_only = np.zeros(5, np.int32)
    read_only.flags.writeable = False
    good = [frames, 4, terminal, rewards, discounts, indices, states,
            returns, is_terminal, indices_out, sources, rows, None]
    changes = [
        (5, indices.astype(np.float64)), (5, indices[:0]),
        (5, np.append(indices, -1)[1:]),  # A slot outside the memory.
        (6, states[:-1]), (6, states[..., :3]),
        (7, returns.astype(np.float64)), (7, returns[:-1]),
        (8, is_terminal.astype(np.float32)),
        (9, indices_out.astype(np.int64)), (9, read_only),
        (10, dict(sources, extra=sources['extra'][:39])),
        (10, dict(sources, action=sources['action'][::2])),
        (10, list(sources.items())),
        (11, list(rows)), (11, rows + (('action', False),)),
        (11, rows + (('action', False, read_only),)),
        (11, rows + (('action', False, np.zeros(4, np.int32)),)),
        (11, rows + (('extra', False, np.zeros((5, 3, 2))),)),
        (11, rows + (('priorities', False, np.zeros(5, np.float16)),)),
        (11, rows + (('nothing', False, np.zeros(5, np.int32)),)),
        (3, rewards[:39]), (2, terminal.astype(np.float32))]
    for position, bad in changes:
      arguments = list(good)
      arguments[position] = bad
      self.assertIs(module.transition_batch(*arguments), NotImplemented,
                    (position, bad))
    for array, original in zip(_filled((states, returns, is_terminal,
                                        indices_out, rows)), before):
      np.testing.assert_array_equal(array, original)
    with self.assertRaisesRegex(TypeError, r'takes 13 arguments'):
      module.transition_batch(*good[:12])
    self.assertIs(module.transition_batch(*good), True)


class ExtensionArgumentsTest(parameterized.TestCase):
  """The extension checks every buffer before its loops touch one.

  Arguments it does not cover (a dtype, a length, a layout, a tree's
  offsets, an index beyond the tree) give NotImplemented, with nothing
  written; `NativeKernels` then runs NumPy's loop, which raises where the
  arguments are wrong.
  """

  def setUp(self):
    super().setUp()
    self.module = extension.load()
    self.flat, _, self.offsets = kernel_cases.twin_trees(1000, 16, 11)
    self.before = self.flat.copy()

  def assert_untouched(self):
    np.testing.assert_array_equal(self.flat, self.before)

  def test_a_wrong_number_of_arguments_raises(self):
    with self.assertRaisesRegex(TypeError, r'takes 4 arguments \(3 given\)'):
      self.module.update_leaf(self.flat, self.offsets, 16)

  def test_trees_laid_out_otherwise_are_refused(self):
    offsets = self.offsets
    flat = self.flat
    misaligned = np.frombuffer(b'\0' + flat.tobytes(), np.float64,
                               len(flat), 1)
    cases = [
        (flat[:-1], offsets, 16),  # The offsets run past the end.
        (flat, offsets[:-1], 16),  # The top level is not one row.
        (flat, offsets + 8, 16),  # Rows do not fit the levels.
        (flat, offsets * 2, 16),
        (flat, np.array([0, 1008, 1024], np.int64), 16),  # A level short.
        (flat, offsets[:1], 16),  # No level.
        (flat, offsets, 12),  # Not a power of two.
        (flat, offsets, 2048),  # Beyond the C sums' scratch.
        (flat, offsets, 1.5),
        (flat, offsets.astype(np.int32), 16),
        (flat, offsets.astype(np.float64), 16),
        (flat.astype(np.float32), offsets, 16),
        (flat[::2], offsets, 16),  # Strided.
        (misaligned, offsets, 16),
        ([0.0] * len(flat), offsets, 16),  # No buffer.
    ]
    targets = np.array([1.0, 2.0])
    for tree in cases:
      self.assertIs(self.module.update_leaf(*tree, 3), NotImplemented)
      self.assertIs(self.module.update_parents(*tree, np.arange(3)),
                    NotImplemented)
      self.assertIs(self.module.set_leaves(*tree, 1000, np.arange(2),
                                           targets, 1e-6, 1e6),
                    NotImplemented)
      self.assertIs(self.module.descend(*tree, targets, np.empty(2, int)),
                    NotImplemented)
    self.assert_untouched()

  def test_leaves_beyond_the_tree_are_refused(self):
    tree = (self.flat, self.offsets, 16)
    for leaf in (-1, 1008, 2**63 - 1, 2**64, 'a'):
      self.assertIs(self.module.update_leaf(*tree, leaf), NotImplemented)
    for leaves in ([0, 1008], [-1], [2**31 - 1]):
      for dtype in (np.int64, np.int32):
        self.assertIs(self.module.update_parents(
            *tree, np.array(leaves, dtype)), NotImplemented)
    # A capacity beyond the bottom level.
    self.assertIs(self.module.set_leaves(*tree, 1009, np.arange(2),
                                         np.ones(2), 1e-6, 1e6),
                  NotImplemented)
    self.assert_untouched()
    self.assertIsNone(self.module.set_leaves(*tree, 1000, np.array([1000]),
                                             np.ones(1), 1e-6, 1e6))

  def test_outputs_that_do_not_fit_are_refused(self):
    tree = (self.flat, self.offsets, 16)
    uniforms = np.full(4, 0.5)
    lower, width = np.zeros(4), np.ones(4)
    read_only = np.zeros(4, np.int64)
    read_only.flags.writeable = False
    for out in (np.zeros(3, np.int64), np.zeros(5, np.int64),
                np.zeros(4, np.int32), np.zeros(4), read_only,
                np.zeros(8, np.int64)[::2], np.zeros((4, 1), np.int64)):
      before = out.copy()
      self.assertIs(self.module.descend_uniforms(
          *tree, uniforms, lower, width, 1.0, out), NotImplemented)
      self.assertIs(self.module.descend_draws(
          *tree, bytes(32), lower, width, 1.0, out), NotImplemented)
      np.testing.assert_array_equal(out, before)
    out = np.zeros(4, np.int64)
    for words in (bytes(31), bytes(33), bytearray(32), memoryview(bytes(32))):
      self.assertIs(self.module.descend_draws(*tree, words, lower, width, 1.0,
                                              out), NotImplemented)
    for strata in ((lower[:3], width), (lower, width[:3]),
                   (lower.astype(np.float32), width)):
      self.assertIs(self.module.descend_uniforms(
          *tree, uniforms, *strata, 1.0, out), NotImplemented)
    for values in (np.zeros(3), np.zeros(5), np.zeros(4, np.int64)):
      self.assertIs(self.module.get_leaves(self.flat, np.arange(4), values),
                    NotImplemented)

  def test_sampling_arrays_that_do_not_fit_are_refused(self):
    rng = np.random.default_rng(12)
    add_count, episode_end, terminal, indices = kernel_cases.memory_state(
        rng, 50, True, np.uint8)
    valid = np.zeros(len(indices), bool)
    cases = [(indices, 50, add_count, 3, 4, episode_end[:49], terminal),
             (indices, 50, add_count, 3, 4, episode_end, terminal[:49]),
             (indices, 51, add_count, 3, 4, episode_end, terminal),
             (indices, 0, add_count, 3, 4, episode_end, terminal),
             (indices, 50, -1, 3, 4, episode_end, terminal),
             (indices, 50, add_count, -1, 4, episode_end, terminal),
             (indices, 50, add_count, 3, 0, episode_end, terminal),
             (indices, 50, 2**64, 3, 4, episode_end, terminal),
             (indices.astype(np.float64), 50, add_count, 3, 4, episode_end,
              terminal)]
    for arguments in cases:
      self.assertIs(self.module.valid_mask(*arguments, valid), NotImplemented)
      self.assertFalse(valid.any())
    self.assertIs(self.module.valid_mask(
        indices, 50, add_count, 3, 4, episode_end, terminal, valid[:-1]),
                  NotImplemented)
    rewards = rng.standard_normal(50).astype(np.float32)
    discounts = np.ones(3, np.float32)
    count = len(indices)
    outputs = [np.zeros(count, np.int64), np.zeros(count, bool),
               np.zeros(count, np.float32)]
    for k in range(3):
      for bad in (outputs[k][:-1], outputs[k].astype(np.float64)):
        given = list(outputs)
        given[k] = bad
        self.assertIs(self.module.trajectories(
            indices, 50, terminal, rewards, discounts, *given),
                      NotImplemented)
    for arguments in ((51, terminal, rewards, discounts),
                      (50, terminal, rewards[:49], discounts),
                      (50, terminal, rewards, np.ones(8, np.float32))):
      self.assertIs(self.module.trajectories(indices, *arguments, *outputs),
                    NotImplemented)
    for output in outputs:
      self.assertFalse(output.any())

  def test_states_that_do_not_fit_are_refused(self):
    rng = np.random.default_rng(13)
    frames = kernel_cases.frames(rng, 30, (6, 5), np.uint8)
    windows = rng.integers(0, 30, (3, 4))
    for out in (np.zeros((3, 6, 5, 3), np.uint8),
                np.zeros((2, 6, 5, 4), np.uint8),
                np.zeros((3, 5, 6, 4), np.uint8),
                np.zeros((3, 6, 5, 4), np.int8),
                np.zeros((3, 30, 4), np.uint8),
                np.zeros((3, 6, 5, 8), np.uint8)[..., ::2]):
      self.assertIs(self.module.gather_stacks(frames, windows, out),
                    NotImplemented)
      self.assertIs(self.module.stacks_ending_at(frames, windows[:, 0], 4,
                                                 out), NotImplemented)
      self.assertFalse(out.any())
    out = np.zeros((3, 6, 5, 4), np.uint8)
    self.assertIs(self.module.gather_stacks(frames, windows + 30, out), False)
    self.assertFalse(out.any())
    self.assertIs(self.module.stacks_ending_at(frames, windows[:, 0], 0,
                                               out[..., :0]), NotImplemented)

  def test_a_descent_leaving_the_rows_raises_as_numpy_s(self):
    # Mass on a padding node of the top level (a tree set by hand): the
    # descent would leave the level below, which NumPy's indexing refuses.
    flat, offsets = kernel_cases.layout(1000, 16)  # Levels 1008, 64, 16.
    flat[offsets[2] + 10] = 1.0
    for kernels in (NUMPY, NATIVE):
      with self.assertRaises(IndexError):
        kernels.descend(flat, offsets, 16, np.array([0.5]))
      with self.assertRaises(IndexError):
        kernels.descend_uniforms(flat, offsets, 16, np.array([0.5]),
                                 np.zeros(1), np.ones(1), 1.0)


class MemoryKernelsTest(kernel_equivalence.MemoryEquivalence):
  """A memory on NumPy's loops and one on C++'s give the same batches."""

  KERNELS = 'native'



if __name__ == '__main__':
  absltest.main()
