"""Tests for gym_lib: environments, constants and networks."""

from absl.testing import absltest
from absl.testing import parameterized
import gin
import numpy as np
import tensorflow as tf

from dopamine_per.discrete_domains import atari_lib
from dopamine_per.discrete_domains import gym_lib


class EnvironmentTest(parameterized.TestCase):

  def test_cartpole_has_no_time_limit_and_dopamines_step(self):
    env = gym_lib.create_gym_environment('CartPole', 'v1')
    env.seed(0)
    observation = env.reset()
    self.assertEqual(observation.shape, (4,))
    self.assertEqual(env.action_space.n, 2)
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
    with self.assertRaisesRegex(ValueError, 'environment_name'):
      gym_lib.create_gym_environment()

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

  @parameterized.named_parameters(
      ('cartpole_dqn', gym_lib.CartpoleDQNNetwork, 4, 2, False),
      ('acrobot_dqn', gym_lib.AcrobotDQNNetwork, 6, 3, False),
      ('lunar_dqn', gym_lib.LunarLanderDQNNetwork, 8, 4, False),
      ('mountaincar_dqn', gym_lib.MountainCarDQNNetwork, 2, 3, False),
      ('cartpole_fourier', gym_lib.CartpoleFourierDQNNetwork, 4, 2, False),
      ('acrobot_fourier', gym_lib.AcrobotFourierDQNNetwork, 6, 3, False),
      ('cartpole_rainbow', gym_lib.CartpoleRainbowNetwork, 4, 2, True),
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
