r"""Benchmarks the TF wrapper: sampling, and a training step with staging.

Part of `python -m benchmarks` (see benchmarks/__main__.py), which writes
benchmarks/RESULTS.md. This section alone, printed and not written:

  python -m benchmarks.staging_benchmark

An Atari-shaped prioritized memory (84x84 uint8 frames, stack 4, 3-step
returns, batch 32) feeds a simulated training op: a chain of dense layers on
the sampled states whose length is calibrated so that it costs about as much
as sampling one batch, followed by the priority update of the batch, as
Rainbow's step does. In one process, interleaved over rounds, it times:

* `sample`: a session run that only samples a batch;
* `sample, staging`: the same with `use_staging=True` (it returns the batch
  staged by the previous run and prefetches the next);
* `sample, Dopamine TF`: the same run on Dopamine 4.1.2's
  WrappedPrioritizedReplayBuffer, when dopamine-rl is installed (Dopamine's
  `use_staging` does nothing, so it has no staged variant);
* `train`: the step's own work on a batch held in variables, without
  sampling: the dense chain and the priority update of that batch (every
  prioritized training step writes the priorities it computed);
* `step, no staging`: sample, then train, in one run;
* `step, staging`: the same with `use_staging=True`.

Without staging a step costs about sample + train; with staging the sample
of the next batch overlaps the training on the current one, so a step costs
about max(sample, train). The table gives medians in milliseconds, and the
ratios.
"""

import os
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import timing  # pylint: disable=g-import-not-at-top
from dopamine_per.replay_memory import prioritized_replay_buffer  # pylint: disable=g-import-not-at-top

__all__ = ['DopamineSampleGraph', 'StepGraph', 'calibrate_layers',
           'format_results', 'format_section', 'run_benchmark', 'time_cases']
_BATCH = 32
_FRAME = (84, 84)
_STACK = 4
_HORIZON = 3


def define_flags():
  """Defines the command-line flags (only when run as a program)."""
  flags.DEFINE_integer('capacity', 2**20, 'Replay capacity.')
  flags.DEFINE_integer('transitions', 20000, 'Transitions added first.')
  flags.DEFINE_integer('rounds', 15, 'Interleaved rounds.')
  flags.DEFINE_integer('steps', 20, 'Session runs timed per case and round.')
  common.define_output_flag()


def _fill(replay, transitions, seed=0, priority=None):
  rng = np.random.default_rng(seed)
  frames = rng.integers(0, 256, (1000,) + _FRAME, dtype=np.uint8)
  for i in range(transitions):
    replay.add(frames[i % 1000], i % 4, float(rng.random()),
               int(i % 500 == 499), priority)


def _dense_chain(states, layers):
  """The simulated network: `layers` dense layers on the flattened states."""
  x = tf.reshape(tf.cast(states, tf.float32), [_BATCH, -1])[:, :512] / 255.0
  weights = tf.ones([512, 512]) / 512.0
  for _ in range(layers):
    x = tf.tanh(tf.matmul(x, weights))
  return tf.reduce_mean(x, axis=1) + 1.0  # A positive "TD error" per sample.


def _wrapper(use_staging, capacity, use_native_ops, compress_observations,
             memory, dopamine):
  """An Atari-shaped WrappedPrioritizedReplayBuffer (see StepGraph)."""
  options = dict(use_staging=use_staging, replay_capacity=capacity,
                 batch_size=_BATCH, update_horizon=_HORIZON,
                 wrapped_memory=memory)
  if dopamine:
    from dopamine.tf.replay_memory import prioritized_replay_buffer as module  # pylint: disable=g-import-not-at-top
  else:
    module = prioritized_replay_buffer
    options['use_native_ops'] = use_native_ops
    if memory is None:
      options['compress_observations'] = compress_observations
  return module.WrappedPrioritizedReplayBuffer(_FRAME, _STACK, **options)


class StepGraph(object):
  """One graph and session: a memory and the ops to time on it.

  Attributes:
    graph: the tf.Graph.
    replay: the WrappedPrioritizedReplayBuffer (`use_native_ops` as given:
      the native ops, or the `tf.numpy_function` ops), ours or Dopamine's.
    session: tf.compat.v1.Session running the graph.
    sample: fetch that samples one batch.
    train: fetch that trains on a fixed batch and sets its priorities (no
      sampling).
    step: fetch of a training step on sampled batches (with its priority
      update).
  """

  def __init__(self, use_staging: bool, layers: int, capacity: int,
               transitions: int, use_native_ops: bool = True,
               compress_observations: bool = False,
               memory: Optional[Any] = None, dopamine: bool = False):
    """Builds the graph and fills its memory.

    Args:
      use_staging: bool, the wrapper's `use_staging`.
      layers: int, the simulated network's depth.
      capacity: int, the memory's capacity.
      transitions: int, random-frame transitions added first (none when
        `memory` is given).
      use_native_ops: bool, ours' `use_native_ops`.
      compress_observations: bool, ours' `compress_observations` (frames in
        compressed blocks); ignored when `memory` is given.
      memory: optional out-of-graph prioritized memory, already filled, to
        wrap (`wrapped_memory`) instead of a new one.
      dopamine: bool, Dopamine 4.1.2's wrapper instead of ours (its
        `use_staging` does nothing; `memory` then one of Dopamine's).
    """
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.replay = _wrapper(use_staging, capacity, use_native_ops,
                             compress_observations, memory, dopamine)
      if memory is None:
        _fill(self.replay, transitions, priority=1.0 if dopamine else None)
      batch = dict(zip(self.replay.transition,
                       self.replay.memory.sample_transition_batch()))
      self._fixed_states = tf.Variable(batch['state'])
      self._fixed_indices = tf.Variable(batch['indices'])
      self.train = self.train_op(layers)
      errors = _dense_chain(self.replay.states, layers)
      self.step = self.replay.tf_set_priority(self.replay.indices, errors)
      self.sample = self.replay.indices
      self.session = tf.compat.v1.Session(graph=self.graph,
                                          config=_session_config())
      self.session.run(tf.compat.v1.global_variables_initializer())

  def train_op(self, layers):
    """The training work on the fixed batch, with `layers` dense layers."""
    with self.graph.as_default():
      return self.replay.tf_set_priority(
          self._fixed_indices, _dense_chain(self._fixed_states, layers))

  def time(self, fetch, steps):
    """Median milliseconds of `steps` runs of `fetch`."""
    times = []
    for _ in range(steps):
      start = time.perf_counter()
      self.session.run(fetch)
      times.append(time.perf_counter() - start)
    return timing.median(times) * 1e3


def _session_config():
  # One thread for the math and two inter-op threads: with staging, the
  # sampling of the next batch runs on the second inter-op thread, on the
  # other core of a 2-core machine (with more cores, give the math more).
  return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                  inter_op_parallelism_threads=2)


class DopamineSampleGraph(object):
  """Dopamine's WrappedPrioritizedReplayBuffer and its sampling fetch.

  Attributes:
    session: tf.compat.v1.Session running the graph.
    sample: fetch that samples one batch (Dopamine's `indices`, computed by
      the same py_func as the whole transition).
  """

  def __init__(self, capacity, transitions):
    from dopamine.tf.replay_memory import prioritized_replay_buffer as dopamine_prb  # pylint: disable=g-import-not-at-top
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.replay = dopamine_prb.WrappedPrioritizedReplayBuffer(
          _FRAME, _STACK, use_staging=False, replay_capacity=capacity,
          batch_size=_BATCH, update_horizon=_HORIZON)
      _fill(self.replay, transitions, priority=1.0)
      self.sample = self.replay.indices
      self.session = tf.compat.v1.Session(graph=self.graph,
                                          config=_session_config())

  time = StepGraph.time


def calibrate_layers(capacity, transitions, use_native_ops=True,
                     memory=None):
  """Returns the number of layers whose training costs about one sample.

  The training's cost is affine in its depth (a fixed part: the run, the
  cast of the states, the priority update); two depths give both parts.
  The sample and the priority update go through the native ops, or the
  `tf.numpy_function` ops with `use_native_ops=False`. The probe's memory
  is a new one of `transitions` random frames, or `memory` (an out-of-graph
  memory of ours, filled) wrapped as it is.
  """
  probe = StepGraph(False, 8, capacity, transitions, use_native_ops,
                    memory=memory)
  shallow = probe.train_op(2)
  for _ in range(5):
    probe.session.run([probe.sample, probe.train, shallow])
  sample = probe.time(probe.sample, 30)
  deep_time, shallow_time = probe.time(probe.train, 30), probe.time(shallow, 30)
  probe.session.close()
  per_layer = max((deep_time - shallow_time) / 6, 1e-3)
  return max(1, round(2 + (sample - shallow_time) / per_layer))


def time_cases(cases: Mapping[str, Tuple[Any, Any]], rounds: int,
               steps: int, progress: Optional[Callable[[str], None]] = None,
               seed: int = 0) -> Dict[str, List[float]]:
  """Times session runs, interleaved in shuffled rounds.

  Args:
    cases: {name: (graph, fetch)}: a StepGraph (or DopamineSampleGraph) and
      one of its fetches.
    rounds: int, interleaved rounds.
    steps: int, session runs timed per case and round.
    progress: optional callable taking a str.
    seed: int, the rounds' orders.

  Returns:
    {name: [median ms per run, one per round]}.
  """
  for graph, fetch in cases.values():
    graph.time(fetch, 5)  # Warm up (and fill the stage).
  samples = {name: [] for name in cases}
  for _, name in timing.shuffled_rounds(cases, rounds,
                                        np.random.default_rng(seed),
                                        progress):
    graph, fetch = cases[name]
    samples[name].append(graph.time(fetch, steps))
  return samples


def run_benchmark(capacity, transitions, rounds, steps, progress=None,
                  with_dopamine=None):
  """Times the cases, interleaved; returns their medians in ms.

  Args:
    capacity: int, the memories' capacity.
    transitions: int, transitions added to each memory first.
    rounds: int, interleaved rounds.
    steps: int, session runs timed per case and round.
    progress: optional callable taking a str.
    with_dopamine: whether to time Dopamine's sampling too; None: if
      dopamine-rl is installed.

  Returns:
    dict mapping each case's name (see the module docstring) to its median
    milliseconds per run, and 'layers' to the simulated network's depth.
  """
  if with_dopamine is None:
    with_dopamine = common.dopamine_available()
  layers = calibrate_layers(capacity, transitions)
  graphs = {False: StepGraph(False, layers, capacity, transitions),
            True: StepGraph(True, layers, capacity, transitions)}
  cases = {
      'sample': (graphs[False], graphs[False].sample),
      'sample, staging': (graphs[True], graphs[True].sample),
      'train': (graphs[False], graphs[False].train),
      'step, no staging': (graphs[False], graphs[False].step),
      'step, staging': (graphs[True], graphs[True].step),
  }
  sessions = [graph.session for graph in graphs.values()]
  if with_dopamine:
    dopamine = DopamineSampleGraph(capacity, transitions)
    cases['sample, Dopamine TF'] = (dopamine, dopamine.sample)
    sessions.append(dopamine.session)
  samples = time_cases(cases, rounds, steps, progress)
  for session in sessions:
    session.close()
  results = {name: timing.median(times) for name, times in samples.items()}
  results['layers'] = layers
  return results


# Issue 3 (and 4): with staging, a step whose training costs about one
# sample takes at most this times the larger of the two.
REQUIRED_STAGED_STEP_RATIO = 1.2


def format_section(results):
  """Formats the results as a Markdown section (a `##` heading, tables)."""
  sample, train = results['sample'], results['train']
  unstaged, staged = results['step, no staging'], results['step, staging']
  lines = [
      '## TF wrapper: sampling and staging',
      '',
      'Graph mode (`tf.compat.v1.Session`): an Atari-shaped '
      'WrappedPrioritizedReplayBuffer (84x84 uint8, '
      f'stack {_STACK}, {_HORIZON}-step returns, batch {_BATCH}) and a '
      f'simulated training op ({results["layers"]} dense layers, calibrated '
      'so that, with the priority update of its batch, it costs about one '
      'sample). `train` is that work on a batch held in variables: all a '
      'step does but sample. Sessions use one thread for the math and two '
      'inter-op threads, so that staging samples the next batch on the other '
      'core. Median milliseconds per session run, '
      'interleaved. '
      'Method: benchmarks/staging_benchmark.py.',
      '',
  ]
  rows = [[name, f'{results[name]:.3f}'] for name in (
      'sample', 'sample, staging', 'sample, Dopamine TF', 'train',
      'step, no staging', 'step, staging') if name in results]
  lines += timing.markdown_table(['session run', 'ms'], rows)
  staged_ratio = staged / max(sample, train)
  lines += [
      '',
      f'- step without staging / (sample + train): '
      f'{unstaged / (sample + train):.2f}',
      f'- step with staging / max(sample, train): {staged_ratio:.2f}',
      f'- speed-up from staging: {unstaged / staged:.2f}x',
  ]
  if 'sample, Dopamine TF' in results:
    lines.append(f'- sample, Dopamine TF / ours: '
                 f'{results["sample, Dopamine TF"] / sample:.1f}x')
  lines += [
      '',
      'Target (issue 3): with staging, a step takes at most '
      f'{REQUIRED_STAGED_STEP_RATIO}x max(sample, train): '
      f'{staged_ratio:.2f}x '
      f'({"met" if staged_ratio <= REQUIRED_STAGED_STEP_RATIO else "NOT met"}'
      ').',
  ]
  return '\n'.join(lines) + '\n'


def format_results(results, machine):
  """Formats a stand-alone document: a title, the machine, the section."""
  return common.document('TF wrapper benchmark', machine,
                         format_section(results))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  results = run_benchmark(
      options.capacity, options.transitions, options.rounds, options.steps,
      progress=timing.print_progress)
  common.write_report(format_results(results, common.describe_machine()),
                      options.output)


if __name__ == '__main__':
  define_flags()
  app.run(main)
