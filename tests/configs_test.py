"""Every shipped gin file parses and builds its agent.

Each file must start with a comment naming its source and deviations
(STYLE.md, 7). The agents are built with the files' own settings, Atari's
million-transition memories included (their storage is allocated lazily).
"""

import glob
import os

from absl.testing import absltest
from absl.testing import parameterized
import gin

from dopamine_per.agents import dqn_agent
from dopamine_per.agents import implicit_quantile_agent
from dopamine_per.agents import rainbow_agent
from dopamine_per.discrete_domains import run_experiment
from tests.support import fixtures
from tests.support import gin_util

_CONFIGS = sorted(glob.glob(fixtures.repo_path('configs', '*.gin')))
_EXPECTED = {
    'dqn.gin': dqn_agent.DQNAgent,
    'c51.gin': rainbow_agent.RainbowAgent,
    'rainbow.gin': rainbow_agent.RainbowAgent,
    'dqn_cartpole.gin': dqn_agent.DQNAgent,
    'c51_cartpole.gin': rainbow_agent.RainbowAgent,
    'rainbow_cartpole.gin': rainbow_agent.RainbowAgent,
    'rainbow_acrobot.gin': rainbow_agent.RainbowAgent,
    'implicit_quantile.gin': implicit_quantile_agent.ImplicitQuantileAgent,
    'implicit_quantile_cartpole.gin':
        implicit_quantile_agent.ImplicitQuantileAgent,
    'apex_cartpole.gin': rainbow_agent.RainbowAgent,
    'apex_rainbow_atari.gin': rainbow_agent.RainbowAgent,
}

_SHARDED = 'ShardedPrioritizedReplayBuffer'


class _Environment(object):
  """Stands in for the environment: the agent only reads the action count."""

  class action_space(object):  # pylint: disable=invalid-name
    n = 3


class ConfigsTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)

  def test_every_config_is_expected(self):
    self.assertEqual(set(_EXPECTED), {os.path.basename(p) for p in _CONFIGS})

  @parameterized.named_parameters(
      *[(os.path.basename(p)[:-4], p) for p in _CONFIGS])
  def test_config_builds_its_agent(self, path):
    with open(path) as f:
      text = f.read()
    self.assertTrue(text.startswith('# '), 'first line must be a comment')
    self.assertIn('Source:', text.split('\nimport')[0])
    self.assertIn('Deviations', text.split('\nimport')[0])
    gin.clear_config()
    run_experiment.load_gin_configs([path], [])
    expected_capacity = None
    if os.path.basename(path).startswith('apex_'):
      expected_capacity = self._check_sharded_memory()
    agent = run_experiment.create_agent(None, _Environment())
    self.assertIs(type(agent), _EXPECTED[os.path.basename(path)])
    self.assertEqual(agent.num_actions, 3)
    self.assertEqual(agent.training_steps, 0)
    memory = agent._replay.memory
    self.assertEqual(memory._replay_capacity, expected_capacity or
                     gin.query_parameter(
                         type(agent._replay).__name__ + '.replay_capacity'))

  def _check_sharded_memory(self):
    """Checks an Ape-X config's sharded memory against its agent.

    Then binds a single memory of one shard's size in its place, so that
    the agent builds without starting Ray.

    Returns:
      int, one shard's capacity.
    """
    def sharded(name):
      return gin.query_parameter('{}.{}'.format(_SHARDED, name))

    self.assertEqual(sharded('batch_size'), gin.query_parameter(
        'WrappedPrioritizedReplayBuffer.batch_size'))
    for name in ('update_horizon', 'gamma'):
      self.assertEqual(sharded(name),
                       gin.query_parameter('RainbowAgent.' + name))
    capacity = sharded('replay_capacity') // sharded('num_shards')
    gin.bind_parameter('WrappedPrioritizedReplayBuffer.wrapped_memory', None)
    gin.bind_parameter('WrappedPrioritizedReplayBuffer.replay_capacity',
                       capacity)
    return capacity


if __name__ == '__main__':
  absltest.main()
