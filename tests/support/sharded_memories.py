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

__all__ = ['small_memory', 'write_episodes', 'as_dict']


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
