"""Tests for legacy_networks: Dopamine's gin names, and gin with both modules."""

import glob
import os

from absl.testing import absltest
from absl.testing import parameterized
import gin
import tensorflow as tf

from dopamine_per.discrete_domains import gym_lib
from dopamine_per.discrete_domains import legacy_networks
from tests.support import fixtures
from tests.support import gin_util

_CONFIGS = sorted(glob.glob(fixtures.repo_path('configs', '*.gin')))
# The classic-control network names Dopamine's gin files may bind under
# ``legacy_networks``.
_DOPAMINE_NAMES = (
    'CartpoleDQNNetwork', 'CartpoleRainbowNetwork', 'AcrobotDQNNetwork',
    'AcrobotRainbowNetwork', 'LunarLanderDQNNetwork', 'MountainCarDQNNetwork',
    'CartpoleFourierDQNNetwork', 'AcrobotFourierDQNNetwork',
    'FourierDQNNetwork')


@gin.configurable
def _bound_network(network=None):
  """Returns what gin bound to `network` (a test hook)."""
  return network


def _hidden_sizes(network_class):
  """Returns the kernel shapes of a CartPole DQN network of the class."""
  with tf.Graph().as_default():
    network = network_class(2, name='Online')
    network(tf.zeros([1, 4, 1, 1]))
    return sorted(tuple(v.shape.as_list()) for v in network.trainable_variables
                  if v.shape.rank == 2)


def _bindings():
  """Returns gin's bindings as text, without its import lines."""
  return [line for line in gin.config_str().splitlines()
          if line and not line.startswith('import ')]


class LegacyNetworksTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)

  def test_exports_dopamines_names(self):
    self.assertCountEqual(legacy_networks.__all__, _DOPAMINE_NAMES)

  @parameterized.parameters(*_DOPAMINE_NAMES)
  def test_gin_name_gives_the_gym_lib_network(self, name):
    gin.parse_config('_bound_network.network = @legacy_networks.{}'.format(
        name))
    network_class = _bound_network()
    self.assertIs(network_class, getattr(legacy_networks, name))
    self.assertTrue(issubclass(network_class, getattr(gym_lib, name)))

  def test_unqualified_binding_is_ambiguous(self):
    with self.assertRaisesRegex(KeyError, 'Ambiguous selector'):
      gin.parse_config('CartpoleDQNNetwork.hidden_units = (3,)')

  def test_qualified_bindings(self):
    gin.parse_config('gym_lib.CartpoleDQNNetwork.hidden_units = (3,)')
    # A gym_lib binding reaches the subclass when its own leaves it out.
    self.assertEqual(_hidden_sizes(legacy_networks.CartpoleDQNNetwork),
                     [(3, 2), (4, 3)])
    gin.parse_config('legacy_networks.CartpoleDQNNetwork.hidden_units = (5,)')
    self.assertEqual(_hidden_sizes(legacy_networks.CartpoleDQNNetwork),
                     [(4, 5), (5, 2)])
    self.assertEqual(_hidden_sizes(gym_lib.CartpoleDQNNetwork),
                     [(3, 2), (4, 3)])

  @parameterized.named_parameters(
      *[(os.path.basename(path)[:-4], path) for path in _CONFIGS])
  def test_shipped_config_parses_with_both_modules(self, path):
    with open(path, encoding='utf-8') as config:
      text = config.read()
    gin.parse_config(text)
    alone = _bindings()
    gin.clear_config()
    # Unqualified network bindings would be ambiguous here and raise.
    gin.parse_config(
        'import dopamine_per.discrete_domains.gym_lib\n'
        'import dopamine_per.discrete_domains.legacy_networks\n' + text)
    self.assertEqual(_bindings(), alone)
    self.assertNotEmpty(alone)


if __name__ == '__main__':
  absltest.main()
