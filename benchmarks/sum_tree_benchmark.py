r"""Benchmarks dopamine_per's SumTree against its peers, side by side.

Part of `python -m benchmarks` (see benchmarks/__main__.py), which writes
benchmarks/RESULTS.md. This section alone, printed and not written:

  python -m benchmarks.sum_tree_benchmark
  python -m benchmarks.sum_tree_benchmark --capacities_log2=20 --rounds=20

For trees of 2**17 and 2**20 priorities (uniform in (0, 1]) and batches of
32 and 256 it times, in one process:

* `set` of a batch of priorities at distinct random indices, `get` of a
  batch, `stratified_sample` of a batch (one draw per equal stratum of the
  total), and `fill`: setting every priority;
* on `ours-native` (the default) and `ours-numpy`, dopamine_per's SumTree
  with each of its kernels; `dopamine`, Dopamine 4.1.2's TF SumTree driven
  one index per call as its prioritized buffer drives it; `cpprb`, cpprb's
  PrioritizedReplayBuffer over a 1-byte observation with alpha = 1
  (`update_priorities` to set and fill, `sample` to sample; it has no batch
  `get`, and its `sample` also computes importance weights with a min tree
  and gathers the observations); and `naive`, `NaiveSumTree` below, the
  textbook tree walked one index and one level at a time in Python.

Every call of set/get takes the next batch from a pool of pre-drawn batches
(1024 by default), so that no implementation is flattered by finding the
same tree paths in its caches. Cases are interleaved in shuffled rounds
(`timing.run_interleaved`); the tables give the median microseconds per
call and the ratios of medians, peer / ours (above 1: ours is faster).
"""

import math
import os
import random
import sys

from absl import app
from absl import flags
import numpy as np

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import timing  # pylint: disable=g-import-not-at-top
# The peers' and the machine's helpers, importable from here as before.
from benchmarks.common import cpprb_available  # pylint: disable=g-import-not-at-top
from benchmarks.common import describe_machine  # pylint: disable=g-import-not-at-top
from benchmarks.common import dopamine_available  # pylint: disable=g-import-not-at-top
from dopamine_per.replay_memory import sum_tree  # pylint: disable=g-import-not-at-top

__all__ = [
    'CpprbSumTreeAdapter',
    'DopamineSumTreeAdapter',
    'NaiveSumTree',
    'OPERATIONS',
    'PEERS',
    'check_same_queries',
    'cpprb_available',
    'define_flags',
    'describe_machine',
    'dopamine_available',
    'format_results',
    'format_section',
    'run_benchmark',
]

OPERATIONS = ('set', 'get', 'stratified_sample', 'fill')
# Peers, in table order, with their column titles.
PEERS = ('dopamine', 'cpprb', 'naive')
TITLES = {
    'ours-native': 'ours-native',
    'ours-numpy': 'ours-numpy',
    'dopamine': 'Dopamine TF',
    'cpprb': 'cpprb',
    'naive': 'naive',
}

# Issue 3's targets, at capacity 2**20, on set and stratified_sample at
# batch 32 and 256: at least as fast as cpprb, and 20x faster than Dopamine.
TARGET_CAPACITY = 2**20
TARGET_BATCH_SIZES = (32, 256)
TARGET_OPERATIONS = ('set', 'stratified_sample')
REQUIRED_OVER_CPPRB = 1.0
REQUIRED_OVER_DOPAMINE = 20.0
# Issue 24's, at the same capacity, operations and batch sizes: 1.25x
# faster than cpprb.
REQUIRED_OVER_CPPRB_NATIVE = 1.25
# Issue 2's target: 20x faster than the naive tree at batch 256, on set, get
# and stratified_sample.
REQUIRED_OVER_NAIVE = 20.0
REQUIRED_OVER_NAIVE_BATCH = 256


def define_flags():
  """Defines the command-line flags (only when run as a program)."""
  flags.DEFINE_list('capacities_log2', ['17', '20'],
                    'Tree capacities, as powers of two, comma-separated.')
  flags.DEFINE_list('batch_sizes', ['32', '256'],
                    'Batch sizes to time, comma-separated.')
  flags.DEFINE_integer('rounds', 40, 'Interleaved rounds.')
  flags.DEFINE_float('burst_seconds', 0.005,
                     'Approximate duration of one measurement.')
  flags.DEFINE_integer('seed', 0, 'Seed for the data and the order.')
  common.define_output_flag()


class NaiveSumTree:
  """The textbook sum tree, processing one index at a time in Python.

  `levels[0]` holds the root, `levels[-1]` the leaves (the priorities); node
  `i` of level `d` has children `2i` and `2i + 1` in level `d + 1`. Each
  method loops over its batch in Python and, for `set` and the sampling,
  over the tree's levels: O(batch_size * depth) interpreted steps. It is the
  baseline of this benchmark only.
  """

  def __init__(self, capacity, rng):
    """Creates a tree with all priorities zero.

    Args:
      capacity: int, number of leaves (rounded up to a power of two inside).
      rng: numpy.random.Generator for the sampling.
    """
    self.capacity = capacity
    self.depth = max(1, math.ceil(math.log2(capacity)))
    self.levels = [np.zeros(2**d) for d in range(self.depth + 1)]
    self._rng = rng

  def load(self, priorities):
    """Sets all leaves at once and rebuilds the inner nodes (setup only)."""
    self.levels[-1][:len(priorities)] = priorities
    for d in range(self.depth - 1, -1, -1):
      self.levels[d][:] = self.levels[d + 1].reshape(-1, 2).sum(axis=1)

  def set(self, indices, values):
    """Sets leaf `indices[k]` to `values[k]`, updating its ancestors."""
    levels = self.levels
    for index, value in zip(indices, values):
      index = int(index)
      levels[-1][index] = value
      for d in range(self.depth - 1, -1, -1):
        index //= 2
        levels[d][index] = (levels[d + 1][2 * index] +
                            levels[d + 1][2 * index + 1])

  def get(self, indices):
    """Returns the priorities at `indices`, one lookup per index."""
    leaves = self.levels[-1]
    return np.array([leaves[int(index)] for index in indices])

  def query_one(self, target):
    """Returns the leaf whose prefix-sum interval contains `target`."""
    index = 0
    for d in range(1, self.depth + 1):
      left = self.levels[d][2 * index]
      if target < left:
        index = 2 * index
      else:
        target -= left
        index = 2 * index + 1
    return index

  def stratified_sample(self, batch_size):
    """Draws one target per equal slice of the total; descends for each."""
    total = self.levels[0][0]
    bounds = np.linspace(0.0, total, batch_size + 1)
    targets = self._rng.uniform(bounds[:-1], bounds[1:])
    return np.array([self.query_one(target) for target in targets])


class DopamineSumTreeAdapter:
  """Dopamine 4.1.2's own TF SumTree, driven as its prioritized buffer does.

  `dopamine.tf.replay_memory.sum_tree.SumTree` takes one index per call;
  Dopamine's `set_priority` and `get_priority` loop over the batch in
  Python, and so does this adapter. Its `stratified_sample` draws from
  Python's global `random` (seeded by `run_benchmark`).
  """

  def __init__(self, capacity):
    from dopamine.tf.replay_memory import sum_tree as dopamine_sum_tree  # pylint: disable=g-import-not-at-top
    self._tree = dopamine_sum_tree.SumTree(capacity)

  def load(self, priorities):
    """Sets all leaves at once and rebuilds the inner nodes (setup only).

    Writes Dopamine's `nodes` levels directly: the timed `fill` operation
    is what setting them through its scalar `set` costs.
    """
    nodes = self._tree.nodes
    nodes[-1][:len(priorities)] = priorities
    for d in range(len(nodes) - 2, -1, -1):
      nodes[d][:] = nodes[d + 1].reshape(-1, 2).sum(axis=1)
    self._tree.max_recorded_priority = max(
        self._tree.max_recorded_priority, float(np.max(priorities)))

  def set(self, indices, values):
    for index, value in zip(indices, values):
      self._tree.set(index, value)

  def get(self, indices):
    return np.array([self._tree.get(index) for index in indices])

  def stratified_sample(self, batch_size):
    return self._tree.stratified_sample(batch_size)


class CpprbSumTreeAdapter:
  """cpprb's PrioritizedReplayBuffer, as a sum tree.

  cpprb keeps its priorities in C++ segment trees (a sum tree and a min
  tree, float32) inside a replay buffer, so the buffer here stores a 1-byte
  observation per slot and is full. With alpha = 1 a stored priority is the
  given one plus cpprb's eps (1e-4). `set` is `update_priorities`;
  `stratified_sample` is `sample`, which also computes the importance
  weights (with the min tree) and gathers the 1-byte observations. cpprb
  has no batch `get`.
  """

  def __init__(self, capacity):
    import cpprb  # pylint: disable=g-import-not-at-top
    self._buffer = cpprb.PrioritizedReplayBuffer(
        capacity, {'obs': {'shape': 1, 'dtype': np.uint8}}, alpha=1.0)
    self._buffer.add(obs=np.zeros((capacity, 1), np.uint8))
    self.capacity = capacity

  def load(self, priorities):
    """Sets all priorities (setup)."""
    self.set(np.arange(len(priorities)), priorities)

  def set(self, indices, values):
    self._buffer.update_priorities(indices, values)

  def stratified_sample(self, batch_size):
    return self._buffer.sample(batch_size)['indexes']


def check_same_queries(ours, naive, rng, num_targets=2000):
  """Checks that both trees map the same targets to the same leaves.

  Makes sure the benchmark compares trees holding the same priorities.

  Args:
    ours: sum_tree.SumTree.
    naive: NaiveSumTree with the same priorities.
    rng: numpy.random.Generator.
    num_targets: int, number of random targets tried.

  Returns:
    int, the number of targets on which the two trees disagree (a few are
    possible where a target falls within rounding error of a boundary).
  """
  targets = rng.uniform(0.0, naive.levels[0][0], size=num_targets)
  expected = np.array([naive.query_one(t) for t in targets])
  return int(np.sum(np.asarray(ours.query(targets)) != expected))


def _priorities(rng, size):
  """Priorities uniform in (0, 1]."""
  return 1.0 - rng.random(size)


def _case(tree, operation, batch_size, pool, fill_pool):
  """Returns the callable timing `operation` on `tree`, or None."""
  if operation == 'set':
    return timing.rotating(pool, tree.set)
  if operation == 'get':
    if not hasattr(tree, 'get'):
      return None
    return timing.rotating(pool, lambda indices, _: tree.get(indices))
  if operation == 'stratified_sample':
    return lambda: tree.stratified_sample(batch_size)
  if operation == 'fill':
    return timing.rotating(fill_pool, tree.set)
  raise ValueError(f'Unknown operation {operation!r}')


def _make_trees(capacity, implementations, priorities, seed):
  """Returns {implementation: tree} holding `priorities`."""
  trees = {}
  for name in implementations:
    if common.kernels_of(name):
      tree = sum_tree.SumTree(capacity, rng=np.random.default_rng(seed),
                              kernels=common.kernels_of(name))
      tree.set(np.arange(capacity), priorities)
    elif name == 'dopamine':
      tree = DopamineSumTreeAdapter(capacity)
      tree.load(priorities)
    elif name == 'cpprb':
      tree = CpprbSumTreeAdapter(capacity)
      tree.load(priorities)
    elif name == 'naive':
      tree = NaiveSumTree(capacity, np.random.default_rng(seed))
      tree.load(priorities)
    else:
      raise ValueError(f'Unknown implementation {name!r}')
    trees[name] = tree
  return trees


def default_implementations():
  """Ours with every available kernel, and every installed peer."""
  names = common.available_ours()
  if dopamine_available():
    names.append('dopamine')
  if cpprb_available():
    names.append('cpprb')
  return names + ['naive']


def run_benchmark(capacities, batch_sizes, rounds, burst_seconds, seed,
                  implementations=None, pool_size=1024, slow_case_seconds=8.0,
                  progress=None):
  """Times the trees; returns the median µs per call of every case.

  Args:
    capacities: sequence of ints, the tree sizes.
    batch_sizes: sequence of ints.
    rounds: int, number of interleaved rounds.
    burst_seconds: float, approximate length of one measurement.
    seed: int, seed for the priorities, the inputs and the order of cases.
    implementations: names to time (see the module docstring); None for
      `default_implementations()`.
    pool_size: int, pre-drawn batches of indices and priorities per batch
      size, used in turn.
    slow_case_seconds: float; a case that has taken this long in total is
      timed in 3 rounds only (Dopamine's and naive's `fill` at 2**20 take
      seconds per call).
    progress: optional callable taking a str, for progress messages.

  Returns:
    dict mapping (operation, capacity, batch_size, implementation) to the
    median time in microseconds (batch_size is the capacity for `fill`);
    'rounds' to {that key: the number of rounds it was timed in}; and
    'query_mismatches' to the worst result of `check_same_queries`.
  """
  if implementations is None:
    implementations = default_implementations()
  rng = np.random.default_rng(seed)
  if 'dopamine' in implementations:
    random.seed(seed)
  cases = {}
  mismatches = 0
  for capacity in capacities:
    priorities = _priorities(rng, capacity)
    trees = _make_trees(capacity, implementations, priorities, seed + 1)
    reference = NaiveSumTree(capacity, rng)
    reference.load(priorities)
    mismatches = max([mismatches] + [
        check_same_queries(tree, reference, rng)
        for name, tree in trees.items() if common.kernels_of(name)])
    # Fresh values for `fill`, two arrays used in turn.
    fill_pool = [(np.arange(capacity), _priorities(rng, capacity))
                 for _ in range(2)]
    for batch_size in batch_sizes:
      pool = [(rng.choice(capacity, size=batch_size, replace=False),
               _priorities(rng, batch_size)) for _ in range(pool_size)]
      for operation in OPERATIONS:
        if operation == 'fill' and batch_size != batch_sizes[0]:
          continue
        size = capacity if operation == 'fill' else batch_size
        for name, tree in trees.items():
          call = _case(tree, operation, batch_size, pool, fill_pool)
          if call is None:
            continue
          cases[(operation, capacity, size, name)] = timing.Case(
              call, common.kernels_environ(common.kernels_of(name)),
              max_seconds=slow_case_seconds)
  if progress:
    progress(f'sum tree: {len(cases)} cases, {rounds} rounds')
  samples = timing.run_interleaved(cases, rounds, burst_seconds, rng,
                                   progress=progress)
  results = {key: timing.median(times) for key, times in samples.items()}
  results['rounds'] = {key: len(times) for key, times in samples.items()}
  results['query_mismatches'] = mismatches
  return results


def _ours_names(results):
  """Our variants present in `results`, in `common.OURS` order."""
  present = {key[3] for key in results if isinstance(key, tuple)}
  return [name for name in common.OURS if name in present]


def _rows(results):
  """The (operation, capacity, batch) row keys present, in table order."""
  keys = {key[:3] for key in results if isinstance(key, tuple)}
  return sorted(keys, key=lambda k: (k[1], OPERATIONS.index(k[0]), k[2]))


def _row_start(operation, capacity, batch_size):
  """A table row's first cells: the operation, capacity and batch."""
  return [operation, common.log2_name(capacity),
          'all' if operation == 'fill' else str(batch_size)]


def _targets(results):
  """The issues' targets as `timing.format_targets` rows, and where."""
  capacities = sorted({key[1] for key in results if isinstance(key, tuple)})
  if not capacities:
    return [], ''
  capacity = (TARGET_CAPACITY if TARGET_CAPACITY in capacities else
              capacities[-1])
  where = f'capacity {common.log2_name(capacity)}'
  if capacity != TARGET_CAPACITY:
    where += f' (the issues set them at {common.log2_name(TARGET_CAPACITY)})'
  goals = [
      ('issue 3: as fast as cpprb', 'cpprb', REQUIRED_OVER_CPPRB,
       TARGET_OPERATIONS, TARGET_BATCH_SIZES),
      ('issue 3: 20x Dopamine TF', 'dopamine', REQUIRED_OVER_DOPAMINE,
       TARGET_OPERATIONS, TARGET_BATCH_SIZES),
      (f'issue 24: {REQUIRED_OVER_CPPRB_NATIVE:g}x cpprb', 'cpprb',
       REQUIRED_OVER_CPPRB_NATIVE, TARGET_OPERATIONS, TARGET_BATCH_SIZES),
      ('issue 2: 20x naive', 'naive', REQUIRED_OVER_NAIVE,
       ('set', 'get', 'stratified_sample'), (REQUIRED_OVER_NAIVE_BATCH,)),
  ]
  rows = []
  for title, peer, required, operations, batch_sizes in goals:
    for operation in operations:
      for batch_size in batch_sizes:
        key = (operation, capacity, batch_size)
        ratios = {ours: timing.speedup(results, key, peer, ours)
                  for ours in _ours_names(results)}
        if any(r is not None for r in ratios.values()):
          rows.append((title, f'{operation}, batch {batch_size}', required,
                       ratios))
  return rows, where


def format_section(results, rounds):
  """Formats the results as a Markdown section (a `##` heading, tables).

  Args:
    results: the dict returned by `run_benchmark`.
    rounds: int, the rounds requested.

  Returns:
    str, Markdown.
  """
  present = {key[3] for key in results if isinstance(key, tuple)}
  ours = _ours_names(results)
  peers = [p for p in PEERS if p in present]
  names = ours + peers
  fewest = min(results['rounds'].values()) if results['rounds'] else 0
  lines = [
      '## Sum tree',
      '',
      'Median microseconds per call over interleaved rounds '
      f'({rounds} requested; calls taking seconds, {fewest} at least), '
      'priorities uniform in (0, 1], each set/get call on a fresh batch of '
      'distinct random indices. `fill` sets every priority (ours and cpprb: '
      'one batch call; Dopamine TF and naive: one call per index, as their '
      'buffers do). Dopamine TF is dopamine-rl 4.1.2\'s '
      '`dopamine.tf.replay_memory.sum_tree.SumTree`, one index per call; '
      'cpprb is cpprb\'s PrioritizedReplayBuffer (alpha = 1, a 1-byte '
      'observation; its `sample` also computes importance weights with a '
      'min tree, and it has no batch `get`); naive is `NaiveSumTree`, the '
      'textbook tree walked per index in Python. Dopamine\'s JAX sum tree '
      'is not measured: it needs JAX, which the `bench` extra does not '
      'install. Method: benchmarks/sum_tree_benchmark.py.',
      '',
  ]
  rows = []
  for operation, capacity, batch_size in _rows(results):
    row = _row_start(operation, capacity, batch_size)
    row += [timing.format_microseconds(
        results.get((operation, capacity, batch_size, name)))
            for name in names]
    rows.append(row)
  lines += timing.markdown_table(
      ['operation', 'capacity', 'batch'] + [f'{TITLES[n]} (µs)'
                                            for n in names], rows,
      align=['l', 'r', 'r'] + ['r'] * len(names))
  lines += ['', 'Ratios of the medians, peer / ours (above 1: ours is '
            'faster):', '']
  rows = []
  for operation, capacity, batch_size in _rows(results):
    row = _row_start(operation, capacity, batch_size)
    for name in ours:
      for peer in peers:
        ratio = timing.speedup(results, (operation, capacity, batch_size),
                               peer, name)
        row.append('—' if ratio is None else f'{ratio:.1f}x')
    rows.append(row)
  lines += timing.markdown_table(
      ['operation', 'capacity', 'batch'] +
      [f'{TITLES[p]} / {n}' for n in ours for p in peers], rows,
      align=['l', 'r', 'r'] + ['r'] * (len(ours) * len(peers)))
  targets, where = _targets(results)
  if targets:
    lines += ['', f'Targets at {where}, ratio peer / ours and whether it is '
              'met in this run:', '']
    lines += timing.format_targets(targets, ours)
  if results.get('query_mismatches'):
    lines += ['', f'Warning: ours and the naive tree answered '
              f'{results["query_mismatches"]} of 2000 random queries '
              'differently.']
  return '\n'.join(lines) + '\n'


def format_results(results, rounds, machine):
  """Formats a stand-alone document: a title, the machine, the section."""
  return common.document('Sum tree benchmark', machine,
                         format_section(results, rounds))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  capacities = [2**int(c) for c in options.capacities_log2]
  batch_sizes = [int(b) for b in options.batch_sizes]
  results = run_benchmark(
      capacities, batch_sizes, options.rounds, options.burst_seconds,
      options.seed,
      progress=timing.print_progress)
  common.write_report(
      format_results(results, options.rounds, describe_machine()),
      options.output)


if __name__ == '__main__':
  define_flags()
  app.run(main)
