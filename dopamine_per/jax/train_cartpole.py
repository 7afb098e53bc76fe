# coding=utf-8
r"""Dopamine's JAX DQN or Rainbow agent trained on CartPole with our memory.

  python -m dopamine_per.jax.train_cartpole --agent=dqn --steps=5000
  python -m dopamine_per.jax.train_cartpole --agent=rainbow

Needs dopamine-rl 4.1.2 installed beside dopamine_per (with the `jax` and
`gym` extras). `redirect.install()` runs before Dopamine's agents are
imported, so `JaxDQNAgent` (uniform replay) and `JaxRainbowAgent`
(prioritized replay, C51, 3-step returns) build their memories from
`dopamine_per.jax.replay_memory`, configured by Dopamine's gin names; the
agents themselves are Dopamine's, unchanged but for one line: Dopamine
4.1.2's JaxRainbowAgent (and JaxFullRainbowAgent) never update priorities,
their base class resetting the replay scheme to 'uniform' after they set
it, so the example sets it back.

Dopamine 4.1.2's JAX agents import modules that CartPole never uses and
that do not import on today's stack: OpenAI `baselines` and OpenCV
(`atari_lib`, Atari only; Dopamine does not declare `baselines`), the
legacy `gym` (`gym_lib`'s wrappers) and tensorflow-probability's JAX
substrate (`continuous_networks`, for SAC; it fails on jax >= 0.5). Where
one of them does not import, this example puts an empty stand-in in its
place, and says so; an agent that used one would fail at that point.
"""

import importlib
import os
import sys
import types
from typing import Any, List

from absl import app
from absl import flags
from absl import logging
import numpy as np

from dopamine_per.jax import redirect

__all__ = ['stand_in_unused_imports', 'make_agent', 'train']

# The modules Dopamine's JAX agents import but CartPole's DQN and Rainbow
# never use, with the attributes read when they are imported.
_UNUSED = {
    'cv2': {},
    'baselines.common.atari_wrappers': {},
    'gym.wrappers.time_limit': {'TimeLimit': object},
    'tensorflow_probability.substrates.jax': {
        'distributions': types.SimpleNamespace(),
        'bijectors': types.SimpleNamespace(Tanh=object)},
}


def stand_in_unused_imports() -> List[str]:
  """Puts an empty module in place of each unused import that fails;
  returns their names."""
  standing = []
  for name, attributes in _UNUSED.items():
    try:
      importlib.import_module(name)
      continue
    except Exception:  # pylint: disable=broad-except
      pass  # ImportError, or tfp's AttributeError on a newer jax.
    parts = name.split('.')
    for depth in range(1, len(parts) + 1):
      prefix = '.'.join(parts[:depth])
      module = types.ModuleType(prefix)
      if depth == len(parts):
        module.__dict__.update(attributes)
      sys.modules[prefix] = module
      if depth > 1:
        setattr(sys.modules['.'.join(parts[:depth - 1])], parts[depth - 1],
                module)
    standing.append(name)
  return standing


def make_agent(name: str, seed: int, capacity: int = 50000) -> Any:
  """Dopamine's JaxDQNAgent ('dqn') or JaxRainbowAgent ('rainbow') for
  CartPole, on our memory (Dopamine's classic-control settings)."""
  import gin  # pylint: disable=g-import-not-at-top
  from dopamine.jax import networks  # pylint: disable=g-import-not-at-top
  from dopamine.jax.agents.dqn import dqn_agent  # pylint: disable=g-import-not-at-top
  from dopamine.jax.agents.rainbow import rainbow_agent  # pylint: disable=g-import-not-at-top
  gin.bind_parameter('ReplayBuffer.max_capacity', capacity)
  gin.bind_parameter('ReplayBuffer.batch_size', 128)
  common = dict(num_actions=2, observation_shape=(4,),
                observation_dtype=np.float64, stack_size=1, gamma=0.99,
                min_replay_history=500, update_period=4,
                target_update_period=100, epsilon_decay_period=1000,
                epsilon_train=0.01, seed=seed)
  if name == 'dqn':
    return dqn_agent.JaxDQNAgent(
        network=networks.ClassicControlDQNNetwork, update_horizon=1,
        optimizer='adam', **common)
  gin.bind_parameter('PrioritizedSamplingDistribution.max_capacity',
                     capacity)
  agent = rainbow_agent.JaxRainbowAgent(
      network=networks.ClassicControlRainbowNetwork, num_atoms=51,
      vmax=100.0, update_horizon=3, replay_scheme='prioritized', **common)
  # Dopamine 4.1.2's JaxRainbowAgent sets _replay_scheme before its base
  # class's constructor resets it to 'uniform', so it would never update
  # priorities (nor give new elements the largest): set it back.
  agent._replay_scheme = 'prioritized'  # pylint: disable=protected-access
  return agent


def train(agent: Any, steps: int, seed: int) -> List[float]:
  """Runs `agent` on CartPole-v1 for `steps` steps; the episodes' returns.
  """
  import gymnasium  # pylint: disable=g-import-not-at-top
  env = gymnasium.make('CartPole-v1')
  observation, _ = env.reset(seed=seed)
  action = agent.begin_episode(observation)
  returns, total = [], 0.0
  for _ in range(steps):
    observation, reward, terminated, truncated, _ = env.step(int(action))
    total += reward
    if terminated or truncated:
      agent.end_episode(reward, terminated)
      returns.append(total)
      total = 0.0
      observation, _ = env.reset()
      action = agent.begin_episode(observation)
    else:
      action = agent.step(reward, observation)
  return returns


_AGENT = flags.DEFINE_enum('agent', 'dqn', ['dqn', 'rainbow'],
                           "Dopamine's JAX agent to train.")
_STEPS = flags.DEFINE_integer('steps', 5000, 'Environment steps.')
_SEED = flags.DEFINE_integer('seed', 0, "The agent's and CartPole's seed.")
_CHECKPOINT_DIR = flags.DEFINE_string(
    'checkpoint_dir', '', 'If set, the agent checkpoints there at the end '
    "(its bundle and our memory's checkpoint), and a fresh agent restores "
    'it.')


def main(argv: List[str]) -> None:
  del argv
  redirect.install()
  for name in stand_in_unused_imports():
    logging.warning('%s does not import here: an empty stand-in takes its '
                    'place (CartPole does not use it)', name)
  agent = make_agent(_AGENT.value, _SEED.value)
  returns = train(agent, _STEPS.value, _SEED.value)
  memory = agent._replay  # pylint: disable=protected-access
  print('memory: {}.{} with {} elements'.format(
      type(memory).__module__, type(memory).__name__, memory.add_count))
  print('episodes: {}, returns of the first 10: {:.1f}, of the last 10: '
        '{:.1f}'.format(len(returns), np.mean(returns[:10]),
                        np.mean(returns[-10:])))
  tree = getattr(memory._sampling_distribution, '_sum_tree', None)  # pylint: disable=protected-access
  if tree is not None:  # Each element came with priority 1: the updates.
    print('total priority: {:.1f} over {} elements'.format(
        tree.root, memory.add_count))
  if _CHECKPOINT_DIR.value:
    os.makedirs(_CHECKPOINT_DIR.value, exist_ok=True)
    bundle = agent.bundle_and_checkpoint(_CHECKPOINT_DIR.value, 1)
    fresh = make_agent(_AGENT.value, _SEED.value + 1)
    if not fresh.unbundle(_CHECKPOINT_DIR.value, 1, bundle):
      raise RuntimeError('the agent did not restore its checkpoint')
    print('restored: {} elements'.format(fresh._replay.add_count))  # pylint: disable=protected-access


if __name__ == '__main__':
  app.run(main)
