r"""Dopamine JAX's replay API: ours against Dopamine JAX's own (issue 34).

  python -m benchmarks --sections=jax              # about 10 minutes
  python -m benchmarks.jax_benchmark --jax_capacity_log2=14   # quicker

Four memories, each filled in a fresh process of its own, one after the
other: Dopamine JAX 4.1.2's `ReplayBuffer` with `compress=True` (its
default: each element's two states snappy-packed) and `compress=False`,
and ours (`dopamine_per.jax.replay_memory`, the same calls) with frames in
LZ4 blocks (`compress=True`) and raw. Each is Atari-shaped as Dopamine's
JAX Rainbow builds it: 84x84 uint8 frames of MsPacman (real frames,
`benchmarks/atari_frames.py`, cycled, episodes ending where the game's
did), stack 4, 3-step returns, the prioritized sampler, batches of 32.

Measured per memory: add (µs per step, the median of bursts of 1,000 over
the fill, no eviction: a power-of-two capacity fails Dopamine's at the
first one; and the CPU time of all the process's threads per step, since
ours compresses frames on a thread of its own), resident bytes after the
fill beyond those before it (and extrapolated to 2**20 in proportion),
sample(32) and update(32) (medians of bursts), save (until the files are
complete, orbax's asynchronous writer awaited) and its bytes on disk, load
into a fresh memory. Targets: add and sample at least 5x faster than
Dopamine JAX, update no slower, RAM at 2**20 no more than 1.5 GiB (issue
33's), save and load at least 10x faster, for the default memories
(`compress=True`, which Dopamine's agents build); the raw pair's ratios
are shown for reference.
"""

import gc
import os
import shutil
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import atari_frames  # pylint: disable=g-import-not-at-top
from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import replay_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import timing  # pylint: disable=g-import-not-at-top

__all__ = ['MEMORIES', 'PAIRS', 'TARGETS', 'measure', 'run_section',
           'format_section']

# (name, implementation, compress), ours after Dopamine's.
MEMORIES = (('dopamine-snappy', 'dopamine', True),
            ('dopamine-raw', 'dopamine', False),
            ('ours-lz4', 'ours', True),
            ('ours-raw', 'ours', False))
# Ours against Dopamine's memory of the same `compress`: the first pair is
# the default one (compress=True, what Dopamine's agents build), which the
# targets are for; the second is shown for reference.
PAIRS = (('ours-lz4', 'dopamine-snappy'), ('ours-raw', 'dopamine-raw'))
# (measure, what, least ratio Dopamine / ours).
TARGETS = (('add_us', 'add', 5.0), ('sample_us', 'sample(32)', 5.0),
           ('update_us', 'update(32)', 1.0), ('save_s', 'save', 10.0),
           ('load_s', 'load', 10.0))
RAM_TARGET_GIB = 1.5
GAME = 'MsPacman'
_BURST = 1000
_BATCH = 32


def _modules(implementation):
  if implementation == 'ours':
    from dopamine_per.jax.replay_memory import accumulator  # pylint: disable=g-import-not-at-top
    from dopamine_per.jax.replay_memory import elements  # pylint: disable=g-import-not-at-top
    from dopamine_per.jax.replay_memory import replay_buffer  # pylint: disable=g-import-not-at-top
    from dopamine_per.jax.replay_memory import samplers  # pylint: disable=g-import-not-at-top
  else:
    from dopamine.jax.replay_memory import accumulator  # pylint: disable=g-import-not-at-top
    from dopamine.jax.replay_memory import elements  # pylint: disable=g-import-not-at-top
    from dopamine.jax.replay_memory import replay_buffer  # pylint: disable=g-import-not-at-top
    from dopamine.jax.replay_memory import samplers  # pylint: disable=g-import-not-at-top
  return accumulator, elements, replay_buffer, samplers


def _memory(implementation, capacity, compress, seed):
  accumulator, _, replay_buffer, samplers = _modules(implementation)
  return replay_buffer.ReplayBuffer(
      accumulator.TransitionAccumulator(stack_size=4, update_horizon=3,
                                        gamma=0.99),
      samplers.PrioritizedSamplingDistribution(seed=seed,
                                               max_capacity=capacity),
      batch_size=_BATCH, max_capacity=capacity, compress=compress)


def _steps(implementation, frames):
  """Endless TransitionElements over the game's frames, its episodes."""
  element = _modules(implementation)[1].TransitionElement
  ends = np.zeros(len(frames.frames), bool)
  ends[np.asarray(frames.episode_starts)[1:] - 1] = True
  ends[-1] = True
  step = 0
  while True:
    i = step % len(ends)
    yield element(frames.frames[i], step % 9, float(step % 3 == 0),
                  bool(ends[i]), bool(ends[i]))
    step += 1


def _saved_bytes(directory):
  return sum(os.path.getsize(os.path.join(root, name))
             for root, _, names in os.walk(directory) for name in names)


def _save(memory, implementation, directory):
  memory.save(directory, 1)
  if implementation == 'dopamine':  # orbax writes in the background.
    memory._make_checkpoint_manager(directory).wait_until_finished()  # pylint: disable=protected-access


def _time_sample_and_update(memory, rounds, seed):
  """Medians of sample(32) and update(32) on `memory`, interleaved."""
  rng = np.random.default_rng(seed)
  keys = [memory.sample(with_sample_metadata=True)[1].keys
          for _ in range(16)]
  priorities = rng.random((16, _BATCH))
  cases = {
      'sample_us': timing.Case(memory.sample),
      'update_us': timing.Case(timing.rotating(
          list(zip(keys, priorities)),
          lambda k, p: memory.update(k, priorities=p))),
  }
  samples = timing.run_interleaved(cases, rounds, 0.05, rng)
  return {key: timing.median(times) for key, times in samples.items()}


def measure(name, capacity, frame_count, rounds, seed, cache_dir,
            progress=None):
  """Fills memory `name` (of MEMORIES) in this process; its figures."""
  _, implementation, compress = dict((m[0], m) for m in MEMORIES)[name]
  frames = atari_frames.load(GAME, frame_count, seed, cache_dir)
  warmup = _memory(implementation, 1000, compress, seed)
  steps = _steps(implementation, frames)
  for _ in range(300):
    warmup.add(next(steps), priority=1.0)
  warmup.sample()
  del warmup
  gc.collect()
  baseline = replay_benchmark.status_kib('VmRSS')
  memory = _memory(implementation, capacity, compress, seed)
  fill, adds = capacity - 2 * _BURST, []
  cpu_start = time.process_time()
  while memory.add_count < fill:
    start = time.perf_counter_ns()
    for _ in range(_BURST):
      memory.add(next(steps), priority=1.0)
    adds.append((time.perf_counter_ns() - start) / _BURST / 1e3)
    if progress and len(adds) % 20 == 0:
      progress(f'{name}: {memory.add_count} elements')
  # Every thread's CPU per step, beside the adding thread's wall time.
  add_cpu_us = ((time.process_time() - cpu_start) * 1e6 /
                (len(adds) * _BURST))
  resident = (replay_benchmark.status_kib('VmRSS') - baseline) * 1024
  results = _time_sample_and_update(memory, rounds, seed)
  directory = tempfile.mkdtemp(prefix='jax_benchmark_')
  try:
    start = time.perf_counter()
    _save(memory, implementation, directory)
    results['save_s'] = time.perf_counter() - start
    results['saved_bytes'] = _saved_bytes(directory)
    count = memory.add_count
    del memory
    gc.collect()
    fresh = _memory(implementation, capacity, compress, seed)
    start = time.perf_counter()
    fresh.load(directory, 1)
    results['load_s'] = time.perf_counter() - start
    if fresh.add_count != count:
      raise RuntimeError(f'{name} loaded {fresh.add_count} of {count}')
  finally:
    shutil.rmtree(directory, ignore_errors=True)
  results.update(name=name, add_us=timing.median(adds),
                 add_cpu_us=add_cpu_us, elements=count,
                 resident_bytes=resident)
  return results


def run_section(capacity, frame_count, rounds, seed, cache_dir,
                progress=None, memories=MEMORIES):
  """`measure` of each memory, each in a fresh process: {name: figures}."""
  results = {}
  for name, _, _ in memories:
    if progress:
      progress(f'jax section: {name} at capacity {capacity}')
    results[name] = common.in_fresh_process(
        measure, name, capacity, frame_count, rounds, seed, cache_dir,
        progress=progress)
  return results


def _gib(value):
  return f'{value / 2**30:.2f}'


def _per_2_20(figures):
  return figures['resident_bytes'] / figures['elements'] * 2**20


def format_section(results, capacity):
  """The section's Markdown: figures, ratios, targets."""
  lines = [
      '## Dopamine JAX replay API (`jax`, issue 34)', '',
      f'Atari-shaped prioritized memories of capacity '
      f'{common.log2_name(capacity)} (MsPacman frames, stack 4, 3-step, '
      'batch 32), each filled in a fresh process (benchmarks/'
      'jax_benchmark.py). RAM: resident bytes after the fill beyond those '
      'before the memory was made, and that per element times 2**20. '
      'Times: medians; save until the files are complete. add CPU: the '
      "process's CPU time (all its threads) per step over the fill: ours "
      'compresses frame blocks on a thread of its own, which the adding '
      'thread helps when it falls behind.', '']
  header = ['memory', 'add µs', 'add CPU µs', 'sample(32) µs',
            'update(32) µs',
            'RAM GiB', 'RAM at 2**20 GiB', 'save s', 'checkpoint MB',
            'load s']
  rows = []
  for name, _, _ in MEMORIES:
    figures = results.get(name)
    if figures is None:
      continue
    rows.append([
        f'`{name}`', timing.format_microseconds(figures['add_us']),
        timing.format_microseconds(figures['add_cpu_us']),
        timing.format_microseconds(figures['sample_us']),
        timing.format_microseconds(figures['update_us']),
        _gib(figures['resident_bytes']), _gib(_per_2_20(figures)),
        f'{figures["save_s"]:.2f}', f'{figures["saved_bytes"] / 1e6:.1f}',
        f'{figures["load_s"]:.2f}'])
  lines += timing.markdown_table(header, rows) + ['']
  targets = []
  for pair, (ours, peer) in enumerate(PAIRS):
    if ours not in results or peer not in results:
      continue
    for key, what, required in TARGETS:
      ratio = results[peer][key] / results[ours][key]
      targets.append([f'{what}, `{ours}` vs `{peer}`',
                      f'{required:g}x' if pair == 0 else '(reference)',
                      timing.verdict(ratio, required) if pair == 0 else
                      f'{ratio:.2f}x'])
  if 'ours-lz4' in results:
    ram = _per_2_20(results['ours-lz4']) / 2**30
    targets.append(['RAM at 2**20, `ours-lz4`', f'≤ {RAM_TARGET_GIB} GiB',
                    f'{ram:.2f} GiB ('
                    f'{"met" if ram <= RAM_TARGET_GIB else "NOT met"})'])
  lines += timing.markdown_table(['target', 'required', 'result'], targets,
                                 align=['l', 'r', 'r'])
  return '\n'.join(lines) + '\n'


def define_flags():
  flags.DEFINE_integer('jax_capacity_log2', 17,
                       'Capacity of the memories, 2**this.')
  flags.DEFINE_integer('jax_frames', 20000, 'MsPacman frames, cycled.')
  flags.DEFINE_integer('jax_rounds', 30, 'Rounds of sample and update.')
  common.define_output_flag()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  capacity = 2**options.jax_capacity_log2
  results = run_section(capacity, options.jax_frames, options.jax_rounds, 0,
                        None, progress=timing.print_progress)
  common.write_report(
      common.document('Dopamine JAX replay API', common.describe_machine(),
                      format_section(results, capacity)), options.output)


if __name__ == '__main__':
  define_flags()
  app.run(main)
