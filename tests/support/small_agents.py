"""Test helper: small agents for CartPole-shaped inputs, without gin files."""

from typing import Any, Optional

import gin
import numpy as np
import tensorflow as tf

from dopamine_per.agents import dqn_agent
from tests.support import gin_util

__all__ = ['NUM_ACTIONS', 'MIN_REPLAY_HISTORY', 'cartpole_agent',
           'bind_small_memory', 'play']

NUM_ACTIONS = 2
MIN_REPLAY_HISTORY = 20


def cartpole_agent(agent_class, sess=None, **kwargs: Any):
  """`agent_class` (DQNAgent or a subclass) for CartPole's inputs.

  4 x 1 float64 observations, unstacked, 2 actions; it trains with Adam from
  its 21st transition and explores at a constant epsilon. `kwargs` (the
  network, periods) override these.
  """
  arguments = dict(
      observation_shape=(4, 1), observation_dtype=tf.float64, stack_size=1,
      min_replay_history=MIN_REPLAY_HISTORY,
      epsilon_fn=dqn_agent.identity_epsilon,
      optimizer=tf.compat.v1.train.AdamOptimizer(0.01))
  arguments.update(kwargs)
  return agent_class(sess, NUM_ACTIONS, **arguments)


def bind_small_memory(test_case, memory: str, replay_capacity: int = 500,
                      batch_size: int = 8, rng: Optional[int] = 0) -> None:
  """Binds the size of `memory` (its gin name) in a clear gin config.

  Dopamine's configurables are hidden for the test (`gin_util`). `rng`
  seeds the memory's generator, and so the native ops' draws (None: seeded
  from the global generators' states).
  """
  gin_util.hide_dopamine_configurables(test_case)
  gin.clear_config()
  gin.bind_parameter(memory + '.replay_capacity', replay_capacity)
  gin.bind_parameter(memory + '.batch_size', batch_size)
  if rng is not None:
    gin.bind_parameter(memory + '.rng', rng)


def play(agent, steps: int, episode_length: int, count_rewards: bool = False,
         seed: int = 0) -> None:
  """Feeds `agent` `steps` transitions of random CartPole-shaped observations.

  Each episode has `episode_length` steps; the last ends it with reward 1.
  The reward of another step is 1, or with `count_rewards` its index in the
  episode (0, 1, 2, ...). `seed` seeds the observations.
  """
  rng = np.random.default_rng(seed)
  agent.begin_episode(rng.normal(size=4))
  for i in range(steps):
    index = i % episode_length
    if index == episode_length - 1:
      agent.end_episode(1.0)
      agent.begin_episode(rng.normal(size=4))
    else:
      agent.step(float(index) if count_rewards else 1.0, rng.normal(size=4))
