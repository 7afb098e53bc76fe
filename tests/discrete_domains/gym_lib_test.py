"""Tests for gym_lib: environments, constants and networks."""

import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import gin
import numpy as np
import tensorflow as tf

from dopamine_per import errors
from dopamine_per.discrete_domains import atari_lib
from dopamine_per.discrete_domains import gym_lib


def _started(environment_name, version, observation_size, num_actions):
  """Returns a seeded environment after its first reset, checking its spaces."""
  env = gym_lib.create_gym_environment(environment_name, version)
  env.seed(0)
  observation = env.reset()
  np.testing.assert_equal(observation.shape, (observation_size,))
  np.testing.assert_equal(env.action_space.n, num_actions)
  return env


class EnvironmentTest(parameterized.TestCase):

  def test_cartpole_has_no_time_limit_and_dopamines_step(self):
    env = _started('CartPole', 'v1', observation_size=4, num_actions=2)
    steps = 0
    terminal = False
    while not terminal:
      observation, reward, terminal, info = env.step(steps % 2)
      steps += 1
      self.assertEqual(reward, 1.0)
      self.assertFalse(info['TimeLimit.truncated'])
    self.assertTrue(env.game_over)
    self.assertLess(steps, 500)

  def test_seed_makes_resets_reproducible(self):
    first = gym_lib.create_gym_environment('Acrobot', 'v1')
    second = gym_lib.create_gym_environment('Acrobot', 'v1')
    first.seed(3)
    second.seed(3)
    np.testing.assert_array_equal(first.reset(), second.reset())
    self.assertEqual(first.action_space.n, 3)

  def test_needs_a_name(self):
    # Dopamine asserts: both except clauses must catch it.
    for caught in (ValueError, AssertionError):
      with self.assertRaisesRegex(caught, 'environment_name'):
        gym_lib.create_gym_environment()
    with self.assertRaises(errors.ArgumentError):
      gym_lib.create_gym_environment(None, 'v1')

  def test_retired_version_is_replaced_by_the_newest_with_a_warning(self):
    # Dopamine's LunarLander configs ask for v2; gymnasium 1.x has only v3.
    with self.assertLogs('absl', level='WARNING') as logs:
      env = gym_lib.create_gym_environment('LunarLander', 'v2')
    self.assertEqual(env.environment.spec.id, 'LunarLander-v3')
    self.assertLen(logs.records, 1)
    message = logs.records[0].getMessage()
    self.assertIn('LunarLander-v2', message)
    self.assertIn('using LunarLander-v3', message)

  def test_registered_old_version_is_kept_silently(self):
    # CartPole-v0 is still registered next to v1: it is made as asked.
    with self.assertNoLogs('absl', level='WARNING'):
      env = gym_lib.create_gym_environment('CartPole', 'v0')
    self.assertEqual(env.environment.spec.id, 'CartPole-v0')

  @parameterized.named_parameters(
      ('unknown_name', 'NoSuchEnvironment', 'v0', 'NoSuchEnvironment-v0'),
      ('misspelt_name', 'Lunarlander', 'v2', 'Lunarlander-v2'),
      ('version_above_the_newest', 'CartPole', 'v9', 'CartPole-v9'),
      ('malformed_version', 'CartPole', '1', 'CartPole-1'),
  )
  def test_unknown_environment_is_an_error(self, name, version, requested):
    with self.assertNoLogs('absl', level='WARNING'):
      with self.assertRaisesRegex(
          ValueError, r"no environment '{}' \(environment_name='{}', "
          r"version='{}'\)".format(requested, name, version)):
        gym_lib.create_gym_environment(name, version)

  def test_missing_box2d_names_the_extra(self):
    # None in sys.modules makes `import Box2D` raise ImportError, as when
    # the package is not installed (gymnasium's module may be cached).
    with mock.patch.dict(sys.modules, {'Box2D': None}):
      with self.assertRaisesRegex(
          ImportError, r"LunarLander-v3 needs Box2D .*"
          r"pip install 'dopamine_per\[box2d\]'"):
        gym_lib.create_gym_environment('LunarLander', 'v3')
      # Environments without Box2D are unaffected.
      gym_lib.create_gym_environment('CartPole', 'v1')

  def test_lunar_lander_steps_to_a_terminal(self):
    env = _started('LunarLander', 'v3', observation_size=8, num_actions=4)
    terminal = False
    for step in range(1000):
      observation, reward, terminal, info = env.step(step % 4)
      if terminal:
        break
    # Seeded, so deterministic: this action cycle crashes within 1000 steps
    # (no time limit here). An episode ends with +100 (at rest) or -100.
    self.assertTrue(terminal)
    self.assertTrue(env.game_over)
    self.assertFalse(info['TimeLimit.truncated'])
    self.assertEqual(abs(reward), 100.0)
    self.assertEqual(observation.shape, (8,))

  def test_gin_constants(self):
    @gin.configurable('gym_lib_test_probe')
    def probe(shape=None, stack=None, dtype=None):
      return shape, stack, dtype
    gin.parse_config([
        'gym_lib_test_probe.shape = %gym_lib.CARTPOLE_OBSERVATION_SHAPE',
        'gym_lib_test_probe.stack = %gym_lib.ACROBOT_STACK_SIZE',
        'gym_lib_test_probe.dtype = %gym_lib.LUNAR_OBSERVATION_DTYPE'])
    self.addCleanup(gin.clear_config)
    self.assertEqual(probe(), ((4, 1), 1, tf.float64))


class NetworkTest(parameterized.TestCase):

  # One network of each kind (agent_networks_test trains every one).
  @parameterized.named_parameters(
      ('lunar_dqn', gym_lib.LunarLanderDQNNetwork, 8, 4, False),
      ('cartpole_fourier', gym_lib.CartpoleFourierDQNNetwork, 4, 2, False),
      ('acrobot_rainbow', gym_lib.AcrobotRainbowNetwork, 6, 3, True),
  )
  def test_outputs(self, network_class, features, actions, distributional):
    with tf.Graph().as_default():
      state = tf.compat.v1.placeholder(tf.float64, (None, features, 1, 1))
      if distributional:
        support = tf.linspace(-10.0, 10.0, 51)
        network = network_class(actions, 51, support, name='Online')
        output = network(state)
        self.assertIsInstance(output, atari_lib.RainbowNetworkType)
      else:
        network = network_class(actions, name='Online')
        output = network(state)
        self.assertIsInstance(output, atari_lib.DQNNetworkType)
      network(state)  # A second call shares the variables.
      count = len(tf.compat.v1.trainable_variables())
      self.assertEqual(count, len(network.trainable_variables))
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        q = sess.run(output.q_values, {state: np.zeros((3, features, 1, 1))})
      self.assertEqual(q.shape, (3, actions))

  def test_default_hidden_layers_are_dopamines(self):
    with tf.Graph().as_default():
      network = gym_lib.CartpoleDQNNetwork(2, name='Online')
      network(tf.zeros((1, 4, 1, 1)))
      shapes = sorted(tuple(v.shape.as_list())
                      for v in network.trainable_variables)
      self.assertEqual(shapes, [(2,), (4, 512), (512,), (512,), (512, 2),
                                (512, 512)])

  def test_inputs_are_rescaled_to_unit_range(self):
    with tf.Graph().as_default():
      network = gym_lib.BasicDiscreteDomainNetwork(
          gym_lib.CARTPOLE_MIN_VALS, gym_lib.CARTPOLE_MAX_VALS, 2,
          hidden_units=())
      output = network(tf.constant(gym_lib.CARTPOLE_MAX_VALS[None]))
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(network.last_layer.kernel.assign(tf.eye(4, 2)))
        # Inputs at the upper bounds become 1.0 (zero initial bias).
        np.testing.assert_allclose(sess.run(output), [[1.0, 1.0]],
                                   rtol=1e-6)


if __name__ == '__main__':
  absltest.main()
