"""Test helper: small agents for CartPole-shaped inputs, built without gin files.

Each test file adds its network and periods to `cartpole_agent`.
"""

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
  """`agent_class` (a DQNAgent) for CartPole's inputs and 2 actions.

  It trains with Adam from its 21st transition, at a constant epsilon;
  `kwargs` override those arguments.
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
  """Binds the size and seed of gin memory `memory`, for one test.

  Dopamine's configurables are hidden (`gin_util`) and gin's config is
  cleared first. `rng` None seeds the draws from the global generators.
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

  An episode's last step ends it with reward 1; the others' reward is 1, or
  with `count_rewards` the step's index in the episode (0, 1, 2, ...).
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
