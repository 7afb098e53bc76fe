"""Tests for dopamine_per.replay_memory.kernels.native_kernels: NumPy's, in C++.

`NativeKernels` must give `NumpyKernels`' results bit for bit, method by
method: on the inputs the C loops take (NumPy's method is not called) and on
those they hand back to NumPy's (checked to be handed back). Sum trees on
either kernels then hold the same trees (native_memory_test's
NativeBatchTest compares whole memories).
"""

import contextlib
import random
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.native import extension
from dopamine_per.replay_memory import sum_tree
from dopamine_per.replay_memory.kernels import native_kernels
from dopamine_per.replay_memory.kernels import numpy_kernels
from tests.support import kernel_cases

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
    for step, leaf in enumerate(rng.integers(0, 1000, 100)):
      ours[leaf] = theirs[leaf] = float(kernel_cases.priorities(rng, 1)[0])
      with _numpy_calls(self, 'update_leaf', 0):  # An np.int64, or an int.
        total = NATIVE.update_leaf(ours, offsets, fanout,
                                   leaf if step % 2 else int(leaf))
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

  def test_a_wrong_number_of_arguments_raises(self):
    with self.assertRaisesRegex(TypeError, r'takes 4 arguments \(3 given\)'):
      self.module.update_parents(self.flat, self.offsets, 16)

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
      self.assertIs(self.module.update_parents(*tree, np.arange(3)),
                    NotImplemented)
      self.assertIs(self.module.set_leaves(*tree, 1000, np.arange(2),
                                           targets, 1e-6, 1e6),
                    NotImplemented)
      self.assertIs(self.module.descend(*tree, targets, np.empty(2, int)),
                    NotImplemented)
    np.testing.assert_array_equal(self.flat, self.before)

  def test_leaves_beyond_the_tree_are_refused(self):
    tree = (self.flat, self.offsets, 16)
    for leaves in ([0, 1008], [-1], [2**31 - 1]):
      for dtype in (np.int64, np.int32):
        self.assertIs(self.module.update_parents(
            *tree, np.array(leaves, dtype)), NotImplemented)
    # A capacity beyond the bottom level.
    self.assertIs(self.module.set_leaves(*tree, 1009, np.arange(2),
                                         np.ones(2), 1e-6, 1e6),
                  NotImplemented)
    np.testing.assert_array_equal(self.flat, self.before)
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


class SumTreeEquivalenceTest(parameterized.TestCase):
  """NumPy's and native trees: same nodes, samples and refusals."""

  def _trees(self, capacity, **kwargs):
    trees = (sum_tree.SumTree(capacity, kernels='numpy', **kwargs),
             sum_tree.SumTree(capacity, kernels='native', **kwargs))
    self.assertEqual([tree._kernels.name for tree in trees],  # pylint: disable=protected-access
                     ['numpy', 'native'])
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
    for kernels in ('numpy', 'native'):
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


if __name__ == '__main__':
  absltest.main()
