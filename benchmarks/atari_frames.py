r"""Real 84x84 Atari frames for the benchmarks, collected once and cached.

The compression section (benchmarks/compression_benchmark.py) measures
codecs on what a replay memory would store: the frames Dopamine's
preprocessing returns (`atari_lib.create_atari_environment`: sticky actions,
frame skip 4, max-pool of the last two grayscale screens, area resize to
84x84), one per agent step, in the order a memory adds them.

The policy is uniformly random actions drawn from a seeded NumPy generator
(the environment is seeded with the same seed), so a (game, count, seed)
always gives the same frames. Random play is not a trained agent's: it
dies sooner and sees fewer screens of a game (Breakout's bricks stay
almost whole), so its frames are, if anything, more compressible than a
learning agent's late in training. Episodes are played to their end (the
game over) and the environment is reset; `episode_starts` keeps where each
episode begins, since a memory stores the consecutive frames of episodes.

Frames are cached as one .npy per (game, count, seed) under
`DEFAULT_CACHE_DIR` (or `cache_dir`), with the episode starts in a small
.npy beside it; each file is written to a temporary and renamed into place
(os.replace), the frames last, so a killed collection leaves no file that
looks complete. Collecting runs at about 1,100 agent steps a second on one
core of the 2-core development host (20,000 frames: about 20 s a game).

  python -m benchmarks.atari_frames --games=Pong,MsPacman --count=20000
"""

import os
import sys
import time
from typing import Callable, NamedTuple, Optional, Sequence, Tuple

from absl import app
from absl import flags
import numpy as np

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from dopamine_per.discrete_domains import atari_lib  # pylint: disable=g-import-not-at-top
from dopamine_per.file_io import atomic_files  # pylint: disable=g-import-not-at-top

__all__ = [
    'DEFAULT_CACHE_DIR',
    'FRAME_SHAPE',
    'FrameSet',
    'cache_paths',
    'collect',
    'frames',
    'load',
]

DEFAULT_CACHE_DIR = os.path.join('~', '.cache', 'dopamine_per', 'benchmarks',
                                 'frames')
FRAME_SHAPE = atari_lib.NATURE_DQN_OBSERVATION_SHAPE  # (84, 84)


class FrameSet(NamedTuple):
  """Consecutive frames of a game and where its episodes begin.

  Attributes:
    frames: uint8 array [count, 84, 84], in the order they were observed.
    episode_starts: int64 array, sorted, the indices of the frames that are
      an episode's first observation (the reset's); 0 is always one.
  """
  frames: np.ndarray
  episode_starts: np.ndarray


def cache_paths(game: str, count: int, seed: int,
                cache_dir: Optional[str] = None) -> Tuple[str, str]:
  """Returns (frames path, episode starts path) of a cached collection."""
  directory = os.path.expanduser(cache_dir or DEFAULT_CACHE_DIR)
  stem = os.path.join(directory, f'{game}-{count}-seed{seed}')
  return stem + '.npy', stem + '.episode_starts.npy'


def collect(game: str, count: int, seed: int,
            progress: Optional[Callable[[str], None]] = None) -> FrameSet:
  """Plays `game` with seeded random actions; returns `count` frames.

  Args:
    game: str, the game as `atari_lib.create_atari_environment` takes it
      ('Pong', 'MsPacman', ...).
    count: int, the number of frames (agent steps, resets included).
    seed: int, seeds the environment and the actions.
    progress: optional callable taking a str, told when done.

  Returns:
    FrameSet.
  """
  if count < 1:
    raise ValueError(f'count must be positive, got {count}')
  start = time.perf_counter()
  environment = atari_lib.create_atari_environment(game, sticky_actions=True)
  try:
    environment.seed(seed)
    rng = np.random.default_rng(seed)
    num_actions = environment.action_space.n
    frames = np.empty((count,) + FRAME_SHAPE, np.uint8)
    starts = [0]
    observation = environment.reset()
    for i in range(count):
      frames[i] = observation[:, :, 0]
      if i + 1 == count:
        break
      observation, _, terminal, _ = environment.step(
          int(rng.integers(num_actions)))
      if terminal:
        observation = environment.reset()
        starts.append(i + 1)
  finally:
    environment.close()
  if progress:
    seconds = time.perf_counter() - start
    progress(f'{game}: collected {count} frames, {len(starts)} episodes, in '
             f'{seconds:.1f} s ({count / seconds:,.0f} steps/s)')
  return FrameSet(frames, np.asarray(starts, np.int64))


def _save_atomically(path: str, array: np.ndarray) -> None:
  """Writes `array` as .npy to `path`, all or nothing (`atomic_write`:
  a temporary beside it, fsync'ed, renamed; a plain open's permissions)."""
  atomic_files.atomic_write(
      path, lambda f: np.save(f, array, allow_pickle=False))


def _read(game, count, paths):
  """The cached FrameSet at `paths`, or None if either file is missing."""
  frames_path, starts_path = paths
  if not (os.path.isfile(frames_path) and os.path.isfile(starts_path)):
    return None
  frames = np.load(frames_path, allow_pickle=False)
  starts = np.load(starts_path, allow_pickle=False)
  if frames.shape != (count,) + FRAME_SHAPE or frames.dtype != np.uint8:
    raise ValueError(f'{frames_path}: {game} frames of shape {frames.shape} '
                     f'and dtype {frames.dtype}, expected '
                     f'{(count,) + FRAME_SHAPE} uint8; delete it to collect '
                     'again')
  return FrameSet(frames, starts.astype(np.int64))


def load(game: str, count: int, seed: int, cache_dir: Optional[str] = None,
         progress: Optional[Callable[[str], None]] = None) -> FrameSet:
  """Returns the cached frames of (game, count, seed), collecting if needed.

  Args:
    game: str, e.g. 'MsPacman'.
    count: int, the number of frames.
    seed: int, the collection's seed (see `collect`).
    cache_dir: str, the cache directory; None for `DEFAULT_CACHE_DIR`.
    progress: optional callable taking a str, told of a collection.

  Returns:
    FrameSet.
  """
  paths = cache_paths(game, count, seed, cache_dir)
  cached = _read(game, count, paths)
  if cached is not None:
    return cached
  collected = collect(game, count, seed, progress=progress)
  os.makedirs(os.path.dirname(paths[0]), exist_ok=True)
  # The episode starts first: the frames file's presence means both are
  # complete.
  _save_atomically(paths[1], collected.episode_starts)
  _save_atomically(paths[0], collected.frames)
  return collected


def frames(game: str, count: int, seed: int,
           cache_dir: Optional[str] = None) -> np.ndarray:
  """Returns uint8 frames [count, 84, 84] of `game`, cached (see `load`)."""
  return load(game, count, seed, cache_dir).frames


def _define_flags():
  flags.DEFINE_list('games', ['Pong', 'Breakout', 'SpaceInvaders',
                              'MsPacman'], 'Games to collect.')
  flags.DEFINE_integer('count', 20000, 'Frames per game.')
  flags.DEFINE_integer('seed', 0, 'Seed of the environment and the actions.')
  flags.DEFINE_string('cache_dir', None,
                      f'Cache directory (default {DEFAULT_CACHE_DIR}).')


def _main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  for game in options.games:
    frame_set = load(game, options.count, options.seed, options.cache_dir,
                     progress=print)
    path = cache_paths(game, options.count, options.seed,
                       options.cache_dir)[0]
    print(f'{game}: {len(frame_set.frames)} frames, '
          f'{len(frame_set.episode_starts)} episodes at {path}')


if __name__ == '__main__':
  _define_flags()
  app.run(_main)
