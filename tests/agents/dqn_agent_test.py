"""Tests for dqn_agent: epsilon schedules, acting, training, checkpoints."""

import os
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from dopamine_per import errors
from dopamine_per.agents import dqn_agent
from dopamine_per.discrete_domains import atari_lib
from dopamine_per.discrete_domains import gym_lib
from tests.support import fixtures
from tests.support import small_agents


def _make_agent(sess=None, agent_class=dqn_agent.DQNAgent, **kwargs):
  """A small CartPole-shaped DQN agent."""
  defaults = dict(
      network=lambda n, name: gym_lib.CartpoleDQNNetwork(
          n, name=name, hidden_units=(16,)),
      update_period=2, target_update_period=10)
  defaults.update(kwargs)
  return small_agents.cartpole_agent(agent_class, sess, **defaults)


class EpsilonTest(parameterized.TestCase):

  @parameterized.parameters(
      # (decay_period, step, warmup_steps, epsilon, expected)
      (100, 0, 10, 0.1, 1.0),
      (100, 10, 10, 0.1, 1.0),
      (100, 60, 10, 0.1, 0.55),
      (100, 110, 10, 0.1, 0.1),
      (100, 10**6, 10, 0.1, 0.1),
  )
  def test_linearly_decaying_epsilon(self, period, step, warmup, epsilon,
                                     expected):
    self.assertAlmostEqual(
        dqn_agent.linearly_decaying_epsilon(period, step, warmup, epsilon),
        expected)

  def test_identity_epsilon(self):
    self.assertEqual(dqn_agent.identity_epsilon(1, 2, 3, 0.25), 0.25)


class DQNAgentTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    small_agents.bind_small_memory(self, 'WrappedReplayBuffer')

  def test_observation_shape_must_be_a_tuple(self):
    # Dopamine asserts: the error is an AssertionError and a ValueError.
    for error in (errors.ArgumentError, AssertionError, ValueError):
      with self.assertRaisesRegex(error, r'observation_shape .*\[4, 1\]'):
        _make_agent(observation_shape=[4, 1])

  def test_default_optimizer_is_dopamines_rmsprop(self):
    agent = _make_agent(optimizer=None)
    self.assertIsInstance(agent.optimizer,
                          tf.compat.v1.train.RMSPropOptimizer)

  def test_builds_in_its_own_graph_while_eager(self):
    self.assertTrue(tf.executing_eagerly())
    agent = _make_agent()
    self.assertIsNot(agent._sess.graph, tf.compat.v1.get_default_graph())
    self.assertTrue(tf.executing_eagerly())

  def test_acting_and_training_counts(self):
    # What training does to the networks: agent_networks_test.
    agent = _make_agent(epsilon_train=0.0)
    rng = np.random.default_rng(0)
    self.assertIn(agent.begin_episode(rng.normal(size=4)), (0, 1))
    for _ in range(40):
      self.assertIn(agent.step(1.0, rng.normal(size=4)), (0, 1))
    agent.end_episode(0.0)
    self.assertEqual(agent.training_steps, 41)
    self.assertEqual(int(agent._replay.memory.add_count), 41)

  def test_greedy_action_is_argmax(self):
    agent = _make_agent(epsilon_eval=0.0, eval_mode=True)
    observation = np.array([0.1, -0.2, 0.03, 0.4])
    action = agent.begin_episode(observation)
    q = agent._sess.run(agent._net_outputs.q_values,
                        {agent.state_ph: observation.reshape(1, 4, 1, 1)})
    self.assertEqual(action, int(np.argmax(q)))

  def test_state_stack_rolls(self):
    agent = _make_agent(observation_shape=(2,), stack_size=3,
                        network=lambda n, name: gym_lib.LunarLanderDQNNetwork(
                            n, name=name, hidden_units=(4,)))
    agent.eval_mode = True
    agent.begin_episode(np.array([1.0, 1.0]))
    agent.step(0.0, np.array([2.0, 2.0]))
    np.testing.assert_array_equal(agent.state[0, 0], [0.0, 1.0, 2.0])

  def test_partial_reload(self):
    checkpoint_dir = fixtures.temp_dir(self)
    agent = _make_agent()
    small_agents.play(agent, 30, episode_length=31)
    bundle = agent.bundle_and_checkpoint(checkpoint_dir, 0)
    self.assertEqual(set(bundle), {'state', 'training_steps'})
    self.assertIsNone(agent.bundle_and_checkpoint(
        os.path.join(checkpoint_dir, 'missing'), 1))
    fresh = _make_agent()
    self.assertFalse(fresh.unbundle(checkpoint_dir, 0, None))
    self.assertFalse(fresh.unbundle(checkpoint_dir, 9, bundle))
    partial = _make_agent(allow_partial_reload=True)
    self.assertTrue(partial.unbundle(checkpoint_dir, 0, None))
    self.assertEqual(partial.training_steps, 0)
    self.assertTrue(fresh.unbundle(checkpoint_dir, 0, bundle))
    self.assertEqual(fresh.training_steps, agent.training_steps)

  def test_min_replay_history_is_read_until_reached_and_after_a_load(self):
    checkpoint_dir = fixtures.temp_dir(self)
    agent = _make_agent()
    small_agents.play(agent, 5, episode_length=6)
    agent.bundle_and_checkpoint(checkpoint_dir, 0)  # 5 transitions.
    memory_class = type(agent._replay.memory)
    reads = []
    add_count = memory_class.add_count

    def counted(memory):
      reads.append(1)
      return add_count.fget(memory)

    with mock.patch.object(memory_class, 'add_count', property(counted)):
      for _ in range(25):
        agent.step(1.0, np.ones(4))
      # Read until it passed 20 (a sharded memory asks its shards each
      # time), then no more: a memory only grows until a load.
      self.assertEqual(len(reads), 16)
      before = agent._sess.run(agent.online_convnet.trainable_variables)
      self.assertTrue(agent.unbundle(checkpoint_dir, 0, {}))
      # Back to 5 transitions: no training until 20 again.
      restored = agent._sess.run(agent.online_convnet.trainable_variables)
      for _ in range(3):
        agent.step(1.0, np.ones(4))
      after = agent._sess.run(agent.online_convnet.trainable_variables)
      self.assertEqual(len(reads), 19)
    for a, b in zip(restored, after):
      np.testing.assert_array_equal(a, b)
    self.assertFalse(all(np.array_equal(a, b)
                         for a, b in zip(before, restored)))

  def test_public_routes_for_runners(self):
    sess = tf.compat.v1.Session(graph=tf.Graph())
    agent = _make_agent(sess)
    self.assertIs(agent.session, sess)
    self.assertIs(agent.replay_memory, agent._replay.memory)
    agent.begin_episode(np.zeros(4))
    for _ in range(21):
      agent.replay_memory.add(np.ones((4, 1)), 0, 1.0, False)
    self.assertTrue(agent.holds_min_replay_history())
    steps = agent.training_steps
    agent.train_step()
    self.assertEqual(agent.training_steps, steps + 1)

    class Overriding(dqn_agent.DQNAgent):
      calls = 0

      def _train_step(self):  # Dopamine's name, overridden by a subclass.
        Overriding.calls += 1

    _make_agent(agent_class=Overriding).train_step()
    self.assertEqual(Overriding.calls, 1)


class NetworkTest(absltest.TestCase):

  def test_atari_networks_build_in_graph_mode(self):
    with tf.Graph().as_default():
      state = tf.compat.v1.placeholder(tf.uint8, (None, 84, 84, 4))
      dqn = atari_lib.NatureDQNNetwork(6, name='Online')(state)
      support = tf.linspace(-10.0, 10.0, 51)
      rainbow_net = atari_lib.RainbowNetwork(6, 51, support, name='Target')
      rainbow = rainbow_net(state)
      self.assertIsInstance(dqn, atari_lib.DQNNetworkType)
      self.assertIsInstance(rainbow, atari_lib.RainbowNetworkType)
      self.assertEqual(type(rainbow).__name__, 'c51_network')
      self.assertEqual(rainbow.probabilities.shape.as_list(), [None, 6, 51])
      names = sorted(v.name for v in rainbow_net.trainable_variables)
      self.assertIn('Target/Conv/kernel:0', names)
      self.assertIn('Target/fully_connected_1/bias:0', names)
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        q = sess.run(dqn.q_values, {state: np.zeros((2, 84, 84, 4))})
        self.assertEqual(q.shape, (2, 6))

  def test_legacy_variable_names(self):
    with tf.Graph().as_default():
      variables = [tf.Variable(1.0, name='Online/fully_connected/kernel'),
                   tf.Variable(1.0, name='Online/fully_connected/bias')]
      self.assertIsNone(atari_lib.maybe_transform_variable_names(variables))
      names = atari_lib.maybe_transform_variable_names(
          variables, legacy_checkpoint_load=True)
      self.assertEqual(sorted(names), ['Online/fully_connected/biases',
                                       'Online/fully_connected/weights'])


if __name__ == '__main__':
  absltest.main()
