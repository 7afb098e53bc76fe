r"""Benchmarks dopamine_per's SumTree against a textbook per-index sum tree.

Run from the repository root, in an environment where dopamine_per is
installed (e.g. after `bash scripts/test.sh`, with .venv/bin/python):

  python -m benchmarks.sum_tree_benchmark
  python benchmarks/sum_tree_benchmark.py --rounds=40   # either works

For a tree of capacity 2**20 and batches of 32 and 256 indices it times
`set`, `get` and `stratified_sample` on `dopamine_per.replay_memory.sum_tree.
SumTree` and on `NaiveSumTree` below, the classic approach: one NumPy array
per tree level, a Python loop over the batch that walks each index up (set)
or down (sampling) one level at a time. Both run in the same process on the
same data.

Each measurement times a short burst of calls of one case (one operation,
batch size and implementation); a round measures every case once, in a
shuffled order, and the rounds repeat, so that noise from the machine (other
processes, frequency changes) falls on all cases alike. The table reports
the median over rounds of the per-call time in microseconds, and the
speed-up of the median times. It is printed and written, with a description
of the machine, to benchmarks/RESULTS.md (see --output).
"""

import datetime
import math
import os
import platform
import random
import statistics
import sys
import time

from absl import app
from absl import flags
import numpy as np

if __package__ in (None, ''):
  # Run as a script (python benchmarks/sum_tree_benchmark.py): make the
  # repository root importable, as `python -m` from the root would.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from dopamine_per.replay_memory import sum_tree  # pylint: disable=g-import-not-at-top
from dopamine_per.replay_memory import sum_tree_kernels  # pylint: disable=g-import-not-at-top

__all__ = [
    'DopamineSumTreeAdapter',
    'NaiveSumTree',
    'OPERATIONS',
    'check_same_queries',
    'define_flags',
    'describe_machine',
    'dopamine_available',
    'format_results',
    'run_benchmark',
]

_DEFAULT_OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                               'RESULTS.md')



def define_flags():
  """Defines the command-line flags (only when run as a program)."""
  flags.DEFINE_integer(
      'capacity_log2', 20, 'The trees hold 2**capacity_log2 priorities.')
  flags.DEFINE_list(
      'batch_sizes', ['32', '256'], 'Batch sizes to time, comma-separated.')
  flags.DEFINE_integer(
      'rounds', 150,
      'Rounds; each times every case once, in a shuffled order.')
  flags.DEFINE_float(
      'burst_seconds', 0.005,
      'Approximate duration of one measurement (a burst of calls).')
  flags.DEFINE_integer('seed', 0, 'Seed for the data and the order.')
  flags.DEFINE_string(
      'output', _DEFAULT_OUTPUT,
      'Markdown file the results are written to; empty to skip writing.')


OPERATIONS = ('set', 'get', 'stratified_sample')
# Our trees are timed as 'ours-numpy' and, with Numba, 'ours-numba'.
_OURS_PREFIX = 'ours-'
# The issue asks for at least this speed-up at batch size 256.
REQUIRED_SPEEDUP = 20.0
REQUIRED_SPEEDUP_BATCH = 256


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

  def fill(self, priorities):
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
  """Dopamine 4.1.2's own SumTree, driven as its prioritized buffer does.

  `dopamine.tf.replay_memory.sum_tree.SumTree` takes one index per call;
  Dopamine's `set_priority` and `get_priority` loop over the batch in
  Python, and so does this adapter. Timed only when dopamine-rl is
  installed (scripts/test.sh installs it), to show what switching from it
  gains.
  """

  def __init__(self, capacity):
    from dopamine.tf.replay_memory import sum_tree as dopamine_sum_tree  # pylint: disable=g-import-not-at-top
    self._tree = dopamine_sum_tree.SumTree(capacity)

  def fill(self, priorities):
    """Sets all leaves at once and rebuilds the inner nodes (setup only).

    Writes Dopamine's `nodes` levels directly: setting 2**20 leaves through
    its scalar `set` would take a minute.
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
    # Draws from Python's global `random`, seeded by run_benchmark.
    return self._tree.stratified_sample(batch_size)


def dopamine_available():
  """Whether dopamine-rl's TF sum tree can be imported."""
  try:
    from dopamine.tf.replay_memory import sum_tree as _  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return False
  return True


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


def _calls(tree, operation, batch_size, inputs):
  """Returns a function running `operation` on `tree` with rotating inputs."""
  position = [0]

  if operation == 'set':
    def call():
      indices, values = inputs[position[0] % len(inputs)]
      position[0] += 1
      tree.set(indices, values)
  elif operation == 'get':
    def call():
      indices, _ = inputs[position[0] % len(inputs)]
      position[0] += 1
      tree.get(indices)
  elif operation == 'stratified_sample':
    def call():
      tree.stratified_sample(batch_size)
  else:
    raise ValueError(f'Unknown operation {operation!r}')
  return call


def _time_burst(call, repeats):
  start = time.perf_counter_ns()
  for _ in range(repeats):
    call()
  return (time.perf_counter_ns() - start) / repeats / 1e3  # µs per call


def run_benchmark(capacity, batch_sizes, rounds, burst_seconds, seed,
                  with_dopamine=None, progress=None):
  """Times the trees; returns the median µs per call of every case.

  Args:
    capacity: int, number of priorities in each tree.
    batch_sizes: sequence of ints.
    rounds: int, number of interleaved rounds.
    burst_seconds: float, approximate length of one measurement.
    seed: int, seed for the priorities, the inputs and the order of cases.
    with_dopamine: bool, whether to time Dopamine's SumTree too; None to do
      so if dopamine-rl is installed.
    progress: optional callable taking a str, for progress messages.

  Returns:
    dict mapping (operation, batch_size, implementation) to the median time
    in microseconds, implementation being 'naive', 'dopamine' or
    'ours-' + kernels for each of `sum_tree_kernels.available()`; plus the
    key 'query_mismatches' with the worst result of `check_same_queries`.
  """
  if with_dopamine is None:
    with_dopamine = dopamine_available()
  rng = np.random.default_rng(seed)
  priorities = rng.uniform(0.1, 10.0, size=capacity)
  trees = {}
  for kernels in sum_tree_kernels.available():
    tree = sum_tree.SumTree(capacity, rng=np.random.default_rng(seed + 1),
                            kernels=kernels)
    tree.set(np.arange(capacity), priorities)
    trees[_OURS_PREFIX + kernels] = tree
  trees['naive'] = NaiveSumTree(capacity, np.random.default_rng(seed + 2))
  trees['naive'].fill(priorities)
  if with_dopamine:
    random.seed(seed + 3)
    trees['dopamine'] = DopamineSumTreeAdapter(capacity)
    trees['dopamine'].fill(priorities)
  mismatches = max(check_same_queries(tree, trees['naive'], rng)
                   for name, tree in trees.items()
                   if name.startswith(_OURS_PREFIX))

  cases = {}
  for batch_size in batch_sizes:
    # A pool of distinct inputs per batch size, drawn once so that drawing
    # them is not timed; `set` writes fresh values from the same range.
    inputs = [(rng.choice(capacity, size=batch_size, replace=False),
               rng.uniform(0.1, 10.0, size=batch_size)) for _ in range(32)]
    for operation in OPERATIONS:
      for name, tree in trees.items():
        cases[(operation, batch_size, name)] = _calls(
            tree, operation, batch_size, inputs)

  # Calibrate each case's burst length after a warm-up call.
  repeats = {}
  for key, call in cases.items():
    call()
    single = max(_time_burst(call, 3), 0.05)
    repeats[key] = max(1, int(burst_seconds * 1e6 / single))

  samples = {key: [] for key in cases}
  keys = list(cases)
  for round_number in range(rounds):
    for i in rng.permutation(len(keys)):
      key = keys[i]
      samples[key].append(_time_burst(cases[key], repeats[key]))
    if progress and (round_number + 1) % max(1, rounds // 5) == 0:
      progress(f'round {round_number + 1}/{rounds}')

  results = {key: statistics.median(times) for key, times in samples.items()}
  results['query_mismatches'] = mismatches
  return results


def describe_machine():
  """Returns a dict describing the machine, Python and NumPy."""
  cpu = platform.processor() or platform.machine()
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as cpuinfo:
      for line in cpuinfo:
        if line.startswith('model name'):
          cpu = line.split(':', 1)[1].strip()
          break
  except OSError:
    pass
  try:
    usable = len(os.sched_getaffinity(0))
  except AttributeError:
    usable = os.cpu_count()
  return {
      'CPU': cpu,
      'cores': f'{usable} usable of {os.cpu_count()}',
      'OS': platform.platform(),
      'Python': platform.python_version(),
      'NumPy': np.__version__,
      'date': datetime.datetime.now(datetime.timezone.utc).strftime(
          '%Y-%m-%d %H:%M UTC'),
  }


def format_results(results, capacity, batch_sizes, rounds, machine):
  """Formats the results as Markdown: a machine list and a table."""
  with_dopamine = any(key[2] == 'dopamine' for key in results
                      if isinstance(key, tuple))
  lines = [
      '# SumTree benchmark results',
      '',
      'Written by `python -m benchmarks.sum_tree_benchmark` '
      '(see its docstring for the method): median microseconds per call over '
      f'{rounds} interleaved rounds, on trees of capacity '
      f'2**{int(math.log2(capacity))} = {capacity}. "naive" is the '
      "benchmark's textbook per-index sum tree (`NaiveSumTree`: NumPy levels, "
      'a Python loop over the batch and the levels), timed in the same run; '
      'the speed-up is naive / ours.',
  ]
  if with_dopamine:
    lines[-1] += (' "Dopamine" is dopamine-rl 4.1.2\'s own SumTree, called '
                  'once per index as its prioritized buffer does.')
  lines.append('')
  lines += [f'- {name}: {value}' for name, value in machine.items()]
  ours = sorted({key[2] for key in results if isinstance(key, tuple) and
                 key[2].startswith(_OURS_PREFIX)})
  header = '| operation | batch | naive (µs) |'
  rule = '|---|---:|---:|'
  for name in ours:
    header += f' {name} (µs) | speed-up |'
    rule += '---:|---:|'
  if with_dopamine:
    header += ' Dopamine (µs) |'
    rule += '---:|'
    header += ''.join(f' Dopamine / {name} |' for name in ours)
    rule += '---:|' * len(ours)
  lines += ['', header, rule]
  for operation in OPERATIONS:
    for batch_size in batch_sizes:
      naive = results[(operation, batch_size, 'naive')]
      line = f'| {operation} | {batch_size} | {naive:.1f} |'
      for name in ours:
        time = results[(operation, batch_size, name)]
        line += f' {time:.1f} | {naive / time:.1f}x |'
      if with_dopamine:
        dopamine = results[(operation, batch_size, 'dopamine')]
        line += f' {dopamine:.1f} |'
        line += ''.join(
            f' {dopamine / results[(operation, batch_size, name)]:.1f}x |'
            for name in ours)
      lines.append(line)
  if REQUIRED_SPEEDUP_BATCH in batch_sizes:
    lines.append('')
    for name in ours:
      verdicts = []
      for operation in OPERATIONS:
        speedup = (results[(operation, REQUIRED_SPEEDUP_BATCH, 'naive')] /
                   results[(operation, REQUIRED_SPEEDUP_BATCH, name)])
        verdicts.append(
            f'{operation} {speedup:.1f}x '
            f'({"met" if speedup >= REQUIRED_SPEEDUP else "NOT met"})')
      lines.append(f'- Required: at least {REQUIRED_SPEEDUP:.0f}x over naive '
                   f'at batch {REQUIRED_SPEEDUP_BATCH}; {name}: ' +
                   '; '.join(verdicts) + '.')
  if results.get('query_mismatches'):
    lines += ['', f'Warning: the trees answered {results["query_mismatches"]}'
              ' of 2000 random queries differently.']
  return '\n'.join(lines) + '\n'


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  capacity = 2**options.capacity_log2
  batch_sizes = [int(b) for b in options.batch_sizes]
  start = time.time()
  print(f'Timing capacity {capacity}, batch sizes {batch_sizes}, '
        f'{options.rounds} rounds...', file=sys.stderr, flush=True)
  results = run_benchmark(
      capacity, batch_sizes, options.rounds, options.burst_seconds,
      options.seed,
      progress=lambda text: print(text, file=sys.stderr, flush=True))
  report = format_results(results, capacity, batch_sizes, options.rounds,
                          describe_machine())
  print(report, flush=True)
  if options.output:
    with open(options.output, 'w', encoding='utf-8') as output:
      output.write(report)
    print(f'Written to {options.output} in {time.time() - start:.0f} s.',
          file=sys.stderr)


if __name__ == '__main__':
  define_flags()
  app.run(main)
