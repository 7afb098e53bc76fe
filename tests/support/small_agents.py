"""Test helper: small agents for CartPole-shaped inputs, built without gin files.

`cartpole_agent` builds an agent for CartPole's inputs (4 x 1 float64
observations, unstacked, 2 actions) that trains with Adam from its 21st
transition and explores at a constant epsilon (`identity_epsilon`); each
test file adds its network and periods. `bind_small_memory` makes the
agent's replay memory small; `play` feeds an agent episodes of random
observations.
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
  """Builds `agent_class` for CartPole's inputs.

  Args:
    agent_class: DQNAgent or a subclass.
    sess: a tf.compat.v1.Session, or None for the agent's own.
    **kwargs: the agent's other arguments, over the defaults above.

  Returns:
    The agent.
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
  """Binds the size of `memory` in a clear gin config, for one test.

  Dopamine's configurables are hidden first (`gin_util`), and restored
  with gin's config cleared after the test.

  Args:
    test_case: the absltest.TestCase.
    memory: the gin name of the agent's memory, e.g.
      'WrappedPrioritizedReplayBuffer'.
    replay_capacity: its capacity.
    batch_size: its batch size.
    rng: the seed of its generator (and so of the native ops' draws: the
      same batches on every run from the same priorities; a prioritized
      memory's priorities after training are losses of unseeded networks,
      which differ from run to run), or None for draws seeded from the
      global generators' states (see native_memory._seed).
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
  episode (0, 1, 2, ...).

  Args:
    agent: an agent of `cartpole_agent`.
    steps: the number of transitions.
    episode_length: the steps of an episode.
    count_rewards: whether rewards count the steps of an episode.
    seed: the seed of the observations.
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
