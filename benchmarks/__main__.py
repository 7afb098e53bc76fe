r"""Runs every benchmark and writes benchmarks/RESULTS.md.

From the repository root, in an environment with the `bench` extra and
dopamine-rl installed without its dependencies (this installs nothing):

  pip install -e '.[bench]' && pip install --no-deps dopamine-rl==4.1.2
  python -m benchmarks                       # about 10 minutes on 2 cores
  python -m benchmarks --sections=sum_tree   # one section (and no file)
  python -m benchmarks --sections=compression  # an opt-in section, alone
  python -m benchmarks --sections=scale --scale_games=MsPacman

Five sections run by default, each timing ours and the peers interleaved in
one process of its own, started fresh (see benchmarks/timing.py for the
method), and two more when asked for:

1. `sum_tree` (benchmarks/sum_tree_benchmark.py): set, get, stratified
   sample and fill at capacities 2**17 and 2**20, batches 32 and 256; ours
   with both kernel sets, Dopamine's TF SumTree, cpprb, a textbook tree.
2. `replay` (benchmarks/replay_benchmark.py): an Atari-shaped prioritized
   memory at capacity 2**20: add, sample + set_priority at batch 32 and 256,
   then the peak resident memory of each implementation filled to capacity,
   each in its own subprocess, one after the other.
3. `tf` (benchmarks/staging_benchmark.py): graph-mode session runs of a
   sampled batch, and a training step with and without staging.
4. `distributed` (benchmarks/distributed_benchmark.py, needs Ray and
   gymnasium): on a local Ray, learner batches from 1, 2 and 4 shards
   against the single memory, the staged learner step over 2 shards, Ape-X
   actors against the single-process Runner on CartPole, and the per-shard
   rates and bytes per call behind the projection to a cluster.
5. `native` (benchmarks/native_benchmark.py): graph-mode session runs of
   the native ops against the `tf.numpy_function` ops and the copy floor:
   a sample, a sample + set_priority, the ops' own time alone and with a
   Python thread spinning, and the staged training step (issue 24).
6. `compression` (benchmarks/compression_benchmark.py, needs zstandard,
   lz4, ale-py; not in the default run: it plays Atari to collect its
   frames, about 20 s a game the first time, then about 4 minutes): codecs,
   block lengths, deltas and zstd dictionaries on real Atari frames, with
   the decode cost of a sampled batch, for issue 33 (docs/compression.md).
7. `scale` (benchmarks/scale_benchmark.py, needs ale-py and lz4; not in
   the default run: about 40 minutes on 2 cores): Atari memories at
   capacity 2**19 filled with real frames of Pong, Breakout, SpaceInvaders
   and MsPacman, ours compressed and uncompressed (and, on
   --scale_peer_games, Dopamine TF and cpprb), each in a fresh process one
   after the other: resident bytes, add, sample + set_priority against the
   copy floor, the staged graph training step (Rainbow's Atari network),
   the save's stall and wall time, bytes per checkpoint and for 4
   retained, a save after 10,000 new transitions, load; extrapolated to 2**20 with issue 33's targets, and
   a plot of them (--scale_plot). Its measured results live in
   benchmarks/SCALE.md; without it, the document ends with a pointer there
   and SCALE.md's headline table (scale_summary.results_pointer).
8. `jax` (benchmarks/jax_benchmark.py, needs the `jax` extra, ale-py and
   Dopamine JAX; not in the default run: about 10 minutes): Dopamine JAX's
   replay API, ours against Dopamine JAX's memory (compressed and raw),
   Atari-shaped at capacity 2**17: add, sample(32), update(32), resident
   memory (and at 2**20), save and load times and bytes (issue 34).

Each section prints its tables (medians, ratios to each peer, and its
issue's targets with whether they are met); with every section run, the
document is written to --output (benchmarks/RESULTS.md), the machine
described first (with every default section run, the opt-in sections too
if they are asked for).
"""

import collections
import importlib.metadata
import os
import sys
import time

from absl import app
from absl import flags

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import compression_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import distributed_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import jax_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import native_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import replay_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import scale_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import scale_summary  # pylint: disable=g-import-not-at-top
from benchmarks import staging_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import sum_tree_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import timing  # pylint: disable=g-import-not-at-top

__all__ = ['SECTIONS', 'Settings', 'DEFAULT_SETTINGS', 'describe_packages',
           'run']

SECTIONS = ('sum_tree', 'replay', 'tf', 'distributed', 'native',
            'compression', 'scale', 'jax')
# The sections run without --sections: all but `compression`, which plays
# Atari for its frames (and whose results live in docs/compression.md),
# `scale`, which takes about 40 minutes, and `jax`, which needs the `jax`
# extra.
DEFAULT_SECTIONS = SECTIONS[:-3]
DEFAULT_OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              'RESULTS.md')
# The scale section's own results, which RESULTS.md points to.
SCALE_RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             'SCALE.md')

Settings = collections.namedtuple('Settings', [
    'sections',
    'seed',
    # Sum tree.
    'sum_tree_capacities',
    'batch_sizes',
    'sum_tree_rounds',
    'sum_tree_burst_seconds',
    # Atari-shaped memory.
    'replay_capacity',
    'replay_fill',
    'replay_steady_adds',
    'replay_rounds',
    'rss',
    'cpprb_rss_transitions',
    # TF wrapper.
    'tf_transitions',
    'tf_rounds',
    'tf_steps',
    # Distributed (local Ray).
    'distributed_capacity',
    'distributed_shards',
    'distributed_rounds',
    'distributed_burst_seconds',
    'distributed_step_rounds',
    'distributed_steps',
    'actor_steps',
    'actor_rounds',
    # Native ops against tf.numpy_function (graph mode).
    'native_transitions',
    'native_rounds',
    'native_steps',
    'native_trace',
    # Compressed frames (issue 33).
    'compression_games',
    'compression_frames',
    'compression_rounds',
    'compression_cache_dir',
    # Atari at scale (issue 33).
    'scale_games',
    'scale_peer_games',
    'scale_capacity',
    'scale_frames',
    'scale_plot',
    # Dopamine JAX's replay API (issue 34).
    'jax_capacity',
    'jax_rounds',
])

DEFAULT_SETTINGS = Settings(
    sections=DEFAULT_SECTIONS,
    seed=0,
    sum_tree_capacities=(2**17, 2**20),
    batch_sizes=(32, 256),
    sum_tree_rounds=40,
    sum_tree_burst_seconds=0.005,
    replay_capacity=2**20,
    replay_fill=50000,
    replay_steady_adds=10000,
    replay_rounds=20,
    rss=True,
    cpprb_rss_transitions=20000,
    tf_transitions=20000,
    tf_rounds=15,
    tf_steps=20,
    distributed_capacity=2**15,
    distributed_shards=(1, 2, 4),
    distributed_rounds=9,
    distributed_burst_seconds=0.25,
    distributed_step_rounds=10,
    distributed_steps=100,
    actor_steps=2000,
    actor_rounds=5,
    native_transitions=30000,
    native_rounds=25,
    native_steps=30,
    native_trace='software',
    compression_games=compression_benchmark.DEFAULT_GAMES,
    compression_frames=20000,
    compression_rounds=7,
    compression_cache_dir=None,
    scale_games=scale_benchmark.DEFAULT_GAMES,
    scale_peer_games=scale_benchmark.DEFAULT_PEER_GAMES,
    scale_capacity=2**19,
    scale_frames=20000,
    scale_plot='',
    jax_capacity=2**17,
    jax_rounds=30,
)

_FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (only when run as a program)."""
  d = DEFAULT_SETTINGS
  flags.DEFINE_list('sections', list(d.sections),
                    f'Sections to run, out of {", ".join(SECTIONS)}.')
  flags.DEFINE_string('output', DEFAULT_OUTPUT,
                      'Markdown file written when every section runs; empty '
                      'to only print.')
  flags.DEFINE_integer('seed', d.seed, 'Seed for the data and the orders.')
  flags.DEFINE_list('sum_tree_capacities_log2',
                    [str(c.bit_length() - 1) for c in d.sum_tree_capacities],
                    'Sum tree capacities, as powers of two.')
  flags.DEFINE_list('batch_sizes', [str(b) for b in d.batch_sizes],
                    'Batch sizes of the sum tree and the replay memory.')
  flags.DEFINE_integer('sum_tree_rounds', d.sum_tree_rounds,
                       'Interleaved rounds of the sum tree section.')
  flags.DEFINE_integer('replay_capacity_log2',
                       d.replay_capacity.bit_length() - 1,
                       'Capacity of the Atari-shaped memories, 2**this.')
  flags.DEFINE_integer('replay_fill', d.replay_fill,
                       'Transitions added to each memory (timed as fresh '
                       'adds) before the other measurements.')
  flags.DEFINE_integer('replay_steady_adds', d.replay_steady_adds,
                       'Adds timed after their pages were touched.')
  flags.DEFINE_integer('replay_rounds', d.replay_rounds,
                       'Interleaved rounds of sample + set_priority.')
  flags.DEFINE_boolean('rss', d.rss,
                       'Whether to measure peak memory at capacity.')
  flags.DEFINE_integer('cpprb_rss_transitions', d.cpprb_rss_transitions,
                       'Transitions added to cpprb for its peak memory.')
  flags.DEFINE_integer('tf_transitions', d.tf_transitions,
                       'Transitions in the TF section\'s memories.')
  flags.DEFINE_integer('tf_rounds', d.tf_rounds,
                       'Interleaved rounds of the TF section.')
  flags.DEFINE_integer('tf_steps', d.tf_steps,
                       'Session runs per case and round.')
  flags.DEFINE_integer('distributed_capacity_log2',
                       d.distributed_capacity.bit_length() - 1,
                       'Capacity of the distributed section\'s memories, '
                       '2**this (each filled to it).')
  flags.DEFINE_list('distributed_shards',
                    [str(n) for n in d.distributed_shards],
                    'Shard counts of the distributed sampling.')
  flags.DEFINE_integer('distributed_rounds', d.distributed_rounds,
                       'Interleaved rounds of the distributed sampling.')
  flags.DEFINE_integer('distributed_step_rounds', d.distributed_step_rounds,
                       'Interleaved rounds of the staged learner steps.')
  flags.DEFINE_integer('distributed_steps', d.distributed_steps,
                       'Session runs per staged step case and round.')
  flags.DEFINE_integer('actor_steps', d.actor_steps,
                       'Agent steps per actor or runner case and round.')
  flags.DEFINE_integer('actor_rounds', d.actor_rounds,
                       'Interleaved rounds of the actors and the runner.')
  flags.DEFINE_integer('native_transitions', d.native_transitions,
                       'Transitions in the native section\'s memories.')
  flags.DEFINE_integer('native_rounds', d.native_rounds,
                       'Interleaved rounds of the native section.')
  flags.DEFINE_integer('native_steps', d.native_steps,
                       'Session runs per case and round of the native '
                       'section.')
  flags.DEFINE_enum('native_trace', d.native_trace,
                    sorted(native_benchmark.TRACE_LEVELS),
                    'RunOptions trace level of the native section\'s step '
                    'stats.')
  flags.DEFINE_list('compression_games', list(d.compression_games),
                    'Games of the compression section (atari_lib names).')
  flags.DEFINE_integer('compression_frames', d.compression_frames,
                       'Atari frames per game of the compression section.')
  flags.DEFINE_integer('compression_rounds', d.compression_rounds,
                       'Interleaved rounds of the compression section\'s '
                       'batch decodes.')
  flags.DEFINE_string('compression_cache_dir', d.compression_cache_dir,
                      'Where the compression section caches its frames '
                      '(default ~/.cache/dopamine_per/benchmarks/frames; '
                      'the scale section\'s too).')
  flags.DEFINE_list('scale_games', list(d.scale_games),
                    'Games of the scale section (atari_lib names).')
  flags.DEFINE_list('scale_peer_games', list(d.scale_peer_games),
                    'Games of the scale section on which Dopamine TF and '
                    'cpprb run too (minutes each).')
  flags.DEFINE_integer('scale_capacity_log2',
                       d.scale_capacity.bit_length() - 1,
                       'Capacity of the scale section\'s memories, 2**this.')
  flags.DEFINE_integer('scale_frames', d.scale_frames,
                       'Atari frames per game of the scale section, cycled.')
  flags.DEFINE_string('scale_plot', d.scale_plot,
                      'PNG the scale section draws its key figures at 2**20 '
                      'into (e.g. benchmarks/scale.png); empty: none.')
  flags.DEFINE_integer('jax_capacity_log2',
                       d.jax_capacity.bit_length() - 1,
                       'Capacity of the jax section\'s memories, 2**this.')
  flags.DEFINE_integer('jax_rounds', d.jax_rounds,
                       'Rounds of the jax section\'s sample and update.')


def _settings_from_flags():
  options = _FLAGS
  unknown = set(options.sections) - set(SECTIONS)
  if unknown:
    raise app.UsageError(f'Unknown sections: {sorted(unknown)}')
  return DEFAULT_SETTINGS._replace(
      sections=tuple(s for s in SECTIONS if s in options.sections),
      seed=options.seed,
      sum_tree_capacities=tuple(2**int(c)
                                for c in options.sum_tree_capacities_log2),
      batch_sizes=tuple(int(b) for b in options.batch_sizes),
      sum_tree_rounds=options.sum_tree_rounds,
      replay_capacity=2**options.replay_capacity_log2,
      replay_fill=options.replay_fill,
      replay_steady_adds=options.replay_steady_adds,
      replay_rounds=options.replay_rounds,
      rss=options.rss,
      cpprb_rss_transitions=options.cpprb_rss_transitions,
      tf_transitions=options.tf_transitions,
      tf_rounds=options.tf_rounds,
      tf_steps=options.tf_steps,
      distributed_capacity=2**options.distributed_capacity_log2,
      distributed_shards=tuple(int(n) for n in options.distributed_shards),
      distributed_rounds=options.distributed_rounds,
      distributed_step_rounds=options.distributed_step_rounds,
      distributed_steps=options.distributed_steps,
      actor_steps=options.actor_steps,
      actor_rounds=options.actor_rounds,
      native_transitions=options.native_transitions,
      native_rounds=options.native_rounds,
      native_steps=options.native_steps,
      native_trace=options.native_trace,
      compression_games=tuple(options.compression_games),
      compression_frames=options.compression_frames,
      compression_rounds=options.compression_rounds,
      compression_cache_dir=options.compression_cache_dir,
      scale_games=tuple(options.scale_games),
      scale_peer_games=tuple(options.scale_peer_games),
      scale_capacity=2**options.scale_capacity_log2,
      scale_frames=options.scale_frames,
      scale_plot=options.scale_plot,
      jax_capacity=2**options.jax_capacity_log2,
      jax_rounds=options.jax_rounds)


def describe_packages():
  """Returns 'name version' of the packages the benchmarks compare."""
  versions = []
  for name in ('tensorflow', 'dopamine-rl', 'cpprb', 'jax'):
    try:
      versions.append(f'{name} {importlib.metadata.version(name)}')
    except importlib.metadata.PackageNotFoundError:
      versions.append(f'{name} (not installed)')
  return ', '.join(versions)


def run(settings=DEFAULT_SETTINGS, progress=None):
  """Runs the chosen sections; returns the Markdown document.

  Args:
    settings: Settings.
    progress: optional callable taking a str, for progress messages.

  Returns:
    str, the document: a title, the machine, then one section each.
  """
  start = time.time()
  load_before = common.load_average()
  sections = []
  if 'sum_tree' in settings.sections:
    results = common.in_fresh_process(
        sum_tree_benchmark.run_benchmark, settings.sum_tree_capacities,
        settings.batch_sizes, settings.sum_tree_rounds,
        settings.sum_tree_burst_seconds, settings.seed, progress=progress)
    sections.append(sum_tree_benchmark.format_section(
        results, settings.sum_tree_rounds))
  if 'replay' in settings.sections:
    implementations = replay_benchmark.default_implementations()
    results = common.in_fresh_process(
        replay_benchmark.run_benchmark, settings.replay_capacity,
        settings.replay_fill, settings.replay_steady_adds,
        settings.batch_sizes, settings.replay_rounds, settings.seed,
        implementations, progress=progress)
    rss = None
    if settings.rss:
      rss = replay_benchmark.run_rss(
          implementations, settings.replay_capacity,
          settings.cpprb_rss_transitions, progress=progress)
    sections.append(replay_benchmark.format_section(
        results, rss, settings.replay_capacity))
  if 'tf' in settings.sections:
    results = common.in_fresh_process(
        staging_benchmark.run_benchmark, settings.replay_capacity,
        settings.tf_transitions, settings.tf_rounds, settings.tf_steps,
        progress=progress)
    sections.append(staging_benchmark.format_section(results))
  if 'distributed' in settings.sections:
    results = common.in_fresh_process(
        distributed_benchmark.run_benchmark, settings.distributed_capacity,
        settings.batch_sizes, settings.distributed_shards,
        settings.distributed_rounds, settings.distributed_burst_seconds,
        settings.distributed_step_rounds, settings.distributed_steps,
        settings.actor_steps, settings.actor_rounds, settings.seed,
        progress=progress)
    sections.append(distributed_benchmark.format_section(results))
  if 'native' in settings.sections:
    results = common.in_fresh_process(
        native_benchmark.run_benchmark, settings.replay_capacity,
        settings.native_transitions, settings.native_rounds,
        settings.native_steps, settings.seed, settings.native_trace,
        progress=progress)
    sections.append(native_benchmark.format_section(results))
  if 'compression' in settings.sections:
    results = common.in_fresh_process(
        compression_benchmark.run_section, settings.compression_games,
        settings.compression_frames, settings.compression_rounds,
        settings.seed, settings.compression_cache_dir, progress=progress)
    sections.append(compression_benchmark.format_section(results))
  if 'scale' in settings.sections:
    # A fresh process per memory already (run_section).
    results = scale_benchmark.run_section(
        settings.scale_games, settings.scale_peer_games,
        settings.scale_capacity, settings.scale_frames, settings.seed,
        settings.compression_cache_dir, progress=progress)
    sections.append(scale_benchmark.format_section(results))
    if settings.scale_plot:
      scale_benchmark.write_plot(results, settings.scale_plot)
  else:
    sections.append(scale_summary.results_pointer(SCALE_RESULTS))
  if 'jax' in settings.sections:
    results = jax_benchmark.run_section(
        settings.jax_capacity, settings.scale_frames, settings.jax_rounds,
        settings.seed, settings.compression_cache_dir, progress=progress)
    sections.append(jax_benchmark.format_section(results,
                                                 settings.jax_capacity))
  machine = common.describe_machine()
  machine['packages'] = describe_packages()
  machine['load average'] = (
      f'{load_before} at the start, {common.load_average()} at the end '
      '(1 minute; '
      'staging needs a second core free)')
  lines = [
      '# Benchmark results',
      '',
      'Written by `python -m benchmarks` (benchmarks/__main__.py) in '
      f'{(time.time() - start) / 60:.1f} minutes. Each section times ours '
      'and the peers interleaved in a fresh process of its own: every case '
      '(an operation '
      'of one implementation at one size) is timed as a short burst of '
      'calls, once per round, in a shuffled order, and the tables give the '
      'median over rounds and ratios of medians. The machine is shared and '
      'noisy: compare ratios within a run, not with other runs.',
      '',
  ]
  lines += [f'- {name}: {value}' for name, value in machine.items()]
  return '\n'.join(lines) + '\n\n' + '\n'.join(sections)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  settings = _settings_from_flags()
  report = run(settings, progress=timing.print_progress)
  common.write_report(
      report,
      _FLAGS.output if set(DEFAULT_SECTIONS) <= set(settings.sections)
      else '')


if __name__ == '__main__':
  define_flags()
  app.run(main)
