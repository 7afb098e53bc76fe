"""A regression guard for speed that fits CI: interpreted steps, not seconds.

The sum tree and the replay memories must not run a Python loop whose length
is the batch size. The Python lines an operation executes (`sys.settrace`,
NumPy's Python included) are counted exactly where wall-clock time is not,
after one uncounted call at each size:

- from batch `SMALL` to `LARGE` the count may grow by less than one line per
  `_LINES_PER_ELEMENT_BOUND` added elements. A loop over the batch runs at
  least one line per element, so it fails; a loop over a bounded number of
  cases (e.g. the N lengths of truncated n-step returns) stays far below.
- the sum tree's counts may grow with its depth only: from capacity 2**8 to
  2**16 by less than `_DEPTH_GROWTH_BOUND` lines.
- `add` executes the same lines whether the memory holds a hundred
  transitions or is full.
"""

import collections
import gc
import os
import sys

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory import sum_tree
from dopamine_per.replay_memory.kernels import choice

SMALL, LARGE = 32, 2048
# Allowed growth from SMALL to LARGE: (LARGE - SMALL) / 10 = 201 lines.
_LINES_PER_ELEMENT_BOUND = 10
_DEPTH_GROWTH_BOUND = 100
_KERNELS = choice.available()


def count_lines(function):
  """Runs `function()`; returns a Counter of (file name, line) -> runs."""
  counts = collections.Counter()

  def trace_lines(frame, event, arg):
    del arg
    if event == 'line':
      counts[(os.path.basename(frame.f_code.co_filename), frame.f_lineno)] += 1
    return trace_lines

  # A garbage collection during the call would run unrelated finalizers
  # (objects left by earlier tests) and count their lines.
  gc.collect()
  gc.disable()
  previous = sys.gettrace()
  sys.settrace(lambda frame, event, arg: trace_lines)
  try:
    function()
  finally:
    sys.settrace(previous)
    gc.enable()
  return counts


def _growth_message(small, large):
  """Names the lines that ran more often at the larger size."""
  grown = (large - small).most_common(8)
  return 'lines run more often at the larger size: ' + ', '.join(
      f'{name}:{line} (+{n})' for (name, line), n in grown)


class _CountingTestCase(parameterized.TestCase):

  def assert_batch_independent(self, operation):
    """Checks `operation(batch_size)`'s line count at SMALL and LARGE."""
    counts = {}
    for batch_size in (SMALL, LARGE):
      operation(batch_size)  # One-off work is not counted.
      counts[batch_size] = count_lines(lambda b=batch_size: operation(b))
    small, large = (sum(counts[b].values()) for b in (SMALL, LARGE))
    self.assertGreater(small, 0)
    self.assertLess(
        large - small, (LARGE - SMALL) // _LINES_PER_ELEMENT_BOUND,
        f'{small} lines at batch {SMALL}, {large} at batch {LARGE}; ' +
        _growth_message(counts[SMALL], counts[LARGE]))


def _tree(capacity, kernels, seed=0):
  rng = np.random.default_rng(seed)
  tree = sum_tree.SumTree(capacity, rng=rng, kernels=kernels)
  tree.set(np.arange(capacity), 1.0 - rng.random(capacity))
  return tree


# Sum tree operations on a batch: (name, function(tree, rng, batch_size)).
_TREE_OPERATIONS = [
    ('set', lambda tree, rng, b: tree.set(
        rng.choice(tree.capacity, b, replace=False), 1.0 - rng.random(b))),
    ('get', lambda tree, rng, b: tree.get(
        rng.choice(tree.capacity, b, replace=False))),
    ('query', lambda tree, rng, b: tree.query(
        rng.random(b) * tree.total_priority())),
    ('stratified_sample', lambda tree, rng, b: tree.stratified_sample(b)),
    ('sample_batch', lambda tree, rng, b: tree.sample_batch(b)),
]
_SCALAR_SET = ('scalar_set', lambda tree, rng, b: tree.set(5, 0.25))


class GuardTest(_CountingTestCase):
  """The guard itself: it catches a loop over the batch, and only that."""

  def test_catches_a_loop_over_the_batch(self):
    leaves = np.zeros(LARGE)

    def set_one_by_one(batch_size):
      for index in range(batch_size):
        leaves[index] = 1.0

    with self.assertRaisesRegex(AssertionError, 'lines at batch'):
      self.assert_batch_independent(set_one_by_one)

  def test_passes_a_loop_over_a_bounded_number_of_cases(self):
    lengths = np.arange(LARGE) % 3 + 1

    def per_length(batch_size):
      for length in np.unique(lengths[:batch_size]).tolist():
        np.flatnonzero(lengths[:batch_size] == length)

    self.assert_batch_independent(per_length)


class SumTreeOperationCountTest(_CountingTestCase):

  @parameterized.product(kernels=_KERNELS, operation=_TREE_OPERATIONS)
  def test_no_loop_over_the_batch(self, kernels, operation):
    _, function = operation
    tree = _tree(2**14, kernels)
    rng = np.random.default_rng(1)
    self.assert_batch_independent(lambda b: function(tree, rng, b))

  @parameterized.product(kernels=_KERNELS,
                         operation=_TREE_OPERATIONS + [_SCALAR_SET])
  def test_grows_with_depth_only(self, kernels, operation):
    _, function = operation
    totals = {}
    for log2 in (8, 16):
      tree = _tree(2**log2, kernels)
      rng = np.random.default_rng(1)
      function(tree, rng, SMALL)
      totals[log2] = sum(count_lines(
          lambda t=tree: function(t, rng, SMALL)).values())
    self.assertLess(totals[16] - totals[8], _DEPTH_GROWTH_BOUND, totals)


def _filled_memory(kernels, capacity=4096, transitions=3000):
  """A prioritized memory of 8x8 frames, stack 4, 3-step returns.

  Episodes last 50 transitions, so batches hold truncated returns. The
  slots that cannot be sampled get priority 0, so that sampling never
  redraws (redraw rounds are random).
  """
  memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
      (8, 8), 4, capacity, 32, update_horizon=3, rng=0, kernels=kernels)
  frames = np.random.default_rng(0).integers(0, 256, (100, 8, 8),
                                             dtype=np.uint8)
  for t in range(transitions):
    memory.add(frames[t % 100], t % 4, float(t % 3), int(t % 50 == 49), None)
  invalid = np.asarray(memory.invalid_range, dtype=np.int64)
  memory.set_priority(invalid, np.zeros(len(invalid)))
  return memory


class MemoryOperationCountTest(_CountingTestCase):

  @parameterized.parameters(*_KERNELS)
  def test_sampling_and_priorities(self, kernels):
    memory = _filled_memory(kernels)
    rng = np.random.default_rng(2)
    with self.subTest('sample_index_batch'):
      self.assert_batch_independent(memory.sample_index_batch)
    with self.subTest('sample_transition_batch'):
      self.assert_batch_independent(memory.sample_transition_batch)
    with self.subTest('set_priority'):
      self.assert_batch_independent(
          lambda b: memory.set_priority(memory.sample_index_batch(b),
                                        1.0 - rng.random(b)))
    with self.subTest('get_priority'):
      self.assert_batch_independent(
          lambda b: memory.get_priority(memory.sample_index_batch(b)))

  @parameterized.parameters(*_KERNELS)
  def test_add_does_not_grow_with_the_contents(self, kernels):
    memory = _filled_memory(kernels, capacity=1024, transitions=0)
    frame = np.zeros((8, 8), np.uint8)
    totals = []
    for transitions in (100, 5000):  # The second wraps around, twice.
      while memory.add_count < transitions:
        memory.add(frame, 0, 0.0, 0, None)
      totals.append(sum(count_lines(
          lambda: memory.add(frame, 0, 0.0, 0, None)).values()))
    self.assertEqual(totals[0], totals[1])


if __name__ == '__main__':
  absltest.main()
