r"""The scale section's staged graph-mode training step (issue 33).

Part of the `scale` section (benchmarks/scale_benchmark.py), which runs
`measure_steps` once per game in a fresh interpreter of its own, after the
memories' own processes. Issue 33 asks that, with staging, the graph-mode
Atari training step be no slower with `compress_observations=True` than
without: this measures that step on memories of the section's capacity
filled with the section's real frames.

In one process (`measure_steps`):

1. each memory (`ours_compressed`, `ours` and, where asked, Dopamine's) is
   built and filled to capacity with the game's frames, cycled, as the
   section fills its memories (replay_benchmark's `add_transitions`);
2. each memory is wrapped as it is (`wrapped_memory`) by a
   WrappedPrioritizedReplayBuffer with `use_staging=True` in a graph of its
   own (staging_benchmark's `StepGraph`: ours through the native ops;
   Dopamine's `use_staging` does nothing, its sample is a py_func);
3. the staged step of each (sample, the training, the batch's priority
   update) and the training alone on a fixed batch (`train`, on ours
   uncompressed) are timed in shuffled, interleaved rounds
   (staging_benchmark's `time_cases`).

The training (`network`) is by default the Atari training step itself:
the Rainbow agent's, on the package's `atari_lib.RainbowNetwork`
(benchmarks/rainbow_training.py: online network on the states, target
network on the next states, the C51 loss, the priorities sqrt(loss) set,
Adam). With `network='dense'` it is instead a chain of dense layers on the
states whose depth is calibrated on ours uncompressed so that training a
fixed batch costs about one sample (staging_benchmark's
`calibrate_layers`), the same depth for every memory: a step that can hide
little of a slower sample, not the Atari step.

The step's cost does not grow with the capacity (a batch reads 32
transitions however many are stored), so the section reports it unchanged
at 2**20.
"""

import os
import sys
import time
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import atari_frames  # pylint: disable=g-import-not-at-top
from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import rainbow_training  # pylint: disable=g-import-not-at-top
from benchmarks import replay_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import staging_benchmark  # pylint: disable=g-import-not-at-top
from benchmarks import timing  # pylint: disable=g-import-not-at-top

__all__ = ['DEFAULT_NETWORK', 'IMPLEMENTATIONS', 'REFERENCE', 'derive_step',
           'describe', 'describe_network', 'describe_pairs', 'measure_steps']

# The memories whose staged step can be measured, in the section's order.
IMPLEMENTATIONS = ('ours_compressed', 'ours', 'dopamine')
# What the others' steps are divided by.
REFERENCE = 'ours'
TRAIN = 'train'
# The step's training: Rainbow's Atari training (see the module docstring).
DEFAULT_NETWORK = 'rainbow'


def _memory(name: str, capacity: int, pool: replay_benchmark.FramePool):
  """replay_benchmark's out-of-graph memory for `name`, empty."""
  if name == 'ours_compressed':
    return replay_benchmark.OursMemory(capacity, pool,
                                       compress_observations=True)
  return replay_benchmark.make_memory(name, capacity, pool)


def _filled(names: Sequence[str], capacity: int,
            pool: replay_benchmark.FramePool,
            say: Callable[[str], None]
           ) -> Tuple[Dict[str, Any], Dict[str, float]]:
  """({name: replay_benchmark memory filled to `capacity`}, {name: seconds
  its construction and fill took})."""
  memories, fill_seconds = {}, {}
  for name in names:
    say(f'scale step: filling {name} with {capacity:,} transitions')
    start = time.perf_counter()
    memories[name] = _memory(name, capacity, pool)
    memories[name].add_transitions(capacity)
    fill_seconds[name] = time.perf_counter() - start
  return memories, fill_seconds


def measure_steps(game: str, capacity: int, frame_count: int,
                  names: Sequence[str], rounds: int, steps: int, seed: int,
                  cache_dir: Optional[str] = None,
                  frames: Optional[np.ndarray] = None,
                  network: str = DEFAULT_NETWORK,
                  progress: Optional[Callable[[str], None]] = None
                 ) -> Dict[str, Any]:
  """Times the staged training step of each memory (the module docstring).

  Meant to run in a fresh interpreter (`common.in_fresh_process`).

  Args:
    game: str, the game (atari_lib name).
    capacity: int, each memory's capacity, filled to it.
    frame_count: int, frames of the game, cycled.
    names: memories out of `IMPLEMENTATIONS`; `REFERENCE` among them.
    rounds: int, interleaved rounds.
    steps: int, session runs timed per case and round.
    seed: int, the frames' seed and the rounds' orders.
    cache_dir: the frames' cache directory (atari_frames).
    frames: optional uint8 [n, 84, 84] used instead of the game's (tests).
    network: the training, one of staging_benchmark.NETWORKS: 'rainbow'
      (the Atari training step) or 'dense' (the calibrated chain).
    progress: optional callable taking a str.

  Returns:
    dict: 'capacity', 'network', 'layers' (the dense chain's depth; None
    for 'rainbow'), 'step_ms'
    {name: [median ms per staged step, one per round]}, 'train_ms' (the
    same for the training alone), 'fill_s' {name: seconds to fill},
    'load_average' (start, end), 'seconds'.

  Raises:
    ValueError: if `names` lacks `REFERENCE` or has an unknown name, or
      `network` is unknown.
  """
  unknown = set(names) - set(IMPLEMENTATIONS)
  if REFERENCE not in names or unknown:
    raise ValueError(f'names must include {REFERENCE!r} and be out of '
                     f'{IMPLEMENTATIONS}, got {list(names)}')
  if network not in staging_benchmark.NETWORKS:
    raise ValueError(f'network must be one of {staging_benchmark.NETWORKS}, '
                     f'got {network!r}')
  started, load_start = time.perf_counter(), common.load_average()
  say = progress or (lambda text: None)
  if frames is None:
    frames = atari_frames.load(game, frame_count, seed, cache_dir,
                               progress=progress).frames
  pool = replay_benchmark.FramePool(0, seed, frames=np.asarray(frames))
  memories, fill_seconds = _filled(names, capacity, pool, say)
  layers = None
  if network == 'dense':
    say(f'scale step: {game}, calibrating the training on {REFERENCE}')
    layers = staging_benchmark.calibrate_layers(
        capacity, 0, memory=memories[REFERENCE].memory)
  graphs = {name: staging_benchmark.StepGraph(
      True, layers, capacity, 0, memory=memories[name].memory,
      dopamine=name == 'dopamine', network=network) for name in names}
  cases = {name: (graph, graph.step) for name, graph in graphs.items()}
  cases[TRAIN] = (graphs[REFERENCE], graphs[REFERENCE].train)
  say(f'scale step: {game}, {rounds} rounds of {", ".join(cases)}')
  samples = staging_benchmark.time_cases(cases, rounds, steps, progress,
                                         seed)
  for graph in graphs.values():
    graph.session.close()
  return {'capacity': capacity, 'network': network, 'layers': layers,
          'step_ms': {name: samples[name] for name in names},
          'train_ms': samples[TRAIN], 'fill_s': fill_seconds,
          'load_average': (load_start, common.load_average()),
          'seconds': time.perf_counter() - started}


def derive_step(measured: Optional[Mapping[str, Any]], name: str
               ) -> Dict[str, Optional[float]]:
  """The step's table figures for memory `name`.

  Args:
    measured: `measure_steps`'s dict for one game, or None if not measured.
    name: the memory.

  Returns:
    {'step': median ms of its staged step, 'step_ratio': that / the
    median of `REFERENCE`'s}; None where not measured.
  """
  ms = (measured or {}).get('step_ms', {})
  if name not in ms:
    return {'step': None, 'step_ratio': None}
  step, reference = timing.median(ms[name]), timing.median(ms[REFERENCE])
  return {'step': step, 'step_ratio': step / reference if reference else None}


def describe_pairs(measured: Mapping[str, Any], name: str) -> str:
  """`name`'s step against `REFERENCE`'s round by round, in words.

  A round times every memory's step once, interleaved, so the ratio of two
  steps in one round is freer of the machine's drift than the ratio of
  their medians: the median of those ratios, and in how many rounds
  `name`'s step was the slower ('' if either was not measured).
  """
  ms = measured.get('step_ms', {})
  if name not in ms or REFERENCE not in ms:
    return ''
  ratios = [a / b for a, b in zip(ms[name], ms[REFERENCE]) if b > 0]
  if not ratios:
    return ''
  slower = sum(ratio > 1 for ratio in ratios)
  return (f'{name} / {REFERENCE} round by round: median '
          f'{timing.median(ratios):.3f}x, slower in {slower} of '
          f'{len(ratios)} rounds')


def describe_network(measured: Mapping[str, Any]) -> str:
  """What the step trained, in words ('the Rainbow network', '3 dense
  layers'), from `measure_steps`' dict (older ones: the dense chain)."""
  if measured.get('network', 'dense') == 'rainbow':
    return 'the Rainbow network'
  return f'{measured["layers"]} dense layers'


def describe(rounds: int, steps: int, network: str = DEFAULT_NETWORK) -> str:
  """The method in a few sentences, for the section's text (ends in ' ')."""
  if network == 'rainbow':
    training = (
        'runs the Rainbow agent\'s Atari training on it (the package\'s '
        f'`atari_lib.RainbowNetwork`, 51 atoms, {rainbow_training.NUM_ACTIONS} '
        'actions: the online '
        'network on the states and the target network on the next states, '
        'the C51 cross-entropy, the priorities sqrt(loss) set, Adam; '
        'benchmarks/rainbow_training.py)')
  else:
    training = ('runs a chain of dense layers on its states (calibrated on '
                'ours uncompressed to cost about one sample; not the Atari '
                'network) and sets the batch\'s priorities')
  return (
      'Graph training step, staged: per game, in one more fresh process, '
      'ours compressed, ours and (on the peer games) Dopamine TF filled the '
      'same way, each wrapped by its WrappedPrioritizedReplayBuffer with '
      '`use_staging=True` (Dopamine\'s does nothing) in a session of one '
      'math thread and two inter-op threads; the step samples a batch and '
      f'{training}; median ms over {rounds} interleaved rounds of {steps} '
      'runs; unchanged at 2**20 (a batch\'s cost does not grow with the '
      'memory; benchmarks/scale_step.py). ')
