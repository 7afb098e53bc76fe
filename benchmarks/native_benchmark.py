r"""Benchmarks the native TF ops of the replay memory against its py_func ops.

Part of `python -m benchmarks` (see benchmarks/__main__.py), which writes
benchmarks/RESULTS.md; its section `native`. This section alone, printed
and not written:

  python -m benchmarks --sections=native      # about a minute on 2 cores
  python -m benchmarks.native_benchmark --rounds=40 --steps=50

Issue 24 moved graph-mode sampling from `tf.numpy_function` ops (Python,
under the GIL) to native TensorFlow ops (dopamine_per/native: C++, without
the GIL). Two Atari-shaped WrappedPrioritizedReplayBuffers (84x84 uint8
frames, stack 4, 3-step returns, batch 32, 30,000 transitions), one built
with `use_native_ops=True` (`native`) and one with False (`py_func`), are
timed in one process, interleaved in shuffled rounds (`timing`):

1. `sample`: a session run fetching a sampled batch's indices (the op
   computes every element of the batch either way), through
   `session.make_callable` (the least session overhead), through plain
   `session.run`, through `make_callable` fetching every element (which
   adds the states' conversion to NumPy), and through `make_callable` on a
   second session of the same graph that runs every op on the calling
   thread (`inter_op_parallelism_threads=-1`: no hand-off to TensorFlow's
   inter-op threads and back, but no staging either);
2. `sample + set_priority`: one run sampling a batch and setting its
   priorities (uniform in (0, 1]), as a prioritized training step does;
3. the memory ops' own time: the sum over the sample (and set_priority) op
   nodes of their `all_end_rel_micros` in the run's step stats
   (`RunOptions.trace_level`, `RunMetadata.step_stats`), alone and while
   another Python thread spins pure Python (`while not stop: x += 1`),
   which holds the GIL whenever it can: an op that needs the GIL waits for
   it (Python hands it over every `sys.getswitchinterval()`, 5 ms);
4. the training step of benchmarks/staging_benchmark.py (`StepGraph`: a
   dense chain on the sampled states, calibrated to cost about one sample,
   then the priority update), without and with `use_staging=True`, and its
   `train` part alone;

next to the copy floor of benchmarks/replay_benchmark.py (`CopyFloor`):
NumPy copying the 8 frames of each of 32 uniformly drawn transitions out
of the native memory's frame storage, in plain Python, without a session.
The sessions use staging_benchmark's configuration (one intra-op thread,
two inter-op threads). Each case is timed once a round as `--steps` runs
(or copies), in a shuffled order; the tables give the median over rounds
of each round's mean per run (means: with Python spinning, a few runs in
ten wait 5 ms for the GIL and the others do not, which a median would
hide), and ratios of those medians.

The step stats come from `SOFTWARE_TRACE` by default: the executor's own
node stats, which `FULL_TRACE` reports as well (the same figures within
the noise here), but `FULL_TRACE` also starts a profiler session each run,
whose GPU tracer logs a warning per run where there is no GPU;
`--trace=full` uses it.

Targets (issue 24), for the native ops:

* a graph sample (`make_callable`) takes at most 1.2x the copy floor;
* a sample + set_priority run at most 1.5x the copy floor;
* with a Python thread spinning, the memory ops take at most 1.2x their
  time alone (issue 24 reports 67x for the `tf.numpy_function` ops).
"""

import contextlib
import os
import sys
import threading
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import replay_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import staging_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import timing  # pylint: disable=g-import-not-at-top
from dopamine_per.native import build  # pylint: disable=g-import-not-at-top
from dopamine_per.replay_memory.graph import native_ops  # pylint: disable=g-import-not-at-top

__all__ = [
    'PATHS',
    'SampleGraph',
    'format_results',
    'format_section',
    'memory_ops_micros',
    'python_spinning',
    'run_benchmark',
]

NATIVE = 'native'
PY_FUNC = 'py_func'
PATHS = (NATIVE, PY_FUNC)
TITLES = {NATIVE: 'native ops', PY_FUNC: 'tf.numpy_function'}
COPY_FLOOR = replay_benchmark.COPY_FLOOR
TRACE_LEVELS = {
    'software': tf.compat.v1.RunOptions.SOFTWARE_TRACE,
    'full': tf.compat.v1.RunOptions.FULL_TRACE,
}

# The rows of the first table: (run, how it is run or measured).
SAMPLE = 'sample'
SAMPLE_SET = 'sample + set_priority'
CALLABLE = '`make_callable`'
SESSION_RUN = '`session.run`'
EVERY_ELEMENT = '`make_callable`, every element fetched'
CALLER_THREAD = '`make_callable`, ops on the calling thread'
OPS = 'memory ops (step stats)'
OPS_SPINNING = 'memory ops (step stats), Python spinning'
TRACED = 'traced run'
TRACED_SPINNING = 'traced run, Python spinning'
SAMPLE_ROWS = ((SAMPLE, CALLABLE), (SAMPLE, SESSION_RUN),
               (SAMPLE, EVERY_ELEMENT), (SAMPLE, CALLER_THREAD), (SAMPLE, OPS),
               (SAMPLE_SET, CALLABLE), (SAMPLE_SET, OPS))
# The training step's rows (staging_benchmark's names).
STEP_ROWS = ('train', 'step, no staging', 'step, staging')

# Issue 24's targets for the native ops: at most these ratios.
REQUIRED_SAMPLE_OVER_FLOOR = 1.2
REQUIRED_SAMPLE_SET_OVER_FLOOR = 1.5
REQUIRED_SPINNING_OVER_ALONE = 1.2


def define_flags():
  """Defines the command-line flags (only when run as a program)."""
  flags.DEFINE_integer('capacity', 2**20, 'Replay capacity.')
  flags.DEFINE_integer('transitions', 30000, 'Transitions added first.')
  flags.DEFINE_integer('rounds', 25, 'Interleaved rounds.')
  flags.DEFINE_integer('steps', 30, 'Session runs timed per case and round.')
  flags.DEFINE_enum('trace', 'software', sorted(TRACE_LEVELS),
                    'RunOptions trace level of the step stats.')
  flags.DEFINE_integer('seed', 0, 'Seed for the copy floor and the order.')
  common.define_output_flag()


@contextlib.contextmanager
def python_spinning():
  """Runs a thread spinning pure Python (`x += 1`) for a `with` block.

  It holds the GIL whenever it can; it has started spinning when the block
  starts, and has stopped when the block ends.
  """
  stop, started = [False], threading.Event()

  def spin():
    x = 0
    started.set()
    while not stop[0]:
      x += 1

  thread = threading.Thread(target=spin, name='python_spinning', daemon=True)
  thread.start()
  started.wait()
  try:
    yield
  finally:
    stop[0] = True
    thread.join()


def memory_ops_micros(metadata, names):
  """The summed `all_end_rel_micros` of the nodes `names` in a run's stats.

  Args:
    metadata: tf.compat.v1.RunMetadata of a traced run.
    names: the nodes' names.

  Returns:
    float, microseconds.

  Raises:
    RuntimeError: If a node is missing from the step stats.
  """
  found = {}
  for device in metadata.step_stats.dev_stats:
    for node in device.node_stats:
      if node.node_name in names:
        found[node.node_name] = max(found.get(node.node_name, 0),
                                    node.all_end_rel_micros)
  missing = set(names) - set(found)
  if missing:
    raise RuntimeError(f'no step stats for {sorted(missing)}')
  return float(sum(found.values()))


class SampleGraph(object):
  """A staging_benchmark.StepGraph without staging, and its timed runs.

  Attributes:
    step_graph: staging_benchmark.StepGraph (its `replay`, `session`,
      `sample`, `train`, `step`).
    sample_set: the op sampling a batch and setting its priorities.
    sample_ops: names of the memory op nodes a `sample` run executes.
    sample_set_ops: those of a `sample_set` run.
    caller_thread_session: a second session of the graph, running every op
      on the thread calling it.
  """

  def __init__(self, use_native_ops, layers, capacity, transitions):
    self.step_graph = staging_benchmark.StepGraph(
        False, layers, capacity, transitions, use_native_ops)
    replay = self.step_graph.replay
    with self.step_graph.graph.as_default():
      priorities = 1.0 - tf.random.uniform([replay.batch_size])
      self.sample_set = replay.tf_set_priority(replay.indices, priorities)
    sample_type = replay.indices.op.type
    if use_native_ops != sample_type.startswith('DopaminePer'):
      raise RuntimeError(f'use_native_ops={use_native_ops} built a '
                         f'{sample_type} op')
    self.sample_ops = [replay.indices.op.name]
    self.sample_set_ops = self.sample_ops + [self.sample_set.name]
    session = self.step_graph.session
    self.sample_callable = session.make_callable(replay.indices)
    self.every_element_callable = session.make_callable(
        list(replay.transition.values()))
    self.sample_set_callable = session.make_callable(self.sample_set)
    self.caller_thread_session = tf.compat.v1.Session(
        graph=self.step_graph.graph, config=tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=1,
            inter_op_parallelism_threads=-1))
    self.caller_thread_callable = self.caller_thread_session.make_callable(
        replay.indices)

  def traced(self, fetch, names, steps, options, spinning=False):
    """Means over `steps` traced runs: the memory ops' µs, the run's µs.

    Means, as the bursts of the other cases give: with Python spinning, a
    few runs in ten wait for the GIL (5 ms each time) and the others do not,
    so a median would hide the waits.
    """
    ops, walls = [], []
    with python_spinning() if spinning else contextlib.nullcontext():
      for _ in range(steps):
        metadata = tf.compat.v1.RunMetadata()
        start = time.perf_counter()
        self.step_graph.session.run(fetch, options=options,
                                    run_metadata=metadata)
        walls.append((time.perf_counter() - start) * 1e6)
        ops.append(memory_ops_micros(metadata, names))
    return float(np.mean(ops)), float(np.mean(walls))

  def close(self):
    self.step_graph.session.close()
    self.caller_thread_session.close()


def _measures(sample_graphs, staged_graphs, floor, steps, options):
  """{name: callable timing one round, returning {result key: µs}}."""
  measures = {}

  def burst(key, call):
    measures[key] = lambda: {key: timing.time_burst(call, steps)}

  batch_size = sample_graphs[NATIVE].step_graph.replay.batch_size
  burst((COPY_FLOOR,), lambda: floor.cycle(batch_size, None))
  for path in PATHS:
    graph = sample_graphs[path]
    session, replay = graph.step_graph.session, graph.step_graph.replay
    burst((SAMPLE, CALLABLE, path), graph.sample_callable)
    burst((SAMPLE, SESSION_RUN, path),
          lambda s=session, f=replay.indices: s.run(f))
    burst((SAMPLE, EVERY_ELEMENT, path), graph.every_element_callable)
    burst((SAMPLE, CALLER_THREAD, path), graph.caller_thread_callable)
    burst((SAMPLE_SET, CALLABLE, path), graph.sample_set_callable)
    staged = staged_graphs[path]
    for name, step_graph, fetch in (
        ('train', graph.step_graph, graph.step_graph.train),
        ('step, no staging', graph.step_graph, graph.step_graph.step),
        ('step, staging', staged, staged.step)):
      burst((name, path), step_graph.session.make_callable(fetch))

    def sample_ops(graph=graph, path=path):
      ops, _ = graph.traced(graph.step_graph.replay.indices, graph.sample_ops,
                            steps, options)
      return {(SAMPLE, OPS, path): ops}

    def sample_set_ops(graph=graph, path=path, spinning=False):
      ops, wall = graph.traced(graph.sample_set, graph.sample_set_ops,
                               steps, options, spinning)
      if spinning:
        return {(SAMPLE_SET, OPS_SPINNING, path): ops,
                (SAMPLE_SET, TRACED_SPINNING, path): wall}
      return {(SAMPLE_SET, OPS, path): ops, (SAMPLE_SET, TRACED, path): wall}

    measures[(SAMPLE, OPS, path)] = sample_ops
    measures[(SAMPLE_SET, OPS, path)] = sample_set_ops
    measures[(SAMPLE_SET, OPS_SPINNING, path)] = (
        lambda f=sample_set_ops: f(spinning=True))
  return measures


def run_benchmark(capacity, transitions, rounds, steps, seed=0,
                  trace='software', progress=None):
  """Times the cases, interleaved; returns their medians in µs.

  Args:
    capacity: int, the memories' capacity.
    transitions: int, transitions added to each memory first.
    rounds: int, interleaved rounds.
    steps: int, session runs (or floor copies) timed per case and round.
    seed: int, for the copy floor's draws and the rounds' order.
    trace: 'software' or 'full', the step stats' trace level.
    progress: optional callable taking a str.

  Returns:
    dict mapping result keys to the median µs: (run, how, path) for the
    rows of `SAMPLE_ROWS` and the spinning runs, (step row, path) for
    `STEP_ROWS`, (COPY_FLOOR,); and 'layers', 'transitions', 'steps',
    'trace'. Or {'unavailable': why} if the native ops cannot be built.
  """
  try:
    native_ops.load()
  except build.NativeBuildError as e:
    return {'unavailable': str(e)}
  if progress:
    progress(f'native: {transitions} transitions in each memory, '
             f'capacity {capacity}')
  layers = staging_benchmark.calibrate_layers(capacity, transitions)
  sample_graphs, staged_graphs = {}, {}
  for path in PATHS:
    use_native_ops = path == NATIVE
    sample_graphs[path] = SampleGraph(use_native_ops, layers, capacity,
                                      transitions)
    staged_graphs[path] = staging_benchmark.StepGraph(
        True, layers, capacity, transitions, use_native_ops)
  memory = sample_graphs[NATIVE].step_graph.replay.memory
  floor = replay_benchmark.CopyFloor(
      memory._store['observation'],  # pylint: disable=protected-access
      min(int(memory.add_count), capacity), seed)
  options = tf.compat.v1.RunOptions(trace_level=TRACE_LEVELS[trace])
  measures = _measures(sample_graphs, staged_graphs, floor, steps, options)
  for measure in measures.values():
    measure()  # Warm up (and fill the stage).
  samples = {}
  if progress:
    progress(f'native: {len(measures)} cases, {rounds} rounds')
  for _, name in timing.shuffled_rounds(measures, rounds,
                                        np.random.default_rng(seed),
                                        progress):
    for key, value in measures[name]().items():
      samples.setdefault(key, []).append(value)
  for graph in sample_graphs.values():
    graph.close()
  for graph in staged_graphs.values():
    graph.session.close()
  results = {key: timing.median(values) for key, values in samples.items()}
  results.update(layers=layers, transitions=transitions, steps=steps,
                 trace=trace)
  return results


# ------------------------------------------------------------- formatting


def _ratio(numerator, denominator):
  if numerator is None or denominator is None:
    return '—'
  return f'{numerator / denominator:.2f}x'


def _at_most(ratio, required):
  """'1.10x (met)' or '1.30x (NOT met)' for a ratio that must not exceed."""
  return f'{ratio:.2f}x ({"met" if ratio <= required else "NOT met"})'


def _row_label(run, how):
  return f'{run}, {how}'


def format_section(results):
  """Formats the results as a Markdown section (a `##` heading, tables)."""
  lines = ['## Native ops: graph-mode sampling without Python', '']
  if 'unavailable' in results:
    lines.append('Not run: the native ops cannot be built here: '
                 f'{results["unavailable"]}')
    return '\n'.join(lines) + '\n'
  floor = results[(COPY_FLOOR,)]
  native, py_func = TITLES[NATIVE], TITLES[PY_FUNC]
  lines += [
      'Graph mode (`tf.compat.v1.Session`, one intra-op and two inter-op '
      'threads): two Atari-shaped WrappedPrioritizedReplayBuffers (84x84 '
      f'uint8, stack 4, 3-step returns, batch 32, {results["transitions"]:,} '
      'transitions), one sampling through the native ops '
      '(`use_native_ops=True`), one through `tf.numpy_function` '
      '(`use_native_ops=False`), next to the copy floor of the replay '
      'section (NumPy copying the batch\'s 8 frames per transition, in '
      'Python, without a session). A `sample` run fetches the batch\'s '
      'indices (the op computes every element either way). "ops on the '
      'calling thread": a second session of the graph with '
      '`inter_op_parallelism_threads=-1`, which runs the ops on the thread '
      'calling it, without the hand-off to TensorFlow\'s inter-op threads '
      'and back (nor staging). "memory ops '
      '(step stats)": the sum of the sample (and set_priority) op nodes\' '
      f'`all_end_rel_micros` in {results["trace"].upper()}_TRACE step stats: '
      'the ops\' own time, without the session\'s. Median over rounds of each '
      f'round\'s mean µs per run ({results["steps"]} runs a round), '
      'interleaved. '
      'Method: benchmarks/native_benchmark.py.',
      '',
  ]
  rows = []
  for run, how in SAMPLE_ROWS:
    mine = results.get((run, how, NATIVE))
    theirs = results.get((run, how, PY_FUNC))
    rows.append([_row_label(run, how), timing.format_microseconds(mine),
                 timing.format_microseconds(theirs),
                 timing.format_microseconds(floor), _ratio(mine, floor),
                 _ratio(theirs, floor), _ratio(theirs, mine)])
  lines += timing.markdown_table(
      ['session run', f'{native} (µs)', f'{py_func} (µs)', 'copy floor (µs)',
       f'{native} / floor', f'{py_func} / floor', f'{py_func} / {native}'],
      rows)
  lines += [
      '',
      'A sample + set_priority run with another Python thread spinning '
      '(`while not stop: x += 1`, holding the GIL whenever it can) and '
      'alone: the memory ops\' own time (step stats) and the traced run\'s '
      '(the caller needs the GIL back to return, whichever the ops):',
      '',
  ]
  rows = []
  for path in PATHS:
    alone = results[(SAMPLE_SET, OPS, path)]
    spinning = results[(SAMPLE_SET, OPS_SPINNING, path)]
    run_alone = results[(SAMPLE_SET, TRACED, path)]
    run_spinning = results[(SAMPLE_SET, TRACED_SPINNING, path)]
    rows.append([TITLES[path], timing.format_microseconds(alone),
                 timing.format_microseconds(spinning),
                 _ratio(spinning, alone), timing.format_microseconds(run_alone),
                 timing.format_microseconds(run_spinning),
                 _ratio(run_spinning, run_alone)])
  lines += timing.markdown_table(
      ['sample + set_priority', 'ops alone (µs)', 'ops, spinning (µs)',
       'spinning / alone', 'run alone (µs)', 'run, spinning (µs)',
       'spinning / alone'], rows)
  lines += [
      '',
      f'The training step of the TF wrapper section ({results["layers"]} '
      'dense layers on the sampled states, calibrated to cost about one '
      'sample through the native ops, then the priority update; `train` is '
      'that work on a batch held in variables), through `make_callable`:',
      '',
  ]
  rows = []
  for name in STEP_ROWS:
    mine, theirs = results[(name, NATIVE)], results[(name, PY_FUNC)]
    rows.append([name, timing.format_microseconds(mine),
                 timing.format_microseconds(theirs), _ratio(theirs, mine)])
  lines += timing.markdown_table(
      ['session run', f'{native} (µs)', f'{py_func} (µs)',
       f'{py_func} / {native}'], rows)
  lines.append('')
  for path in PATHS:
    staged = results[('step, staging', path)]
    bound = max(results[(SAMPLE, CALLABLE, path)], results[('train', path)])
    lines.append(f'- {TITLES[path]}: step with staging / max(sample, '
                 f'train) = {staged / bound:.2f}; speed-up from staging '
                 f'{results[("step, no staging", path)] / staged:.2f}x')
  lines += ['', 'Targets (issue 24), for the native ops (the '
            f'{py_func} column for comparison), and whether this run meets '
            'them:', '']
  rows = []
  for target, case, required, ratio in _targets(results):
    rows.append([target, case, f'{required:g}x'] +
                [_at_most(ratio(path), required) for path in PATHS])
  lines += timing.markdown_table(
      ['target', 'case', 'at most', native, py_func], rows,
      align=['l', 'l', 'r', 'r', 'r'])
  return '\n'.join(lines) + '\n'


def _targets(results):
  """(target, case, required, path -> ratio) of issue 24's targets."""
  floor = results[(COPY_FLOOR,)]
  return [
      ('a graph sample within 1.2x the copy floor',
       _row_label(SAMPLE, CALLABLE), REQUIRED_SAMPLE_OVER_FLOOR,
       lambda p: results[(SAMPLE, CALLABLE, p)] / floor),
      ('sample + set_priority within 1.5x the copy floor',
       _row_label(SAMPLE_SET, CALLABLE), REQUIRED_SAMPLE_SET_OVER_FLOOR,
       lambda p: results[(SAMPLE_SET, CALLABLE, p)] / floor),
      ('memory ops with Python spinning within 1.2x alone',
       _row_label(SAMPLE_SET, OPS), REQUIRED_SPINNING_OVER_ALONE,
       lambda p: (results[(SAMPLE_SET, OPS_SPINNING, p)] /
                  results[(SAMPLE_SET, OPS, p)])),
  ]


def format_results(results, machine):
  """Formats a stand-alone document: a title, the machine, the section."""
  return common.document('Native ops benchmark', machine,
                         format_section(results))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  results = run_benchmark(options.capacity, options.transitions,
                          options.rounds, options.steps, seed=options.seed,
                          trace=options.trace,
                          progress=timing.print_progress)
  common.write_report(format_results(results, common.describe_machine()),
                      options.output)


if __name__ == '__main__':
  define_flags()
  app.run(main)
