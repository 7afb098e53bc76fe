# coding=utf-8
r"""Issue 33, item 4: what a compressed shard ships to the learner per batch.

On real frames (benchmarks/atari_frames.py), a shard memory of 2**16 slots
with compressed frames (LZ4 HC blocks of 4), batches of 512 valid slots
drawn uniformly. For each batch, three ways to ship the states:

- `states`: the decoded states and next states (what an uncompressed shard
  ships; a compressed one did before);
- `blocks`: the LZ4 blocks the stacks read, as stored
  (`frame_shipping.ShippedFrames`), filled into states at the learner by
  `fill_shipped_states`;
- `frames`: each frame the stacks read once, compressed anew by the shard
  (LZ4 at level 1, the fastest; the extension's codec), decoded one by one
  at the learner and stacked.

Bytes are the pickled reply's (protocol 5, as Ray's). Times are medians
over the batches, on one core; the learner's column is its CPU to get
states from what arrived.

  python -m benchmarks.shipping_benchmark --game=MsPacman
"""

import os
import pickle
import sys
import time
from typing import Callable, Dict, List, Sequence

from absl import app
from absl import flags
import numpy as np

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import atari_frames  # pylint: disable=g-import-not-at-top
from dopamine_per.distributed import frame_shipping  # pylint: disable=g-import-not-at-top
from dopamine_per.native import extension  # pylint: disable=g-import-not-at-top
from dopamine_per.replay_memory import prioritized_replay_buffer  # pylint: disable=g-import-not-at-top

__all__ = ['fill', 'measure', 'main']

_CAPACITY = 2 ** 16
_BATCH = 512
_STACK = 4


def fill(frames: np.ndarray, episode_starts: Sequence[int],
         capacity: int = _CAPACITY) -> object:
  """A compressed prioritized memory of `capacity` holding `frames`
  cycled, each collected episode's last frame terminal."""
  memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
      observation_shape=frames.shape[1:], stack_size=_STACK,
      replay_capacity=capacity, batch_size=_BATCH, update_horizon=3,
      compress_observations=True, rng=0)
  ends = set(int(start) - 1 for start in episode_starts) | {len(frames) - 1}
  for step in range(capacity):
    k = step % len(frames)
    memory.add(frames[k], step % 4, 0.0, int(k in ends), 1.0)
  return memory


def _median_ms(function: Callable[[], object], rounds: int) -> float:
  times = []
  for _ in range(rounds):
    start = time.perf_counter()
    function()
    times.append(time.perf_counter() - start)
  return 1e3 * float(np.median(times))


def _frames_compressed(memory, shipped) -> List[bytes]:
  """The `frames` way: each frame the stacks read, compressed alone."""
  read = (np.concatenate([shipped.ends, shipped.next_ends])[:, None] +
          np.arange(1 - _STACK, 1)) % memory.replay_capacity
  slots = np.unique(read)
  frames = memory.storage.arrays['observation'][slots]
  return [extension.lz4_compress(frame, 1) for frame in frames]


def _states_from_frames(compressed: List[bytes], frame_bytes: int,
                        shape, windows: np.ndarray) -> np.ndarray:
  """The learner's side of `frames`: decode each, stack them."""
  frames = np.stack([np.frombuffer(extension.lz4_decompress(c, frame_bytes),
                                   np.uint8).reshape(shape)
                     for c in compressed])
  return np.stack([frames[windows[:, k]] for k in range(_STACK)], axis=-1)


def measure(memory, batches: int, rng: np.random.Generator
           ) -> Dict[str, Dict[str, float]]:
  """Bytes and milliseconds per batch of each way to ship (see module)."""
  results = {name: {'bytes': [], 'shard_ms': [], 'learner_ms': []}
             for name in ('states', 'blocks', 'frames')}
  valid = np.flatnonzero(memory.is_valid_transition(
      np.arange(memory.replay_capacity)))
  frame_shape = memory.storage.arrays['observation'].shape[1:]
  frame_bytes = int(np.prod(frame_shape))
  for _ in range(batches):
    slots = rng.choice(valid, _BATCH, replace=False)
    full = memory.sample_transition_batch(indices=slots)
    packed = frame_shipping.pack_batch(memory, slots)
    shipped = packed[0]
    out = np.empty((2, _BATCH) + shipped.state_shape(), np.uint8)
    compressed = _frames_compressed(memory, shipped)
    read = (np.concatenate([shipped.ends, shipped.next_ends])[:, None] +
            np.arange(1 - _STACK, 1)) % memory.replay_capacity
    _, windows = np.unique(read, return_inverse=True)
    windows = windows.reshape(read.shape)
    ways = {
        'states': (full, lambda: memory.sample_transition_batch(
            indices=slots), lambda: None),
        'blocks': (packed, lambda: frame_shipping.pack_batch(memory, slots),
                   lambda: frame_shipping.fill_states(shipped, out[0],
                                                      out[1])),
        'frames': ((packed[1:], compressed),
                   lambda: _frames_compressed(memory, shipped),
                   lambda: _states_from_frames(compressed, frame_bytes,
                                               frame_shape, windows)),
    }
    for name, (reply, on_shard, on_learner) in ways.items():
      results[name]['bytes'].append(len(pickle.dumps(reply, protocol=5)))
      results[name]['shard_ms'].append(_median_ms(on_shard, 3))
      results[name]['learner_ms'].append(_median_ms(on_learner, 3))
    states = _states_from_frames(compressed, frame_bytes, frame_shape,
                                 windows)
    if not (np.array_equal(out[0], full[0]) and
            np.array_equal(out[1], full[3]) and
            np.array_equal(states[:_BATCH], full[0])):
      raise AssertionError('a way to ship gave other states')
  return {name: {key: float(np.median(values))
                 for key, values in columns.items()}
          for name, columns in results.items()}


def main(argv: Sequence[str]) -> None:
  del argv
  options = flags.FLAGS
  frame_set = atari_frames.load(options.game, 20000, 0)
  start = time.perf_counter()
  memory = fill(frame_set.frames, frame_set.episode_starts)
  print(f'filled {_CAPACITY} slots in {time.perf_counter() - start:.1f} s; '
        f'frames resident {memory.storage.arrays["observation"].nbytes / 1e6:.1f} MB')
  results = measure(memory, options.batches, np.random.default_rng(0))
  print(f'| {options.game}, batch {_BATCH} | bytes | shard ms | learner ms |')
  print('|---|---:|---:|---:|')
  for name, row in results.items():
    print(f'| {name} | {row["bytes"]:,.0f} | {row["shard_ms"]:.1f} | '
          f'{row["learner_ms"]:.1f} |')


if __name__ == '__main__':
  flags.DEFINE_string('game', 'MsPacman', 'Game of the cached frames.')
  flags.DEFINE_integer('batches', 10, 'Batches measured.')
  app.run(main)
