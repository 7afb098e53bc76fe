"""Test helper: a small sharded memory and the transitions the tests write.

`small_memory` is the sharded memory most distributed tests use: 2 shards
of 24 transitions, batches of 8, observations of two float32 values (a
stream id and a step) unstacked, writers flushing every 4 adds.
`write_episodes` fills one stream of it; `as_dict` names a batch's elements.
Building one needs a running Ray (`ray_util.start_local_ray`).
"""

from typing import Any, Dict, Optional, Sequence

import numpy as np

from dopamine_per.distributed import replay

__all__ = ['FRAME_SHAPE', 'FRAME_ARGS', 'small_memory', 'write_episodes', 'as_dict', 'assert_batches_equal',
           'stream_frame']


# Frame memories of the shipping tests: 6x5 uint8 frames, stacks of 4,
# 3-step returns; a frame of stream s and step t is stream_frame(FRAME_SHAPE,
# s, t).
FRAME_SHAPE = (6, 5)
FRAME_ARGS = dict(observation_shape=FRAME_SHAPE, observation_dtype=np.uint8,
                  stack_size=4, update_horizon=3, gamma=0.9)


def small_memory(num_shards: int = 2, replay_capacity: int = 48,
                 batch_size: int = 8,
                 **kwargs: Any) -> replay.ShardedPrioritizedReplayBuffer:
  """A `ShardedPrioritizedReplayBuffer` of the tests' small defaults.

  `kwargs` (further constructor arguments) override the defaults
  num_cpus_per_shard 0.25, observation_shape (2,), stack_size 1 and
  observation_dtype float32. The caller closes the memory.
  """
  kwargs.setdefault('num_cpus_per_shard', 0.25)
  kwargs.setdefault('observation_shape', (2,))
  kwargs.setdefault('stack_size', 1)
  kwargs.setdefault('observation_dtype', np.float32)
  return replay.ShardedPrioritizedReplayBuffer(
      num_shards, replay_capacity, batch_size, flush_every=4, **kwargs)


def write_episodes(writer, stream: int, steps: int, episode_length: int,
                   priorities: Optional[Sequence[float]] = None) -> None:
  """Writes `steps` transitions to `writer`, then flushes it.

  Step k has the observation (stream, k), action k, reward 1 and priority
  `priorities[k]` (None: the shard's default); every `episode_length`-th
  step is terminal.
  """
  for step in range(steps):
    priority = None if priorities is None else float(priorities[step])
    writer.add(np.array([stream, step], np.float32), step, 1.0,
               int(step % episode_length == episode_length - 1), priority)
  writer.flush()


def as_dict(memory, batch: Sequence[np.ndarray]) -> Dict[str, np.ndarray]:
  """`batch`, a sampled transition batch of `memory`, by element name."""
  return dict(zip([e.name for e in memory.get_transition_elements()], batch))


def assert_batches_equal(test_case, first: Sequence[Any],
                         second: Sequence[Any]) -> None:
  """Asserts two batches hold equal arrays of equal dtypes, in order."""
  test_case.assertEqual(len(first), len(second))
  for a, b in zip(first, second):
    test_case.assertEqual(np.asarray(a).dtype, np.asarray(b).dtype)
    np.testing.assert_array_equal(a, b)


def stream_frame(shape: Sequence[int], stream: int, step: int,
                 mark: Optional[int] = None) -> np.ndarray:
  """A uint8 frame of `shape` unlike its neighbours': a gradient shifted
  by the step, pixel (0, 0) the stream, (0, 1) the step, (1, 0) `mark`
  (if given)."""
  image = np.arange(np.prod(shape), dtype=np.uint8).reshape(shape)
  image[0, 0], image[0, 1] = stream, step % 256
  image += np.uint8(step % 7)
  if mark is not None:
    image[1, 0] = mark
  return image
