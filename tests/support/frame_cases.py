"""Test helper: memories with and without compressed frames, filled alike.

For the tests of `frame_blocks` and `frame_checkpoint`: small frame-like
observations (a plain background and a moving box), episodes of varied
length ending in terminals or cuts, and the same memory built
uncompressed and compressed.
"""

from typing import Any, Sequence, Tuple

import numpy as np

from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer

__all__ = ['SHAPE', 'CAPACITY', 'frame', 'memories', 'add']

# The observation shape and the memories' capacity (101: a short last
# block of frames).
SHAPE = (12, 10)
CAPACITY = 101


def frame(rng: np.random.Generator, step: int) -> np.ndarray:
  """A frame-like image: a plain background and a small moving box."""
  image = np.full(SHAPE, 17, dtype=np.uint8)
  row, column = step % 8, (3 * step) % 7
  image[row:row + 4, column:column + 3] = rng.integers(100, 110)
  return image


def memories(prioritized: bool, kernels: Any = None,
             **kwargs: Any) -> Tuple[Any, Any]:
  """The same memory, uncompressed and compressed (on `kernels`)."""
  cls = (prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer
         if prioritized else circular_replay_buffer.OutOfGraphReplayBuffer)
  args = dict(observation_shape=SHAPE, stack_size=4,
              replay_capacity=CAPACITY, batch_size=16, update_horizon=3,
              rng=0)
  args.update(kwargs)
  return cls(**args), cls(compress_observations=True, kernels=kernels,
                          **args)


def add(targets: Sequence[Any], count: int, seed: int = 0) -> None:
  """`count` equal adds to each memory: episodes of varied length, some
  ending in a terminal, others cut (episode_end)."""
  rng = np.random.default_rng(seed)
  prioritized = isinstance(
      targets[0], prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer)
  for step in range(count):
    ends = rng.random() < 1 / 20
    values = [frame(rng, step), step % 3, float(rng.random()),
              ends and step % 2 == 0]
    if prioritized:
      values.append(float(rng.random()) + 0.1)
    for memory in targets:
      memory.add(*values, episode_end=ends)
