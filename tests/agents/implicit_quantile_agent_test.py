"""Tests for the IQN agent, its loss and its networks.

Its learning check is in tests/agents/learning_test.py.
"""

import functools
import inspect
import types
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import gin
import numpy as np
import tensorflow as tf

from dopamine_per.agents import implicit_quantile_agent
from dopamine_per.discrete_domains import atari_lib
from dopamine_per.discrete_domains import gym_lib
from dopamine_per.discrete_domains import run_experiment
from tests.support import small_agents

_BATCH_SIZE = 8


# Two transitions, N' = 2 targets and N = 2 values at tau = (0.25, 0.75).
# Row 0: errors target_j - value_i are 1-0.5 = 0.5, 1-2 = -1, 3-0.5 = 2.5 and
# 3-2 = 1; row 1: 0-3 = -3 and 0-0 = 0 (for both targets).
_TARGETS = [[1.0, 3.0], [0.0, 0.0]]
_VALUES = [[0.5, 2.0], [3.0, 0.0]]
_TAUS = [[0.25, 0.75], [0.25, 0.75]]
# kappa = 1. Row 0, per pair |tau - 1{error < 0}| * Huber(error) / kappa:
#   target 1: 0.25 * 0.5 * 0.5**2 = 0.03125 and |0.75 - 1| * 0.5 * 1**2
#     = 0.125 (|error| = kappa: the quadratic side); sum 0.15625.
#   target 3: 0.25 * 1 * (2.5 - 0.5) = 0.5 (linear side) and
#     0.75 * 0.5 * 1**2 = 0.375; sum 0.875.
#   mean over the targets: (0.15625 + 0.875) / 2 = 0.515625.
# Row 1: |0.25 - 1| * (3 - 0.5) = 1.875 and 0 for each target: 1.875.
# kappa = 2 (every Huber value divided by 2 as well):
#   row 0, target 1: 0.25 * 0.125 / 2 + 0.25 * 0.5 / 2 = 0.078125;
#   target 3: 0.25 * 2 * (2.5 - 1) / 2 + 0.75 * 0.5 / 2 = 0.5625;
#   mean 0.3203125. Row 1: 0.75 * 2 * (3 - 1) / 2 = 1.5.
_LOSS_CASES = (
    ('kappa_1', 1.0, [0.515625, 1.875]),
    ('kappa_2', 2.0, [0.3203125, 1.5]),
)


class QuantileHuberLossTest(parameterized.TestCase):

  @parameterized.named_parameters(*_LOSS_CASES)
  def test_hand_computed(self, kappa, expected):
    loss = implicit_quantile_agent.quantile_huber_loss(
        tf.constant(_TARGETS), tf.constant(_VALUES), tf.constant(_TAUS),
        kappa)
    self.assertEqual(loss.shape, (2,))
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-6)

  def test_gradient_by_hand(self):
    # Row 0, kappa 1, d loss / d value_i = -mean_j |tau_i - 1{e < 0}| *
    # Huber'(e): value 0.5: -(0.25 * 0.5 + 0.25 * 1) / 2 = -0.1875;
    # value 2: -(0.25 * -1 + 0.75 * 1) / 2 = -0.25.
    values = tf.constant(_VALUES[:1])
    with tf.GradientTape() as tape:
      tape.watch(values)
      loss = implicit_quantile_agent.quantile_huber_loss(
          tf.constant(_TARGETS[:1]), values, tf.constant(_TAUS[:1]), 1.0)
    np.testing.assert_allclose(tape.gradient(loss, values).numpy(),
                               [[-0.1875, -0.25]], rtol=1e-6)


def _fixed_levels(levels):
  """A tf.random.uniform stand-in: level q for every state of row block q."""
  def uniform(shape, **unused_kwargs):
    per_level = shape[0] // len(levels)
    return tf.reshape(tf.repeat(tf.constant(levels, tf.float32), per_level),
                      shape)
  return uniform


class NetworkTest(parameterized.TestCase):

  def test_cosine_embedding_by_hand(self):
    # cos(pi * i * tau), i = 1, 2, 3: tau 0 -> 1, 1, 1; tau 0.5 -> 0, -1, 0.
    embedding = atari_lib.cosine_quantile_embedding(
        tf.constant([[0.0], [0.5]]), 3)
    np.testing.assert_allclose(embedding.numpy(),
                               [[1, 1, 1], [0, -1, 0]], atol=1e-6)

  def test_atari_network_outputs(self):
    network = atari_lib.ImplicitQuantileNetwork(5, 16, name='Online')
    states = tf.constant(
        np.random.default_rng(0).integers(0, 256, (2, 84, 84, 4)), tf.uint8)
    outputs = network(states, 3)
    self.assertIsInstance(outputs, atari_lib.ImplicitQuantileNetworkType)
    self.assertEqual(outputs.quantile_values.shape, (6, 5))
    self.assertEqual(outputs.quantile_values.dtype, tf.float32)
    self.assertEqual(outputs.quantiles.shape, (6, 1))
    self.assertEqual(outputs.quantiles.dtype, tf.float32)
    quantiles = outputs.quantiles.numpy()
    self.assertTrue(np.all((quantiles >= 0) & (quantiles < 1)))
    names = {v.name for v in network.trainable_variables}
    self.assertContainsSubset(
        {'Online/Conv/kernel:0', 'Online/dense/kernel:0',
         'Online/fully_connected/bias:0'}, names)
    # Three convolutions, the quantile layer, two dense layers.
    self.assertLen(network.trainable_variables, 12)

  @parameterized.named_parameters(
      ('cartpole', gym_lib.CartpoleImplicitQuantileNetwork, 4, 2),
      ('acrobot', gym_lib.AcrobotImplicitQuantileNetwork, 6, 3),
  )
  def test_gym_network_outputs(self, network_class, features, num_actions):
    network = network_class(num_actions, 8, hidden_units=(16, 16, 16))
    states = tf.constant(np.zeros((4, features, 1, 1)), tf.float64)
    outputs = network(states, 5)
    self.assertEqual(outputs.quantile_values.shape, (20, num_actions))
    self.assertEqual(outputs.quantile_values.dtype, tf.float32)
    self.assertEqual(outputs.quantiles.shape, (20, 1))
    # Two layers before the product, the quantile layer, one after, output.
    self.assertLen(network.trainable_variables, 10)

  def test_rows_are_quantile_major(self):
    network = gym_lib.CartpoleImplicitQuantileNetwork(
        2, 8, hidden_units=(16, 16, 16))
    states = np.random.default_rng(0).normal(size=(2, 4, 1, 1))
    levels = [0.1, 0.5, 0.9]
    with mock.patch.object(tf.random, 'uniform', _fixed_levels(levels)):
      both = network(tf.constant(states), 3).quantile_values.numpy()
      for b in range(2):
        alone = network(tf.constant(states[b:b + 1]), 3).quantile_values
        # Row q * batch + b is state b at level q. (float32 sums over a
        # batch of 2 and of 1 may differ in the last bits: an absolute
        # tolerance for values near 0; a wrong layout differs by ~0.1.)
        np.testing.assert_allclose(both[b::2], alone.numpy(), rtol=1e-5,
                                   atol=1e-5)

  @parameterized.named_parameters(
      ('no_hidden_units', dict(hidden_units=()), 'hidden_units'),
      ('zero_embedding', dict(quantile_embedding_dim=0),
       'quantile_embedding_dim'),
  )
  def test_bad_arguments(self, kwargs, name):
    arguments = dict(num_actions=2, quantile_embedding_dim=8)
    arguments.update(kwargs)
    with self.assertRaisesRegex(ValueError, name):
      gym_lib.CartpoleImplicitQuantileNetwork(**arguments)


def _make_agent(**kwargs):
  """A small CartPole-shaped IQN agent that trains from its 21st step."""
  arguments = dict(
      network=functools.partial(gym_lib.CartpoleImplicitQuantileNetwork,
                                hidden_units=(16, 16, 16)),
      num_tau_samples=4, num_tau_prime_samples=5,
      num_quantile_samples=3, quantile_embedding_dim=8, gamma=0.9,
      update_horizon=1, update_period=1, target_update_period=5)
  arguments.update(kwargs)
  return small_agents.cartpole_agent(
      implicit_quantile_agent.ImplicitQuantileAgent, **arguments)


# Feeds transitions in episodes of 10, rewards 0, 1, 2, ...
_play = functools.partial(small_agents.play, episode_length=10,
                          count_rewards=True)


class ImplicitQuantileAgentTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    small_agents.bind_small_memory(self, 'WrappedPrioritizedReplayBuffer',
                                   batch_size=_BATCH_SIZE)

  def test_dopamine_defaults(self):
    defaults = {
        name: parameter.default for name, parameter in inspect.signature(
            implicit_quantile_agent.ImplicitQuantileAgent).parameters.items()
        if parameter.default is not inspect.Parameter.empty}
    self.assertEqual(defaults, dict(
        network=atari_lib.ImplicitQuantileNetwork, kappa=1.0,
        num_tau_samples=32, num_tau_prime_samples=32,
        num_quantile_samples=32, quantile_embedding_dim=64,
        double_dqn=False, summary_writer=None,
        summary_writing_frequency=500))
    agent = _make_agent()
    # RainbowAgent's default, as Dopamine's IQN inherits it.
    self.assertEqual(agent._replay_scheme, 'prioritized')

  @parameterized.named_parameters(
      ('kappa_zero', dict(kappa=0.0), 'kappa'),
      ('no_tau_samples', dict(num_tau_samples=0), 'num_tau_samples'),
      ('fractional_tau_prime', dict(num_tau_prime_samples=1.5),
       'num_tau_prime_samples'),
      ('bool_quantile_samples', dict(num_quantile_samples=True),
       'num_quantile_samples'),
      ('no_embedding', dict(quantile_embedding_dim=0),
       'quantile_embedding_dim'),
      ('replay_scheme', dict(replay_scheme='ranked'), 'replay scheme'),
  )
  def test_invalid_arguments(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      _make_agent(**kwargs)

  def test_acting_outputs(self):
    agent = _make_agent()
    outputs, q_values = agent._sess.run(
        [agent._net_outputs, agent._q_values],
        {agent.state_ph: np.zeros((1, 4, 1, 1))})
    self.assertEqual(outputs.quantile_values.shape, (3, 2))
    self.assertEqual(outputs.quantiles.shape, (3, 1))
    # One run: the Q-values are the mean of these 3 sampled levels.
    np.testing.assert_allclose(q_values, outputs.quantile_values.mean(0),
                               rtol=1e-5)
    self.assertIn(agent.begin_episode(np.zeros(4)), (0, 1))

  def test_loss_matches_reference(self):
    agent = _make_agent()
    _play(agent, 40)  # 4 of the 40 stored transitions are terminal.
    replay = agent._replay
    memory = replay.memory
    fetches = dict(
        values=agent._replay_net_quantile_values,
        taus=agent._replay_net_quantiles,
        next_values=agent._replay_net_target_quantile_values,
        next_actions=agent._replay_next_qt_argmax, actions=replay.actions,
        rewards=replay.rewards, terminals=replay.terminals,
        loss=agent._unweighted_loss)
    rows = np.arange(_BATCH_SIZE)

    def check_batch():
      """One run's loss against the reference; returns its terminals."""
      f = agent._sess.run(fetches)
      # Quantile-major rows: reshape to [levels, batch, actions].
      values = f['values'].reshape(4, _BATCH_SIZE, 2)[:, rows,
                                                      f['actions']].T
      taus = f['taus'].reshape(4, _BATCH_SIZE).T
      next_values = f['next_values'].reshape(5, _BATCH_SIZE, 2)[
          :, rows, f['next_actions']].T

      def reference(terminals):
        targets = (f['rewards'][:, None] +
                   0.9 * (1.0 - terminals[:, None]) * next_values)
        errors = targets[:, :, None] - values[:, None, :]
        huber = np.where(np.abs(errors) <= 1.0, 0.5 * errors**2,
                         np.abs(errors) - 0.5)
        return (np.abs(taus[:, None, :] - (errors < 0)) *
                huber).sum(2).mean(1)

      np.testing.assert_allclose(f['loss'], reference(f['terminals']),
                                 rtol=1e-5)
      terminal = f['terminals'] == 1
      if terminal.any():
        # A terminal row does not bootstrap: the loss is not the one with
        # the next state's values (which are not all zero).
        bootstrapped = reference(np.zeros_like(f['terminals']))
        self.assertFalse(np.allclose(f['loss'][terminal],
                                     bootstrapped[terminal], rtol=1e-5))
      return terminal

    # 10 batches at the agent's own priorities: mostly non-terminal rows
    # (a terminal transition is learned first, so it holds little priority).
    non_terminal_rows = sum(int(np.count_nonzero(~check_batch()))
                            for _ in range(10))
    self.assertGreater(non_terminal_rows, 0)
    # Then terminals in every batch: rows are drawn one per eighth of the
    # total priority (stratified), so a transition holding over two eighths
    # is in every batch: 100 > 2 * (3 * 100 + 37) / 8 = 84.25.
    terminals = memory._store['terminal'][:40] == 1
    valid = np.array([memory.is_valid_transition(i) for i in range(40)])
    self.assertEqual(list(np.flatnonzero(terminals & valid)), [9, 19, 29])
    memory.set_priority(np.arange(40),
                        np.where(terminals & valid, 100.0, 1.0))
    for _ in range(10):
      self.assertGreaterEqual(np.count_nonzero(check_batch()), 3)

  @parameterized.parameters(False, True)
  def test_double_dqn_chooses_next_action_with_online_network(self,
                                                               double_dqn):
    agent = _make_agent(double_dqn=double_dqn)
    _play(agent, 15)  # Fills the memory; no training yet.
    # The online network prefers action 0 everywhere, the target action 1.
    with agent._sess.graph.as_default():
      for network, bias in ((agent.online_convnet, [1e3, -1e3]),
                            (agent.target_convnet, [-1e3, 1e3])):
        agent._sess.run(network.last_layer.bias.assign(bias))
    next_actions = agent._sess.run(agent._replay_next_qt_argmax)
    np.testing.assert_array_equal(next_actions, 0 if double_dqn else 1)

  @parameterized.parameters(0.5, 1.0)
  def test_prioritized_priorities_are_losses(self, alpha):
    agent = _make_agent(priority_exponent=alpha)
    _play(agent, 25)
    loss, new_priorities, indices, _ = agent._sess.run(
        [agent._unweighted_loss, agent._new_priorities,
         agent._replay.indices, agent._train_op[0]])
    np.testing.assert_allclose(new_priorities, (loss + 1e-10)**alpha,
                               rtol=1e-5)
    # A transition sampled twice has two losses (each row draws its own
    # quantiles); the memory keeps one of them.
    stored = agent._replay.memory.get_priority(indices)
    for index, priority in zip(indices, stored):
      self.assertIn(priority, new_priorities[indices == index])
    self.assertGreater(len(np.unique(new_priorities)), 1)

  def test_prioritized_loss_is_importance_weighted(self):
    # RainbowAgent's weights; the default beta 0.5 gives Dopamine's
    # 1 / sqrt(priority), normalized by the batch maximum.
    agent = _make_agent()
    _play(agent, 40)
    weighted, loss, probabilities = agent._sess.run(
        [agent._train_op[1], agent._unweighted_loss,
         agent._replay.transition['sampling_probabilities']])
    weights = (probabilities + 1e-10)**-0.5
    np.testing.assert_allclose(weighted, loss * weights / weights.max(),
                               rtol=1e-5)

  def test_uniform_trains_and_keeps_priorities_at_one(self):
    # Prioritized training: agent_networks_test.
    agent = _make_agent(replay_scheme='uniform')
    before = agent._sess.run(agent.online_convnet.trainable_variables)
    _play(agent, 40)
    after = agent._sess.run(agent.online_convnet.trainable_variables)
    self.assertTrue(all(np.any(a != b) for a, b in zip(before, after)))
    self.assertIsNone(agent._new_priorities)
    priorities = agent._replay.memory.get_priority(np.arange(40))
    np.testing.assert_array_equal(priorities[priorities > 0], 1.0)
    self.assertGreater(np.count_nonzero(priorities), 30)

  def test_create_agent_reads_rainbow_bindings(self):
    # Dopamine's IQN configs set the shared settings on RainbowAgent.
    gin.parse_config([
        "create_agent.agent_name = 'implicit_quantile'",
        'ImplicitQuantileAgent.network = '
        '@gym_lib.CartpoleImplicitQuantileNetwork',
        'ImplicitQuantileAgent.num_tau_samples = 4',
        'RainbowAgent.observation_shape = %gym_lib.CARTPOLE_OBSERVATION_SHAPE',
        'RainbowAgent.observation_dtype = %gym_lib.CARTPOLE_OBSERVATION_DTYPE',
        'RainbowAgent.stack_size = %gym_lib.CARTPOLE_STACK_SIZE',
        'RainbowAgent.update_horizon = 3',
        "RainbowAgent.replay_scheme = 'uniform'",
        # Any RainbowAgent argument, bound on the IQN agent, wins.
        'RainbowAgent.gamma = 0.9',
        'ImplicitQuantileAgent.gamma = 0.5',
    ])
    agent = run_experiment.create_agent(None, types.SimpleNamespace(
        action_space=types.SimpleNamespace(n=2)))
    self.assertIsInstance(agent, implicit_quantile_agent.ImplicitQuantileAgent)
    self.assertEqual(agent.num_tau_samples, 4)
    self.assertEqual(agent.update_horizon, 3)
    self.assertEqual(agent._replay_scheme, 'uniform')
    self.assertEqual(agent.observation_shape, (4, 1))
    self.assertEqual(agent.gamma, 0.5)


if __name__ == '__main__':
  absltest.main()
