"""Tests for dopamine_per.replay_memory.sum_tree."""

import math
import pickle
import random
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
from dopamine.tf.replay_memory import sum_tree as dopamine_sum_tree
import numpy as np

from dopamine_per import errors
from dopamine_per.replay_memory import sum_tree
from tests.support import stats_util


def _snapshot(tree):
  return (tree.get(np.arange(tree.capacity)).copy(),
          tree.max_recorded_priority, tree.total_priority())


def _assert_unchanged(test, tree, before):
  """`tree` still holds `before` (a `_snapshot`) and its sums are right."""
  after = _snapshot(tree)
  np.testing.assert_array_equal(after[0], before[0])
  test.assertEqual(after[1:], before[1:])
  tree.check_invariants()


class DopamineContractTest(parameterized.TestCase):
  """The behaviour code written against Dopamine's SumTree relies on."""

  @parameterized.parameters((0, 'positive'), (-1, 'positive'),
                            (1.5, 'an int'), ('3', 'an int'), (True, 'an int'))
  def test_bad_capacity_raises(self, capacity, message):
    with self.assertRaisesRegex(ValueError, 'capacity should be ' + message):
      sum_tree.SumTree(capacity)

  @parameterized.parameters((1, 1, 1), (2, 2, 2), (3, 3, 4), (100, 8, 128),
                            (128, 8, 128), (129, 9, 256))
  def test_nodes_layout(self, capacity, levels, leaves):
    nodes = sum_tree.SumTree(capacity).nodes
    self.assertLen(nodes, levels)
    self.assertEqual([len(level) for level in nodes],
                     [2**i for i in range(levels)])
    self.assertLen(nodes[-1], leaves)

  def test_nodes_hold_binary_sums(self):
    tree = sum_tree.SumTree(100)
    tree.set(0, 1.0)
    for level in tree.nodes:
      self.assertEqual(level[0], 1.0)
      self.assertTrue(np.all(level[1:] == 0.0))
    tree.set(99, 2.5)
    nodes = tree.nodes
    self.assertEqual(nodes[0][0], 3.5)
    for parent, children in zip(nodes[:-1], nodes[1:]):
      np.testing.assert_array_equal(parent, children.reshape(-1, 2).sum(1))

  def test_set_and_get(self):
    tree = sum_tree.SumTree(1)
    tree.set(0, 1.5)
    self.assertEqual(tree.get(0), 1.5)
    self.assertEqual(tree.total_priority(), 1.5)
    self.assertEqual(tree._total_priority(), 1.5)

  def test_sample_from_empty_tree_raises(self):
    tree = sum_tree.SumTree(10)
    with self.assertRaisesRegex(ValueError, 'empty sum tree'):
      tree.sample()
    with self.assertRaisesRegex(ValueError, 'empty sum tree'):
      tree.stratified_sample(4)
    tree.set(3, 1.0)
    tree.set(3, 0.0)
    with self.assertRaisesRegex(ValueError, 'empty sum tree'):
      tree.sample()

  @parameterized.parameters(-0.1, 1.1, float('nan'))
  def test_sample_with_invalid_query_value_raises(self, query_value):
    tree = sum_tree.SumTree(10)
    tree.set(5, 1.0)
    with self.assertRaisesRegex(ValueError, r'query_value must be in \[0, 1\]'):
      tree.sample(query_value=query_value)

  def test_sample_with_query_value(self):
    tree = sum_tree.SumTree(100)
    tree.set(5, 1.0)
    self.assertIsInstance(tree.sample(), int)
    for query_value in (0.0, 1.0, None):
      self.assertEqual(tree.sample(query_value), 5)
    tree.set(np.arange(2, 6), [1.0, 3.0, 0.0, 0.0])
    self.assertEqual(tree.sample(query_value=0.1), 2)
    self.assertEqual(tree.sample(query_value=0.25), 3)  # Edges go right.
    self.assertEqual(tree.sample(query_value=0.9), 3)

  def test_stratified_sampling_of_equal_priorities(self):
    tree = sum_tree.SumTree(100)
    for i in range(32):
      tree.set(i, 1)
    samples = tree.stratified_sample(32)
    self.assertLen(samples, 32)
    np.testing.assert_array_equal(samples, np.arange(32))

  def test_max_recorded_priority(self):
    tree = sum_tree.SumTree(100)
    tree.set(0, 0)
    self.assertEqual(tree.max_recorded_priority, 1)
    for i in range(1, 32):
      tree.set(i, i)
      self.assertEqual(tree.max_recorded_priority, i)
    tree.set(np.arange(3), [0.5, 40.0, 2.0])
    self.assertEqual(tree.max_recorded_priority, 40.0)


class DopamineEquivalenceTest(parameterized.TestCase):
  """Same operations and `random` seed: the same answers as Dopamine's tree."""

  @parameterized.parameters((1,), (7,), (100,), (1000,), (4097,))
  def test_same_samples_as_dopamine(self, capacity):
    rng = np.random.default_rng(capacity)
    ours = sum_tree.SumTree(capacity)
    theirs = dopamine_sum_tree.SumTree(capacity)
    # Multiples of 1/8 keep every partial sum exact in both trees, so any
    # difference would come from the descent, not from rounding.
    for _ in range(3 * capacity):
      index = int(rng.integers(capacity))
      value = float(rng.integers(0, 40)) / 8.0
      ours.set(index, value)
      theirs.set(index, value)
    ours.set(0, 1.0)
    theirs.set(0, 1.0)
    for level_ours, level_theirs in zip(ours.nodes, theirs.nodes):
      np.testing.assert_array_equal(level_ours, level_theirs)
    self.assertEqual(ours.max_recorded_priority, theirs.max_recorded_priority)
    for seed in range(5):
      random.seed(seed)
      expected = theirs.stratified_sample(33)
      expected_single = [theirs.sample() for _ in range(10)]
      after = random.random()
      random.seed(seed)
      np.testing.assert_array_equal(ours.stratified_sample(33), expected)
      self.assertEqual([ours.sample() for _ in range(10)], expected_single)
      self.assertEqual(random.random(), after)  # Same draws consumed.
    for query_value in np.linspace(0.0, 1.0, 101)[:-1]:
      self.assertEqual(ours.sample(query_value), theirs.sample(query_value))

  def test_sample_batch_equals_repeated_sample(self):
    tree = sum_tree.SumTree(500)
    tree.set(np.arange(500), np.arange(500) % 7)
    random.seed(3)
    expected = [tree.sample() for _ in range(40)]
    random.seed(3)
    np.testing.assert_array_equal(tree.sample_batch(40), expected)
    self.assertEqual(tree.sample_batch(0).shape, (0,))
    with self.assertRaisesRegex(ValueError, 'batch_size'):
      tree.sample_batch(-1)


class BatchTest(absltest.TestCase):

  def test_batch_set_and_get(self):
    tree = sum_tree.SumTree(1000)
    indices = np.array([3, 999, 0, 512], dtype=np.int32)
    tree.set(indices, [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(tree.get(indices), [1.0, 2.0, 3.0, 4.0])
    self.assertEqual(tree.get(np.int64(999)), 2.0)
    self.assertEqual(tree.total_priority(), 10.0)
    tree.set(np.arange(1000, dtype=np.uint16), 0.5)  # Broadcast scalar.
    self.assertEqual(tree.total_priority(), 500.0)
    np.testing.assert_array_equal(
        tree.get(np.array([[1, 2], [3, 4]])), np.full((2, 2), 0.5))
    tree.check_invariants()

  def test_repeated_indices_last_value_wins(self):
    tree = sum_tree.SumTree(100)
    tree.set([7, 7, 9, 7], [1.0, 2.0, 5.0, 3.0])
    self.assertEqual(tree.get(7), 3.0)
    self.assertEqual(tree.total_priority(), 8.0)
    tree.check_invariants()

  def test_empty_batch_is_a_no_op(self):
    tree = sum_tree.SumTree(10)
    tree.set([], [])
    tree.set(np.zeros(0, dtype=np.int64), 3.0)
    self.assertEqual(tree.total_priority(), 0.0)
    self.assertEqual(tree.get([]).shape, (0,))

  def test_query_is_inverse_cdf(self):
    tree = sum_tree.SumTree(10)
    tree.set(np.arange(10), [0, 1, 0, 0, 2, 0, 1, 0, 0, 0])
    targets = np.array([0.0, 0.5, 0.999, 1.0, 2.9, 3.0, 3.5, 4.0])
    np.testing.assert_array_equal(tree.query(targets),
                                  [1, 1, 1, 4, 4, 6, 6, 6])
    self.assertEqual(tree.query(np.array([[0.2], [3.2]])).shape, (2, 1))

  def test_bad_query_targets_and_batch_sizes_raise(self):
    tree = sum_tree.SumTree(10)
    tree.set(1, 1.0)
    for bad in (-0.5, 1.5, float('nan')):
      with self.assertRaisesRegex(ValueError, 'query targets'):
        tree.query([0.5, bad])
    for bad in (0, -3, 2.0, True):
      with self.assertRaisesRegex(ValueError, 'batch_size'):
        tree.stratified_sample(bad)


class BadInputTest(parameterized.TestCase):
  """Bad input raises, names the bad value and writes nothing."""

  def setUp(self):
    super().setUp()
    self.tree = sum_tree.SumTree(100)
    self.tree.set(np.arange(100), np.linspace(0.1, 2.0, 100))
    self.before = _snapshot(self.tree)

  def tearDown(self):
    _assert_unchanged(self, self.tree, self.before)
    super().tearDown()

  @parameterized.parameters(-1.0, float('nan'), float('inf'), float('-inf'))
  def test_bad_value(self, value):
    with self.assertRaisesRegex(ValueError, 'nonnegative and finite'):
      self.tree.set(3, value)
    with self.assertRaisesRegex(ValueError, str(value)):
      self.tree.set([1, 2, 3], [5.0, value, 7.0])

  @parameterized.parameters(-1, 100, 10**12)
  def test_out_of_range_index(self, index):
    with self.assertRaisesRegex(IndexError, r'\[0, 100\).*{}'.format(index)):
      self.tree.set(index, 1.0)
    with self.assertRaisesRegex(ValueError, str(index)):
      self.tree.set([0, index], [9.0, 9.0])
    with self.assertRaises(IndexError):
      self.tree.get(index)
    with self.assertRaises(errors.InvalidIndexError):
      self.tree.get(np.array([index]))

  @parameterized.parameters(1.5, 2.0, '3', None)
  def test_non_integer_index(self, index):
    with self.assertRaisesRegex(TypeError, 'integer'):
      self.tree.set(index, 1.0)
    with self.assertRaisesRegex(ValueError, 'integer'):
      self.tree.get(index)

  def test_non_integer_index_array(self):
    with self.assertRaisesRegex(TypeError, r'integers.*float64.*1\.5'):
      self.tree.set(np.array([1.5, 2.0]), [1.0, 1.0])
    with self.assertRaises(errors.InvalidIndexTypeError):
      self.tree.set(np.array([True, False]), [1.0, 1.0])

  def test_shape_mismatch(self):
    with self.assertRaisesRegex(ValueError, 'do not fit'):
      self.tree.set([1, 2, 3], [1.0, 2.0])

  def test_state_with_two_faults_names_max_recorded_priority_first(self):
    # docs/reliability.md: checked before the total, which overflows here.
    tree = sum_tree.SumTree(4)
    leaves = np.array([1e308, 1e308, 0.0, 0.0])
    with self.assertRaisesRegex(ValueError, 'Invalid max_recorded_priority'):
      tree.set_state({'nodes': [leaves], 'max_recorded_priority': 0.5})
    with self.assertRaisesRegex(ValueError, 'infinite'):
      tree.set_state({'nodes': [leaves], 'max_recorded_priority': 1e308})
    self.assertEqual(tree.total_priority(), 0.0)

  def test_bad_state(self):
    good = self.tree.get_state()
    for state in ({'nodes': good['nodes'][:-1] + [good['nodes'][-1][:64]],
                   'max_recorded_priority': 2.0},
                  {'nodes': good['nodes']},
                  {'nodes': [np.full(128, np.nan)],
                   'max_recorded_priority': 2.0},
                  {'nodes': [np.ones(128)], 'max_recorded_priority': 2.0},
                  {'nodes': good['nodes'], 'max_recorded_priority': -1.0}):
      with self.assertRaises(ValueError):
        self.tree.set_state(state)


class ExactnessTest(absltest.TestCase):

  def test_ten_million_updates_do_not_drift(self):
    capacity = 2**16
    tree = sum_tree.SumTree(capacity)
    rng = np.random.default_rng(0)
    batch = 4096
    for _ in range(10_000_000 // batch + 1):
      indices = rng.integers(0, capacity, batch)
      # Values over twelve decades make absorbed low bits likely.
      values = 10.0 ** rng.uniform(-6.0, 6.0, batch)
      tree.set(indices, values)
    exact = math.fsum(tree.get(np.arange(capacity)))
    self.assertLess(abs(tree.total_priority() - exact), 1e-12 * exact)
    tree.check_invariants()

  def test_dopamine_drifts_where_we_do_not(self):
    # The reason for recomputing parents: adding deltas leaves residue.
    ours = sum_tree.SumTree(4)
    theirs = dopamine_sum_tree.SumTree(4)
    for tree in (ours, theirs):
      tree.set(0, 1e16)
      tree.set(1, 1.0)
      tree.set(0, 0.0)
    self.assertEqual(ours.total_priority(), 1.0)
    self.assertNotEqual(theirs.nodes[0][0], 1.0)


class NeverReturnsZeroTest(parameterized.TestCase):
  """No rounding at a stratum or node edge yields zero mass or padding."""

  @parameterized.parameters(1, 31, 33, 1000, 2**15 + 3)
  def test_sparse_trees(self, capacity):
    rng = np.random.default_rng(capacity)
    tree = sum_tree.SumTree(capacity, rng=1)
    positive = rng.random(capacity) < 0.05
    positive[-1] = True  # The last leaf is the edge case for target == total.
    values = np.where(positive, 10.0 ** rng.uniform(-300, 300, capacity), 0.0)
    tree.set(np.arange(capacity), values)
    samples = np.concatenate([
        tree.stratified_sample(1000),
        tree.query(np.array([0.0, tree.total_priority()])),
        [tree.sample(1.0), tree.sample(0.0)],
    ])
    self.assertTrue(np.all(samples < capacity))
    self.assertTrue(np.all(tree.get(samples) > 0.0))

  def test_targets_on_every_edge(self):
    tree = sum_tree.SumTree(1000)
    values = np.zeros(1000)
    values[::7] = 0.1  # Inexact in binary: edges land on rounded sums.
    tree.set(np.arange(1000), values)
    edges = np.cumsum(tree.get(np.arange(1000)))
    targets = np.clip(np.concatenate([edges, np.nextafter(edges, 0),
                                      np.nextafter(edges, np.inf)]),
                      0.0, tree.total_priority())
    self.assertTrue(np.all(tree.get(tree.query(targets)) > 0.0))

  def test_right_edge_where_dopamine_returns_padding(self):
    ours, theirs = sum_tree.SumTree(5), dopamine_sum_tree.SumTree(5)
    ours.set(0, 1.0)
    theirs.set(0, 1.0)
    self.assertGreaterEqual(theirs.sample(query_value=1.0), 5)
    self.assertEqual(ours.sample(query_value=1.0), 0)

  def test_one_positive_leaf_among_padding(self):
    tree = sum_tree.SumTree(33)
    tree.set(32, 1e-300)
    np.testing.assert_array_equal(tree.stratified_sample(64), [32] * 64)


class DistributionTest(parameterized.TestCase):
  """Sampling frequencies follow the priorities (chi-square, p=1e-6)."""

  @parameterized.parameters('stratified', 'single', 'batch')
  def test_sample_frequencies(self, method):
    capacity = 50
    rng = np.random.default_rng(7)
    weights = rng.random(capacity) * (rng.random(capacity) < 0.8)
    tree = sum_tree.SumTree(capacity, rng=np.random.default_rng(123))
    tree.set(np.arange(capacity), weights)
    if method == 'stratified':
      samples = np.concatenate(
          [tree.stratified_sample(64) for _ in range(300)])
    elif method == 'batch':
      samples = tree.sample_batch(20000)
    else:
      samples = np.array([tree.sample() for _ in range(20000)])
    stats_util.assert_matches_distribution(self, samples, weights)


class RngAndStateTest(absltest.TestCase):

  def _tree(self, rng):
    tree = sum_tree.SumTree(300, rng=rng)
    tree.set(np.arange(300), np.arange(300) % 13)
    return tree

  def test_seeded_rng_is_reproducible_and_ignores_random_module(self):
    a, b = self._tree(5), self._tree(np.random.default_rng(5))
    random.seed(0)
    first = a.stratified_sample(40)
    random.seed(1)
    np.testing.assert_array_equal(b.stratified_sample(40), first)

  def test_state_round_trip_continues_the_stream(self):
    tree = self._tree(11)
    tree.stratified_sample(8)
    state = pickle.loads(pickle.dumps(tree.get_state()))
    expected = tree.stratified_sample(16)
    restored = sum_tree.SumTree(300, rng=99)
    restored.set_state(state)
    np.testing.assert_array_equal(restored.stratified_sample(16), expected)
    self.assertEqual(restored.max_recorded_priority, 12.0)
    restored.check_invariants()

  def test_state_from_dopamine_tree(self):
    theirs = dopamine_sum_tree.SumTree(300)
    for i in range(300):
      theirs.set(i, 0.1 * (i % 13))
    ours = sum_tree.SumTree(300)
    ours.set_state(dict(theirs.__dict__))
    np.testing.assert_array_equal(ours.get(np.arange(300)),
                                  theirs.nodes[-1][:300])
    self.assertEqual(ours.max_recorded_priority, theirs.max_recorded_priority)
    ours.check_invariants()


class PriorityValuesTest(parameterized.TestCase):
  """Issue 12: every value reaching the tree is a priority it can hold."""

  def setUp(self):
    super().setUp()
    self.tree = sum_tree.SumTree(20)
    self.tree.set(np.arange(3), [1.0, 2.0, 3.0])

  def assert_refused(self, regex, function, *args):
    before = _snapshot(self.tree)
    with self.assertRaisesRegex(ValueError, regex):
      function(*args)
    _assert_unchanged(self, self.tree, before)

  def test_finite_priorities_whose_sum_overflows(self):
    # Was accepted: the total became inf and every sample slot 16 (or 1),
    # whatever the priorities.
    self.assert_refused(r'\[1e\+308, 1e\+308, 0\.0\].*\[0, 1, 16\].*infinite',
                        self.tree.set, [0, 1, 16], [1e308, 1e308, 0.0])
    self.tree.set(0, 1e308)
    self.assert_refused('infinite', self.tree.set, 1, 1e308)
    self.assert_refused('infinite', self.tree.set, np.array([1]), [1e308])
    self.tree.set(np.array([0, 1]), [1e308, 7e307])  # A finite total.
    self.assertEqual(self.tree.total_priority(), 1e308 + 7e307 + 3.0)
    self.tree.check_invariants()

  @parameterized.named_parameters(
      ('string', '1e3'), ('bytes', b'3'), ('complex', 1 + 0j),
      ('numpy_complex', np.complex128(2.0)), ('bool', True),
      ('numpy_bool', np.bool_(True)), ('none', None))
  def test_not_real_numbers(self, value):
    # Strings and bytes were parsed, complex numbers lost their imaginary
    # part, bools counted as 1.
    for indices, values in ((5, value), (np.array([5]), [value]),
                            (np.array([5, 6]), value),
                            (np.array([5, 6]), np.array([value, value]))):
      self.assert_refused('value should be real numbers', self.tree.set,
                          indices, values)

  @parameterized.parameters(10**400, -10**400)
  def test_int_beyond_any_float(self, value):
    # Was an OverflowError.
    self.assert_refused(r'value should be nonnegative and finite.*10\*\*400',
                        self.tree.set, 5, value)
    self.assert_refused(r'value should be nonnegative and finite.*10\*\*400',
                        self.tree.set, np.array([5]), [value])

  def test_real_numbers_of_any_kind(self):
    self.tree.set(np.array([5, 6, 7]), [2**64, np.float32(0.5), 3])
    self.tree.set(8, np.int8(4))
    self.tree.set(9, np.array(2.5))
    np.testing.assert_array_equal(self.tree.get(np.arange(5, 10)),
                                  [2.0**64, 0.5, 3.0, 4.0, 2.5])
    self.tree.check_invariants()

  @parameterized.parameters(1e308, 3.5e38, 5e-324, 1e-46, -1e-46)
  def test_float32_range(self, value):
    # With priority_dtype float32 (the prioritized memory's tree): would read
    # back as inf or 0 in float32.
    self.tree = sum_tree.SumTree(20, priority_dtype=np.float32)
    self.assert_refused(r'0 or in \[1.4\d*e-45, 3.40282\d*e\+38\].*float32',
                        self.tree.set, 3, value)
    self.assert_refused('float32', self.tree.set, np.array([3]), [value])

  def test_float32_range_edges_are_accepted(self):
    self.tree = sum_tree.SumTree(20, priority_dtype=np.float32)
    info = np.finfo(np.float32)
    edges = [0.0, float(info.smallest_subnormal), float(info.max)]
    self.tree.set(np.arange(3), edges)
    np.testing.assert_array_equal(self.tree.get(np.arange(3)), edges)
    self.tree.set(5, float(info.smallest_subnormal))
    self.assertEqual(self.tree.get(5), float(info.smallest_subnormal))

  @parameterized.parameters(np.int32, np.longdouble, 'bogus', np.complex64)
  def test_bad_priority_dtype(self, dtype):
    with self.assertRaisesRegex(ValueError, 'priority_dtype'):
      sum_tree.SumTree(4, priority_dtype=dtype)


class StrataCacheTest(absltest.TestCase):
  """Issue 12: per-batch-size arrays are cached for small sizes only."""

  def test_large_batch_sizes_are_not_cached(self):
    # Each size of 500,000 kept 8 MB in the cache, 64 sizes at a time.
    tree = sum_tree.SumTree(100, rng=0)
    tree.set(np.arange(100), 1.0)
    sum_tree._cached_strata.cache_clear()
    for size in range(sum_tree._CACHED_BATCH_SIZE + 1,
                      sum_tree._CACHED_BATCH_SIZE + 4):
      self.assertLen(tree.stratified_sample(size), size)
      self.assertLen(tree.sample_batch(size), size)
    self.assertEqual(sum_tree._cached_strata.cache_info().currsize, 0)
    tree.stratified_sample(32)
    tree.stratified_sample(32)
    self.assertEqual(sum_tree._cached_strata.cache_info().hits, 1)


def _run_with_kernels(test_class, kernels):
  """A copy of `test_class` whose sum trees get `kernels` as argument."""

  class Tree(sum_tree.SumTree):

    def __init__(self, *args, **kwargs):
      kwargs.setdefault('kernels', kernels)
      super().__init__(*args, **kwargs)

  def set_up(self):
    patcher = mock.patch.object(sum_tree, 'SumTree', Tree)
    patcher.start()
    self.addCleanup(patcher.stop)
    self.assertEqual(sum_tree.SumTree(1)._kernels.name, kernels)
    test_class.setUp(self)

  name = '{}_{}'.format(test_class.__name__, kernels)
  return type(name, (test_class,), {'setUp': set_up, '__qualname__': name})


# Every test above runs with each kernel set.
for _test_class in [value for value in list(globals().values())
                    if isinstance(value, type) and
                    issubclass(value, absltest.TestCase)]:
  for _kernels in ('numpy', 'native'):
    _variant = _run_with_kernels(_test_class, _kernels)
    globals()[_variant.__name__] = _variant
  del globals()[_test_class.__name__]


if __name__ == '__main__':
  absltest.main()
