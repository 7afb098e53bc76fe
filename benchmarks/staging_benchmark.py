r"""Benchmarks staging: a graph-mode training step with and without prefetch.

Run from the repository root, in an environment where dopamine_per is
installed (e.g. after `bash scripts/test.sh`, with .venv/bin/python):

  python -m benchmarks.staging_benchmark

An Atari-shaped prioritized memory (84x84 uint8 frames, stack 4, 3-step
returns, batch 32) feeds a simulated training op: a chain of dense layers on
the sampled states whose length is calibrated so that it costs about as much
as sampling one batch, followed by the priority update of the batch, as
Rainbow's step does. In one process, interleaved over rounds, it times:

* `sample`: a session run that only samples a batch;
* `train`: the training op on a batch held in a variable (no sampling);
* `step, no staging`: sample, then train, in one run;
* `step, staging`: the same with `use_staging=True`.

Without staging a step costs about sample + train; with staging the sample
of the next batch overlaps the training on the current one, so a step costs
about max(sample, train). The table (medians in milliseconds, and the
ratios) is printed and written to benchmarks/STAGING_RESULTS.md.
"""

import os
import statistics
import sys
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import sum_tree_benchmark  # pylint: disable=g-import-not-at-top
from dopamine_per.replay_memory import prioritized_replay_buffer  # pylint: disable=g-import-not-at-top

__all__ = ['StepGraph', 'run_benchmark', 'format_results']

_DEFAULT_OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                               'STAGING_RESULTS.md')
_BATCH = 32
_FRAME = (84, 84)
_STACK = 4
_HORIZON = 3


def define_flags():
  """Defines the command-line flags (only when run as a program)."""
  flags.DEFINE_integer('capacity', 100000, 'Replay capacity.')
  flags.DEFINE_integer('transitions', 20000, 'Transitions added first.')
  flags.DEFINE_integer('rounds', 15, 'Interleaved rounds.')
  flags.DEFINE_integer('steps', 20, 'Session runs timed per case and round.')
  flags.DEFINE_string('output', _DEFAULT_OUTPUT,
                      'Markdown file for the results; empty to skip.')


def _fill(replay, transitions, seed=0):
  rng = np.random.default_rng(seed)
  frames = rng.integers(0, 256, (1000,) + _FRAME, dtype=np.uint8)
  for i in range(transitions):
    replay.add(frames[i % 1000], i % 4, float(rng.random()),
               int(i % 500 == 499), None)


def _dense_chain(states, layers):
  """The simulated network: `layers` dense layers on the flattened states."""
  x = tf.reshape(tf.cast(states, tf.float32), [_BATCH, -1])[:, :512] / 255.0
  weights = tf.ones([512, 512]) / 512.0
  for _ in range(layers):
    x = tf.tanh(tf.matmul(x, weights))
  return tf.reduce_mean(x, axis=1) + 1.0  # A positive "TD error" per sample.


class StepGraph(object):
  """One graph and session: a memory and the ops to time on it.

  Attributes:
    replay: the WrappedPrioritizedReplayBuffer.
    session: tf.compat.v1.Session running the graph.
    sample: fetch that samples one batch.
    train: fetch that trains on a fixed batch (no sampling).
    step: fetch of a training step on sampled batches (with its priority
      update).
  """

  def __init__(self, use_staging, layers, capacity, transitions):
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.replay = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
          _FRAME, _STACK, use_staging=use_staging, replay_capacity=capacity,
          batch_size=_BATCH, update_horizon=_HORIZON)
      _fill(self.replay, transitions)
      fixed = tf.Variable(self.replay.memory.sample_transition_batch()[0])
      self.train = _dense_chain(fixed, layers)
      errors = _dense_chain(self.replay.states, layers)
      self.step = self.replay.tf_set_priority(self.replay.indices, errors)
      self.sample = self.replay.indices
      # One thread for the math: the prefetch thread needs the other core
      # of a 2-core machine (with more cores, give the math more threads).
      config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                        inter_op_parallelism_threads=2)
      self.session = tf.compat.v1.Session(graph=self.graph, config=config)
      self.session.run(tf.compat.v1.global_variables_initializer())

  def time(self, fetch, steps):
    """Median milliseconds of `steps` runs of `fetch`."""
    times = []
    for _ in range(steps):
      start = time.perf_counter()
      self.session.run(fetch)
      times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _calibrate_layers(capacity, transitions):
  """Returns the number of layers whose training costs about one sample."""
  probe = StepGraph(False, 8, capacity, transitions)
  for _ in range(5):
    probe.session.run([probe.sample, probe.train])
  sample = probe.time(probe.sample, 30)
  per_layer = probe.time(probe.train, 30) / 8
  probe.session.close()
  return max(1, round(sample / per_layer))


def run_benchmark(capacity, transitions, rounds, steps, progress=None):
  """Times the four cases; returns their medians in ms and the layers used."""
  layers = _calibrate_layers(capacity, transitions)
  graphs = {False: StepGraph(False, layers, capacity, transitions),
            True: StepGraph(True, layers, capacity, transitions)}
  cases = {
      'sample': (graphs[False], graphs[False].sample),
      'train': (graphs[False], graphs[False].train),
      'step, no staging': (graphs[False], graphs[False].step),
      'step, staging': (graphs[True], graphs[True].step),
  }
  for graph, fetch in cases.values():
    graph.time(fetch, 5)  # Warm up (and fill the stage).
  samples = {name: [] for name in cases}
  order = np.random.default_rng(0)
  names = list(cases)
  for round_number in range(rounds):
    for i in order.permutation(len(names)):
      graph, fetch = cases[names[i]]
      samples[names[i]].append(graph.time(fetch, steps))
    if progress:
      progress(f'round {round_number + 1}/{rounds}')
  for graph in graphs.values():
    graph.session.close()
  results = {name: statistics.median(times) for name, times in samples.items()}
  results['layers'] = layers
  return results


def format_results(results, machine):
  """Formats the results as Markdown."""
  sample, train = results['sample'], results['train']
  unstaged, staged = results['step, no staging'], results['step, staging']
  lines = [
      '# Staging benchmark results',
      '',
      'Written by `python -m benchmarks.staging_benchmark` (see its docstring '
      'for the method): an Atari-shaped prioritized memory (84x84 uint8, '
      f'stack {_STACK}, {_HORIZON}-step returns, batch {_BATCH}) and a '
      f'simulated training op ({results["layers"]} dense layers, calibrated '
      'to cost about one sample) with the priority update of its batch. '
      'Sessions use one thread for the math, leaving a core for the prefetch '
      'thread. Medians in milliseconds per session run.',
      '',
  ]
  lines += [f'- {name}: {value}' for name, value in machine.items()]
  lines += [
      '',
      '| case | ms per run |',
      '|---|---:|',
      f'| sample | {sample:.3f} |',
      f'| train | {train:.3f} |',
      f'| step, no staging | {unstaged:.3f} |',
      f'| step, staging | {staged:.3f} |',
      '',
      f'- step without staging / (sample + train): '
      f'{unstaged / (sample + train):.2f}',
      f'- step with staging / max(sample, train): '
      f'{staged / max(sample, train):.2f} (target: at most 1.2)',
      f'- speed-up from staging: {unstaged / staged:.2f}x',
  ]
  return '\n'.join(lines) + '\n'


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  results = run_benchmark(
      options.capacity, options.transitions, options.rounds, options.steps,
      progress=lambda text: print(text, file=sys.stderr, flush=True))
  report = format_results(results, sum_tree_benchmark.describe_machine())
  print(report, flush=True)
  if options.output:
    with open(options.output, 'w', encoding='utf-8') as output:
      output.write(report)


if __name__ == '__main__':
  define_flags()
  app.run(main)
