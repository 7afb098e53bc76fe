r"""Atari at scale: memory, adds, sampling, checkpoints and loads (issue 33).

Part of `python -m benchmarks` (see benchmarks/__main__.py), its section
`scale`, which runs only when asked for (about 40 minutes on 2 cores). This
section alone, printed and not written:

  python -m benchmarks --sections=scale
  python -m benchmarks.scale_benchmark --games=MsPacman
  python -m benchmarks.scale_benchmark --capacity_log2=12 --frames=300

and written (the tables, as benchmarks/SCALE.md holds them, and the plot):

  python -m benchmarks.scale_benchmark --output=benchmarks/SCALE.md \
      --plot=benchmarks/scale.png

Every memory is Atari-shaped (84x84 uint8 frames, stacks of 4, 3-step
returns, batches of 32; the memories of benchmarks/replay_benchmark.py) and
is fed real frames of a game (benchmarks/atari_frames.py: Dopamine's
preprocessing, seeded random play, cached), cycled until it is full; an
episode ends every `replay_benchmark.EPISODE_LENGTH` transitions. The
implementations (`IMPLEMENTATIONS`):

* `ours`: dopamine_per's OutOfGraphPrioritizedReplayBuffer (default
  kernels), frames stored as an array;
* `ours_compressed`: the same with `compress_observations=True` (frames in
  LZ4 HC blocks of 4), whatever its sampler does today;
* `dopamine`: Dopamine 4.1.2's `dopamine.tf.replay_memory.
  prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer`;
* `cpprb`: cpprb's PrioritizedReplayBuffer as replay_benchmark.py sets it
  up. It has no checkpoint of its state: its `save_transitions` writes
  every transition's stacks unpacked and without priorities (56 KB per
  transition, about 45 s for 2**14 transitions here: 29 GB at 2**19), so
  its save and load rows are n/a.

Each (game, implementation) runs in a fresh interpreter of its own, one
after the other (`common.in_fresh_process`), so that gigabytes freed by one
cannot flatter the next one's resident memory or timings. In it
(`measure_memory`):

1. a warm-up on a memory of capacity 1000 (imports, compiled code), then
   the resident set (VmRSS) as the baseline, the game's frames already in
   it;
2. the fill: `capacity` adds, one transition a call, timed in bursts of
   `add_burst`; resident bytes = VmRSS after the fill minus the baseline,
   and ours' own account, `memory.nbytes`;
3. sample(32) + set_priority(32) (replay_benchmark's `cycle`) against the
   copy floor (`replay_benchmark.CopyFloor`: the batch's 8 frames per
   transition fancy-indexed out of the raw frames), interleaved in shuffled
   rounds (`timing.run_interleaved`), medians;
4. `saves` checkpoints into one directory, `adds_between_saves` adds (timed
   in bursts, after the wrap-around) before each but the first, as a
   Runner would between iterations; Dopamine's memory and ours keep the
   last 4 (`checkpoint_duration`). Ours saves with `background=True`: the
   stall is the time until `save` returns its Future, the wall time until
   the Future is done (waited for at once, the trainer idle); a peer's save
   stalls for all of its time. Bytes written by a save are the sizes of
   the files it created or changed (a file's inode, size or mtime
   changed); the retained bytes are every file in the directory after the
   last save;
5. loads of the last checkpoint into a fresh memory (the filled one freed
   first), up to `load_repeats` times or until `load_budget_seconds` have
   been spent, each checked to hold as many transitions as were saved.

Then, per game, one more fresh interpreter times the staged graph-mode
training step (the issue's "graph sample" row) of ours compressed, ours
and, on the peer games, Dopamine's, each filled to `capacity` with the
game's frames, interleaved (benchmarks/scale_step.py). The step trains the
Rainbow agent's Atari network (benchmarks/rainbow_training.py); with
--step_network=dense, a chain of dense layers calibrated to cost about one
sample instead.

The table per game gives every figure at the measured capacity and at
2**20, extrapolated (`scale_figures.extrapolate`): per-operation times
(add, sample + set_priority, the copy floor, the staged step) and their
ratios unchanged; resident bytes, checkpoint bytes and the save, stall and
load times multiplied by 2**20 / capacity (linear in the memory's size).
Issue 33's targets are then checked on the least compressible game
measured (the largest `nbytes` of `ours_compressed`, else the largest
checkpoint of `ours`), from those numbers
(`scale_figures.evaluate_targets`).

`scale_summary.headline_table` sums up the least compressible game at
2**20 under the tables, and `scale_summary.plot` draws those figures as
bars with the targets (--plot; `python -m benchmarks`' --scale_plot).
"""

import gc
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from absl import app
from absl import flags
import numpy as np

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import atari_frames  # pylint: disable=g-import-not-at-top
from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import compression_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import replay_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import scale_figures  # pylint: disable=g-import-not-at-top
from benchmarks import scale_step  # pylint: disable=g-import-not-at-top
from benchmarks import scale_summary  # pylint: disable=g-import-not-at-top
from benchmarks import timing  # pylint: disable=g-import-not-at-top

__all__ = [
    'DEFAULT_GAMES',
    'DEFAULT_PEER_GAMES',
    'IMPLEMENTATIONS',
    'at_target_figures',
    'available_implementations',
    'format_section',
    'measure_memory',
    'run_benchmark',
    'run_section',
    'write_plot',
]

DEFAULT_GAMES = compression_benchmark.DEFAULT_GAMES
# The peers' saves take minutes at 2**19 (Dopamine's about 2.5 each): by
# default they run on the least compressible game only.
DEFAULT_PEER_GAMES = ('MsPacman',)
IMPLEMENTATIONS = ('ours_compressed', 'ours', 'dopamine', 'cpprb')
PEERS = ('dopamine', 'cpprb')
TITLES = {'ours_compressed': 'ours, compressed', 'ours': 'ours',
          'dopamine': 'Dopamine TF', 'cpprb': 'cpprb'}
BATCH_SIZE = scale_figures.BATCH_SIZE
CHECKPOINTS_RETAINED = 4


# ------------------------------------------------------------ measuring


def available_implementations() -> List[str]:
  """Ours (both ways) and every installed peer, in `IMPLEMENTATIONS` order."""
  names = ['ours_compressed', 'ours']
  if common.dopamine_available():
    names.append('dopamine')
  if common.cpprb_available():
    names.append('cpprb')
  return names


def _make_memory(name, capacity, pool):
  """replay_benchmark's memory for `name` (see IMPLEMENTATIONS)."""
  if name == 'ours_compressed':
    return replay_benchmark.OursMemory(capacity, pool,
                                       compress_observations=True)
  return replay_benchmark.make_memory(name, capacity, pool)


def _save(name, memory, checkpoint_dir, iteration):
  """Saves; returns (stall seconds, wall seconds), or None for cpprb."""
  if name == 'cpprb':
    return None
  start = time.perf_counter()
  if name.startswith('ours'):
    future = memory.memory.save(checkpoint_dir, iteration, background=True)
    stall = time.perf_counter() - start
    future.result()
  else:
    memory.memory.save(checkpoint_dir, iteration)
    stall = time.perf_counter() - start
  return stall, time.perf_counter() - start


def _files(directory):
  """{path: (inode, size, mtime_ns)} of the files under `directory`."""
  found = {}
  for root, _, names in os.walk(directory):
    for file_name in names:
      path = os.path.join(root, file_name)
      status = os.stat(path)
      found[path] = (status.st_ino, status.st_size, status.st_mtime_ns)
  return found


def _bytes_written(before, after):
  """Bytes of the files in `after` that are new or changed since `before`."""
  return sum(entry[1] for path, entry in after.items()
             if before.get(path) != entry)


def _timed_adds(memory, count, burst, per_add_us):
  """Adds `count` transitions in bursts; appends µs per add per burst."""
  while count > 0:
    size = min(burst, count)
    start = time.perf_counter_ns()
    memory.add_transitions(size)
    per_add_us.append((time.perf_counter_ns() - start) / size / 1e3)
    count -= size


def _load_frames(game, frame_count, seed, cache_dir, frames, progress):
  if frames is not None:
    return np.asarray(frames)
  return atari_frames.load(game, frame_count, seed, cache_dir,
                           progress=progress).frames


def measure_memory(name: str, game: str, capacity: int, frame_count: int,
                   rounds: int, saves: int, adds_between_saves: int,
                   load_repeats: int, load_budget_seconds: float,
                   seed: int, cache_dir: Optional[str] = None,
                   frames: Optional[np.ndarray] = None,
                   add_burst: int = 1000, burst_seconds: float = 0.05,
                   work_dir: Optional[str] = None,
                   progress: Optional[Callable[[str], None]] = None
                  ) -> Dict[str, Any]:
  """Measures one implementation on one game (see the module docstring).

  Meant to run in a fresh interpreter (`common.in_fresh_process`): the
  resident memory is measured against this process's baseline.

  Args:
    name: one of `IMPLEMENTATIONS`.
    game: str, the game (atari_lib name).
    capacity: int, the memory's capacity, filled to it.
    frame_count: int, frames of the game, cycled.
    rounds: int, interleaved rounds of sample + set_priority and the floor.
    saves: int, checkpoints written into one directory.
    adds_between_saves: int, adds before each save but the first.
    load_repeats: int, most loads timed.
    load_budget_seconds: float, no further load once this much is spent.
    seed: int, the frames' seed and the draws'.
    cache_dir: the frames' cache directory (atari_frames).
    frames: optional uint8 [n, 84, 84] used instead of the game's (tests).
    add_burst: int, adds per timed burst.
    burst_seconds: float, about the length of one timed sampling burst.
    work_dir: where the checkpoint directory is made (default: the
      system's temporary directory); removed at the end.
    progress: optional callable taking a str.

  Returns:
    dict of the raw figures: 'capacity', 'baseline_bytes', 'resident_bytes'
    (VmRSS after the fill minus the baseline), 'nbytes' (ours; else None),
    'add_fill_us' and 'add_wrapped_us' (per-burst µs per add), 'cycle_us'
    and 'floor_us' (per-round µs), 'stall_s' and 'save_s' (per save),
    'checkpoint_bytes' (the first save's files), 'written_bytes' (per
    save), 'retained_bytes', 'load_s' (per load), 'load_average' (at the
    start and the end), 'seconds'; the save figures None for cpprb.

  Raises:
    RuntimeError: if a loaded memory does not hold what was saved.
  """
  started = time.perf_counter()
  load_start = common.load_average()
  say = progress or (lambda text: None)
  frames = _load_frames(game, frame_count, seed, cache_dir, frames, progress)
  pool = replay_benchmark.FramePool(0, seed, frames=frames)
  if name == 'cpprb':
    pool.stacks  # pylint: disable=pointless-statement
  rng = np.random.default_rng(seed)
  warmup = _make_memory(name, 1000, pool)
  warmup.add_transitions(200)
  warmup.cycle(BATCH_SIZE, np.ones(BATCH_SIZE))
  del warmup
  gc.collect()
  baseline = replay_benchmark.status_kib('VmRSS') * 1024
  memory = _make_memory(name, capacity, pool)
  say(f'scale: {game}, {name}: filling {capacity:,} transitions')
  add_fill_us = []
  _timed_adds(memory, capacity, add_burst, add_fill_us)
  gc.collect()
  resident = replay_benchmark.status_kib('VmRSS') * 1024 - baseline
  nbytes = int(memory.memory.nbytes) if name.startswith('ours') else None

  say(f'scale: {game}, {name}: sample + set_priority, {rounds} rounds')
  priorities = [(BATCH_SIZE, 1.0 - rng.random(BATCH_SIZE))
                for _ in range(64)]
  floor = replay_benchmark.CopyFloor(frames, len(frames), seed)
  cases = {'cycle': timing.Case(timing.rotating(priorities, memory.cycle),
                                memory.environ),
           'floor': timing.Case(timing.rotating(priorities, floor.cycle))}
  sampled = timing.run_interleaved(cases, rounds, burst_seconds, rng)

  figures = {'capacity': capacity, 'baseline_bytes': baseline,
             'resident_bytes': resident, 'nbytes': nbytes,
             'add_fill_us': add_fill_us, 'add_wrapped_us': [],
             'cycle_us': sampled['cycle'], 'floor_us': sampled['floor'],
             'stall_s': None, 'save_s': None, 'checkpoint_bytes': None,
             'written_bytes': None, 'retained_bytes': None, 'load_s': None}
  saved_count = None
  checkpoint_dir = tempfile.mkdtemp(prefix='scale_benchmark_', dir=work_dir)
  try:
    saving = name != 'cpprb'
    if saving:
      figures.update(stall_s=[], save_s=[], written_bytes=[])
    for iteration in range(1, saves + 1):
      if iteration > 1:
        _timed_adds(memory, adds_between_saves, add_burst,
                    figures['add_wrapped_us'])
      if not saving:
        continue
      say(f'scale: {game}, {name}: save {iteration}/{saves}')
      before = _files(checkpoint_dir)
      stall, wall = _save(name, memory, checkpoint_dir, iteration)
      after = _files(checkpoint_dir)
      figures['stall_s'].append(stall)
      figures['save_s'].append(wall)
      figures['written_bytes'].append(_bytes_written(before, after))
      if iteration == 1:
        figures['checkpoint_bytes'] = sum(e[1] for e in after.values())
      figures['retained_bytes'] = sum(e[1] for e in after.values())
      saved_count = int(memory.memory.add_count)
    del memory
    gc.collect()
    if saving:
      figures['load_s'] = []
      while (len(figures['load_s']) < load_repeats and
             sum(figures['load_s']) < load_budget_seconds):
        say(f'scale: {game}, {name}: load {len(figures["load_s"]) + 1}')
        fresh = _make_memory(name, capacity, pool)
        start = time.perf_counter()
        fresh.memory.load(checkpoint_dir, saves)
        figures['load_s'].append(time.perf_counter() - start)
        if int(fresh.memory.add_count) != saved_count:
          raise RuntimeError(f'{name} loaded {fresh.memory.add_count} '
                             f'transitions, saved {saved_count}')
        del fresh
        gc.collect()
  finally:
    shutil.rmtree(checkpoint_dir, ignore_errors=True)
  figures['load_average'] = (load_start, common.load_average())
  figures['seconds'] = time.perf_counter() - started
  return figures


def run_benchmark(games: Sequence[str] = DEFAULT_GAMES,
                  peer_games: Sequence[str] = DEFAULT_PEER_GAMES,
                  capacity: int = 2**19, frame_count: int = 20000,
                  rounds: int = 15, saves: int = CHECKPOINTS_RETAINED,
                  adds_between_saves: int = 10000, load_repeats: int = 3,
                  load_budget_seconds: float = 90.0, seed: int = 0,
                  cache_dir: Optional[str] = None,
                  implementations: Optional[Sequence[str]] = None,
                  frame_sets: Optional[Mapping[str, np.ndarray]] = None,
                  add_burst: int = 1000, burst_seconds: float = 0.05,
                  step_rounds: int = 10, step_steps: int = 20,
                  progress: Optional[Callable[[str], None]] = None,
                  step_network: str = scale_step.DEFAULT_NETWORK
                 ) -> Dict[str, Any]:
  """Measures every implementation on every game, one process each.

  Then the staged training steps of each game in one more process
  (`scale_step.measure_steps`), where ours uncompressed is among the
  implementations and `step_rounds` is positive.

  Args:
    games: the games (atari_lib names).
    peer_games: the games on which the peers (Dopamine, cpprb) run too.
    capacity: int, the memories' capacity.
    frame_count: int, frames per game (cycled).
    rounds: int, interleaved rounds of the sampling.
    saves: int, checkpoints per memory.
    adds_between_saves: int.
    load_repeats: int, most loads per memory.
    load_budget_seconds: float.
    seed: int.
    cache_dir: the frames' cache directory.
    implementations: names (see IMPLEMENTATIONS); None for all available.
    frame_sets: optional {game: frames} used instead of the games' (tests).
    add_burst: int, adds per timed burst.
    burst_seconds: float, about the length of a timed sampling burst.
    step_rounds: int, interleaved rounds of the staged steps; 0: none.
    step_steps: int, session runs per staged step case and round.
    progress: optional callable taking a str.
    step_network: the staged step's training: 'rainbow' (the Atari
      training step) or 'dense' (the calibrated chain); see scale_step.py.

  Returns:
    dict: 'games' {game: {implementation: `measure_memory`'s dict}},
    'steps' {game: `scale_step.measure_steps`' dict}, 'settings',
    'load_average' (start, end), 'seconds'.
  """
  started = time.perf_counter()
  load_start = common.load_average()
  implementations = list(implementations or available_implementations())
  settings = dict(
      capacity=capacity, frame_count=frame_count, rounds=rounds, saves=saves,
      adds_between_saves=adds_between_saves, load_repeats=load_repeats,
      load_budget_seconds=load_budget_seconds, add_burst=add_burst,
      seed=seed, step_rounds=step_rounds, step_steps=step_steps,
      step_network=step_network)
  results = {'games': {}, 'steps': {}, 'settings': settings}
  for game in games:
    results['games'][game] = {}
    for name in implementations:
      if name in PEERS and game not in peer_games:
        continue
      if progress:
        progress(f'scale: {game}, {name}, capacity {capacity:,} (load '
                 f'average {common.load_average()})')
      results['games'][game][name] = common.in_fresh_process(
          measure_memory, name, game, capacity, frame_count, rounds, saves,
          adds_between_saves, load_repeats, load_budget_seconds, seed,
          cache_dir, None if frame_sets is None else frame_sets[game],
          add_burst, burst_seconds, progress=progress)
  for game in games:
    names = [n for n in scale_step.IMPLEMENTATIONS if n in implementations
             and (n not in PEERS or game in peer_games)]
    if step_rounds > 0 and scale_step.REFERENCE in names:
      results['steps'][game] = common.in_fresh_process(
          scale_step.measure_steps, game, capacity, frame_count, names,
          step_rounds, step_steps, seed, cache_dir,
          None if frame_sets is None else frame_sets[game], step_network,
          progress=progress)
  results['load_average'] = (load_start, common.load_average())
  results['seconds'] = time.perf_counter() - started
  return results


def run_section(games: Sequence[str], peer_games: Sequence[str],
                capacity: int, frame_count: int, seed: int,
                cache_dir: Optional[str],
                progress: Optional[Callable[[str], None]] = None
               ) -> Dict[str, Any]:
  """`run_benchmark` with the other settings at their defaults (what
  `python -m benchmarks` runs)."""
  return run_benchmark(games, peer_games, capacity, frame_count, seed=seed,
                       cache_dir=cache_dir, progress=progress)


# ------------------------------------------------------ figures at 2**20


def at_target_figures(results: Mapping[str, Any], game: str
                     ) -> Dict[str, Dict[str, Optional[float]]]:
  """{implementation: `extrapolate`'d figures} of `game`, in
  `IMPLEMENTATIONS` order."""
  memories = results['games'][game]
  steps = results.get('steps', {}).get(game)
  capacity = results['settings']['capacity']
  return {
      name: scale_figures.extrapolate(
          scale_figures.derive(memories[name], name, steps), capacity)
      for name in IMPLEMENTATIONS if name in memories}


# ------------------------------------------------------------- formatting


def _cell(value, unit):
  if value is None:
    return 'n/a'
  if unit == 'µs':
    return timing.format_microseconds(value)
  if unit in ('x', 's') or (unit == 'ms' and value < 10):
    return f'{value:.2f}'
  if unit == '%':
    return f'{value:.1f}'
  return f'{value:,.0f}'


def _verdict(value_text, met):
  if met is None:
    return value_text
  return f'{value_text} ({"met" if met else "NOT met"})'


def _retained(settings):
  """How many checkpoints the saves leave (ours and Dopamine keep 4)."""
  return min(settings['saves'], CHECKPOINTS_RETAINED)


def write_plot(results: Mapping[str, Any], path: str) -> Optional[str]:
  """Draws the least compressible game's key figures at 2**20 (a PNG).

  Args:
    results: `run_benchmark`'s dict.
    path: str, the PNG file.

  Returns:
    The game plotted, or None (nothing written) if none was measured.
  """
  game = scale_figures.least_compressible(results)
  if game is None:
    return None
  at_target = at_target_figures(results, game)
  targets = {key: value
             for key, (value, _) in scale_figures.targets().items()
             if value is not None}
  reference_step = at_target.get('ours', {}).get('step')
  if reference_step is not None:  # The step's target: ours uncompressed's.
    targets['step'] = reference_step * scale_figures.TARGET_STEP_RATIO
  scale_summary.plot(path, at_target, TITLES, game, targets)
  return game


def _counts(figures):
  """'4 saves, 2 loads': how many of each the medians are over."""
  parts = [f'{len(figures["cycle_us"])} rounds']
  if figures['save_s'] is not None:
    parts += [f'{len(figures["save_s"])} saves',
              f'{len(figures["load_s"])} loads']
  return ', '.join(parts)


def format_section(results: Mapping[str, Any]) -> str:
  """Formats the results as a Markdown section (a `##` heading, tables)."""
  settings = results['settings']
  capacity = settings['capacity']
  capacity_name = common.log2_name(capacity)
  target_name = common.log2_name(scale_figures.TARGET_CAPACITY)
  load_start, load_end = results.get('load_average', ('?', '?'))
  lines = [
      '## Atari at scale: memory, sampling and checkpoints (issue 33)',
      '',
      f'Capacity {capacity_name}, filled with real 84x84 frames of each game '
      f'({settings["frame_count"]:,} frames, benchmarks/atari_frames.py, '
      'cycled), stacks of 4, 3-step returns, batches of '
      f'{BATCH_SIZE}. Each memory in a fresh process of its own, one after '
      'the other (the machine shared: 1-minute load average '
      f'{load_start} at the start, {load_end} at the end; each process\'s '
      'below). Resident: VmRSS after the fill minus before the constructor '
      '(frames and imports in both). Add: median µs per add over bursts of '
      f'{settings["add_burst"]:,}. Sample + set_priority and the copy floor '
      '(the batch\'s 8 frames per transition fancy-indexed from a raw '
      'array): medians over interleaved rounds. '
      f'{settings["saves"]} saves into one directory, '
      f'{settings["adds_between_saves"]:,} adds before each but the first; '
      'ours saves with `background=True` (stall: until `save` returns; wall: '
      'until its Future is done), the peers in the foreground (stall = '
      'wall). "Written by a save after new transitions": the files the 2nd '
      'to last saves created or changed. Load: the last checkpoint into a '
      f'fresh memory, at most {settings["load_repeats"]} times or '
      f'{settings["load_budget_seconds"]:g} s. n/a: no equivalent (cpprb '
      'has no checkpoint of its state: its `save_transitions` writes the '
      'stacks unpacked, without priorities, 56 KB per transition). Dopamine '
      'TF is dopamine-rl 4.1.2\'s `dopamine.tf.replay_memory.'
      'prioritized_replay_buffer`. '
      f'At {target_name}, extrapolated: per-operation times (add, sample + '
      'set_priority, the copy floor) and ratios unchanged; resident bytes, '
      'checkpoint bytes, save, stall and load times x '
      f'{target_name} / {capacity_name} (linear in the memory\'s size). '
      + scale_step.describe(settings.get('step_rounds', 0),
                            settings.get('step_steps', 0),
                            settings.get('step_network', 'dense')) +
      'Method: benchmarks/scale_benchmark.py.',
      '',
  ]
  at_target_by_game = {}
  for game, memories in results['games'].items():
    names = [n for n in IMPLEMENTATIONS if n in memories]
    steps = results.get('steps', {}).get(game)
    derived = {name: scale_figures.derive(memories[name], name, steps)
               for name in names}
    at_target = at_target_figures(results, game)
    at_target_by_game[game] = at_target
    lines += [f'### {game}', '']
    lines += [f'- {TITLES[n]}: {memories[n]["seconds"]:.0f} s, load average '
              f'{memories[n]["load_average"][0]} to '
              f'{memories[n]["load_average"][1]}, {_counts(memories[n])}'
              for n in names]
    if steps:
      lines.append(f'- staged steps: {steps["seconds"]:.0f} s, load average '
                   f'{steps["load_average"][0]} to '
                   f'{steps["load_average"][1]}, '
                   f'{scale_step.describe_network(steps)}, '
                   f'{len(steps["train_ms"])} rounds'
                   + ''.join(f'; {pairs}' for pairs in
                             [scale_step.describe_pairs(steps,
                                                        'ours_compressed')]
                             if pairs))
    lines.append('')
    rows = []
    for key, label, unit, _ in scale_figures.METRICS:
      if key == 'retained':
        label = (f'bytes on disk for the {_retained(settings)} retained '
                 'checkpoints')
      rows.append([f'{label} ({unit})'] +
                  [_cell(derived[n][key], unit) for n in names] +
                  [_cell(at_target[n][key], unit) for n in names])
    lines += timing.markdown_table(
        ['figure'] + [f'{TITLES[n]}, {capacity_name}' for n in names] +
        [f'{TITLES[n]}, {target_name}' for n in names], rows)
    lines.append('')
  game = scale_figures.least_compressible(results)
  if game is not None:
    rows = scale_figures.evaluate_targets(at_target_by_game[game])
    ours = [n for n in ('ours_compressed', 'ours')
            if n in at_target_by_game[game]]
    lines += [f'Issue 33\'s targets at {target_name} (extrapolated) on '
              f'{game}, the least compressible game measured (largest '
              '`nbytes` compressed), from the numbers above:', '']
    lines += timing.markdown_table(
        ['target'] + [TITLES[n] for n in ours],
        [[title] + [_verdict(*verdicts[n]) for n in ours]
         for title, verdicts in rows])
    lines += ['', scale_summary.headline_table(
        at_target_by_game[game], TITLES, game,
        {key: text for key, (_, text) in scale_figures.targets().items()},
        _retained(settings)), '']
  return '\n'.join(lines)


# ------------------------------------------------------------ the command


def define_flags():
  """Defines the command-line flags (only when run as a program)."""
  flags.DEFINE_list('games', list(DEFAULT_GAMES), 'Games (atari_lib names).')
  flags.DEFINE_list('peer_games', list(DEFAULT_PEER_GAMES),
                    'Games on which Dopamine and cpprb run too.')
  flags.DEFINE_list('implementations', [],
                    f'Subset of {", ".join(IMPLEMENTATIONS)} (default: all '
                    'available).')
  flags.DEFINE_integer('capacity_log2', 19, 'Memory capacity, 2**this.')
  flags.DEFINE_integer('frames', 20000, 'Frames per game, cycled.')
  flags.DEFINE_integer('rounds', 15, 'Interleaved sampling rounds.')
  flags.DEFINE_integer('saves', CHECKPOINTS_RETAINED, 'Saves per memory.')
  flags.DEFINE_integer('adds_between_saves', 10000,
                       'Adds before each save but the first.')
  flags.DEFINE_integer('load_repeats', 3, 'Most loads per memory.')
  flags.DEFINE_float('load_budget_seconds', 90.0,
                     'No further load once this much time is spent.')
  flags.DEFINE_integer('seed', 0, 'Seed of the frames and the draws.')
  flags.DEFINE_string('cache_dir', None, 'Frames cache directory (default '
                      f'{atari_frames.DEFAULT_CACHE_DIR}).')
  flags.DEFINE_integer('step_rounds', 10, 'Interleaved rounds of the staged '
                       'training steps (0: not measured).')
  flags.DEFINE_integer('step_steps', 20,
                       'Session runs per staged step case and round.')
  flags.DEFINE_enum('step_network', scale_step.DEFAULT_NETWORK,
                    ['rainbow', 'dense'], 'The staged step\'s training: '
                    'Rainbow\'s Atari training step, or a chain of dense '
                    'layers calibrated to cost about one sample.')
  flags.DEFINE_string('plot', '', 'PNG of the key figures at 2**20 (e.g. '
                      'benchmarks/scale.png); empty: none.')
  common.define_output_flag()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  results = run_benchmark(
      options.games, options.peer_games, 2**options.capacity_log2,
      options.frames, options.rounds, options.saves,
      options.adds_between_saves, options.load_repeats,
      options.load_budget_seconds, options.seed, options.cache_dir,
      implementations=options.implementations or None,
      step_rounds=options.step_rounds, step_steps=options.step_steps,
      progress=timing.print_progress, step_network=options.step_network)
  if options.plot:
    write_plot(results, options.plot)
  common.write_report(
      common.document('Scale benchmark', common.describe_machine(),
                      format_section(results)), options.output)


if __name__ == '__main__':
  define_flags()
  app.run(main)
