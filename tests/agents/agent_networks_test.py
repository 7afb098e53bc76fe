"""Every kind of network trains, syncs and checkpoints in the agents.

One `_AgentRow` per agent lists its networks: ours under Dopamine's module
names and networks a Dopamine user writes (Keras models, a plain
`tf.Module`). The table runs under Keras 3 here and under tf-keras
(``TF_USE_LEGACY_KERAS=1``) in a subprocess (`LegacyKerasTest`).
"""

import collections
import functools
import glob
import os
import re

from absl.testing import absltest
from absl.testing import parameterized
import gin
import numpy as np
import tensorflow as tf

from dopamine_per.agents import dqn_agent
from dopamine_per.agents import implicit_quantile_agent
from dopamine_per.agents import network_variables
from dopamine_per.agents import rainbow_agent
from dopamine_per.discrete_domains import atari_lib
from dopamine_per.discrete_domains import gym_lib
from dopamine_per.discrete_domains import legacy_networks
from tests.support import fixtures
from tests.support import gin_util

_NUM_ACTIONS = 3

# What an agent observes: one observation's shape, its dtype, frames per
# state.
_Inputs = collections.namedtuple('_Inputs', ['shape', 'dtype', 'stack_size'])
_CARTPOLE = _Inputs((4, 1), tf.float64, 1)
_ACROBOT = _Inputs((6, 1), tf.float64, 1)
_LUNAR_LANDER = _Inputs((8, 1), tf.float64, 1)
_MOUNTAIN_CAR = _Inputs((2, 1), tf.float64, 1)
# Atari frames shrunk from 84x84 to 16x16 so the Nature torso stays small.
_ATARI = _Inputs((16, 16), tf.uint8, 4)


# ---------------------------------------------- networks a user would write


class _KerasDQNNetwork(tf.keras.Model):
  """A Dopamine-style Keras Q-network: flattened inputs, two dense layers."""

  def __init__(self, num_actions, name=None):
    super().__init__(name=name)
    self.flatten = tf.keras.layers.Flatten()
    self.hidden = tf.keras.layers.Dense(
        32, activation=tf.keras.activations.relu, name='fully_connected')
    self.last = tf.keras.layers.Dense(num_actions, name='fully_connected')

  def call(self, state):
    x = self.flatten(tf.cast(state, tf.float32))
    return atari_lib.DQNNetworkType(self.last(self.hidden(x)))


class _KerasRainbowNetwork(tf.keras.Model):
  """A Dopamine-style Keras C51 network with a convolutional torso."""

  def __init__(self, num_actions, num_atoms, support, name=None):
    super().__init__(name=name)
    self.num_actions = num_actions
    self.num_atoms = num_atoms
    self.support = support
    self.conv = tf.keras.layers.Conv2D(
        8, [4, 4], strides=2, padding='same',
        activation=tf.keras.activations.relu, name='Conv')
    self.flatten = tf.keras.layers.Flatten()
    self.hidden = tf.keras.layers.Dense(
        32, activation=tf.keras.activations.relu, name='fully_connected')
    self.last = tf.keras.layers.Dense(num_actions * num_atoms,
                                      name='fully_connected')

  def call(self, state):
    x = self.conv(tf.cast(state, tf.float32) / 255.0)
    x = self.last(self.hidden(self.flatten(x)))
    logits = tf.reshape(x, [-1, self.num_actions, self.num_atoms])
    probabilities = tf.keras.activations.softmax(logits)
    q_values = tf.reduce_sum(self.support * probabilities, axis=2)
    return atari_lib.RainbowNetworkType(q_values, logits, probabilities)


class _KerasImplicitQuantileNetwork(tf.keras.Model):
  """A Dopamine-style Keras IQN network: a dense torso and cosine features.

  Rows are quantile-major, as Dopamine's: row q * batch + b holds quantile
  level q of state b.
  """

  def __init__(self, num_actions, quantile_embedding_dim, name=None):
    super().__init__(name=name)
    self.quantile_embedding_dim = quantile_embedding_dim
    self.flatten = tf.keras.layers.Flatten()
    self.torso = tf.keras.layers.Dense(
        16, activation=tf.keras.activations.relu, name='fully_connected')
    self.embedding = tf.keras.layers.Dense(
        16, activation=tf.keras.activations.relu, name='fully_connected')
    self.last = tf.keras.layers.Dense(num_actions, name='fully_connected')

  def call(self, state, num_quantiles):
    batch_size = tf.shape(state)[0]
    x = self.torso(self.flatten(tf.cast(state, tf.float32)))
    x = tf.tile(x, [num_quantiles, 1])
    quantiles = tf.random.uniform([num_quantiles * batch_size, 1])
    levels = tf.range(1, self.quantile_embedding_dim + 1, dtype=tf.float32)
    features = tf.cos(np.pi * levels[None, :] * quantiles)
    values = self.last(x * self.embedding(features))
    return atari_lib.ImplicitQuantileNetworkType(values, quantiles)


class _ModuleDQNNetwork(tf.Module):
  """A linear Q-function as a plain tf.Module (weights made on first call)."""

  def __init__(self, num_actions, name=None):
    super().__init__(name=name)
    self.num_actions = num_actions
    self.weights = None

  def __call__(self, state):
    x = tf.reshape(tf.cast(state, tf.float32), [tf.shape(state)[0], -1])
    if self.weights is None:
      with self.name_scope:
        self.weights = tf.Variable(
            tf.random.normal([int(x.shape[-1]), self.num_actions], stddev=0.1),
            name='weights')
    return atari_lib.DQNNetworkType(tf.matmul(x, self.weights))


# ------------------------------------------------------------------ the table

_NetworkCase = collections.namedtuple('_NetworkCase',
                                      ['name', 'network', 'inputs'])
# loss_tag: the agent's summary of its loss (Dopamine's tag).
_AgentRow = collections.namedtuple('_AgentRow',
                                   ['name', 'agent_class', 'kwargs',
                                    'loss_tag', 'networks'])
_GYM_DOMAINS = (('Cartpole', _CARTPOLE), ('Acrobot', _ACROBOT),
                ('LunarLander', _LUNAR_LANDER),
                ('MountainCar', _MOUNTAIN_CAR))


def _gym_cases(module, kind, domains=_GYM_DOMAINS, args=(), **kwargs):
  """Cases for the networks of `module` (gym_lib or legacy_networks).

  Args:
    module: gym_lib or legacy_networks.
    kind: the networks' names less their domain, e.g. 'RainbowNetwork'.
    domains: (domain, inputs) pairs.
    args: the networks' first arguments.
    **kwargs: for the networks' constructors.
  """
  prefix = module.__name__.rsplit('.', 1)[-1] + '.'
  return [_NetworkCase(prefix + domain + kind, functools.partial(
      getattr(module, domain + kind), *args, **kwargs), inputs)
          for domain, inputs in domains]


def _dqn_cases(module):
  """DQN and Fourier networks; the generic one given CartPole's bounds."""
  return (_gym_cases(module, 'DQNNetwork') +
          _gym_cases(module, 'FourierDQNNetwork', _GYM_DOMAINS[:2]) +
          _gym_cases(module, 'FourierDQNNetwork', [('', _CARTPOLE)],
                     (gym_lib.CARTPOLE_MIN_VALS, gym_lib.CARTPOLE_MAX_VALS)))


_TABLE = [
    _AgentRow('dqn', dqn_agent.DQNAgent, {}, 'HuberLoss', [
        _NetworkCase('atari_lib.NatureDQNNetwork', atari_lib.NatureDQNNetwork,
                     _ATARI),
        _NetworkCase('user.KerasDQNNetwork', _KerasDQNNetwork, _CARTPOLE),
        _NetworkCase('user.ModuleDQNNetwork', _ModuleDQNNetwork, _CARTPOLE),
    ] + _dqn_cases(gym_lib) + _dqn_cases(legacy_networks)),
    _AgentRow('rainbow', rainbow_agent.RainbowAgent,
              dict(num_atoms=11, vmax=10.0), 'CrossEntropyLoss', [
                  _NetworkCase('atari_lib.RainbowNetwork',
                               atari_lib.RainbowNetwork, _ATARI),
                  _NetworkCase('user.KerasRainbowNetwork',
                               _KerasRainbowNetwork, _ATARI),
              ] + _gym_cases(gym_lib, 'RainbowNetwork') +
              _gym_cases(legacy_networks, 'RainbowNetwork', _GYM_DOMAINS[:2])),
    _AgentRow('iqn', implicit_quantile_agent.ImplicitQuantileAgent,
              dict(num_tau_samples=4, num_tau_prime_samples=4,
                   num_quantile_samples=4, quantile_embedding_dim=8),
              'QuantileLoss', [
                  _NetworkCase('atari_lib.ImplicitQuantileNetwork',
                               atari_lib.ImplicitQuantileNetwork, _ATARI),
                  _NetworkCase('user.KerasImplicitQuantileNetwork',
                               _KerasImplicitQuantileNetwork, _CARTPOLE),
              ] + _gym_cases(gym_lib, 'ImplicitQuantileNetwork',
                             hidden_units=(16, 16))),
]

_CASES = [('{}_{}'.format(row.name, case.name.replace('.', '_')), row, case)
          for row in _TABLE for case in row.networks]

# Training starts after _MIN_REPLAY_HISTORY transitions, one step per agent
# step; the target is synced at agent step _SYNC_PERIOD (a training step).
_MIN_REPLAY_HISTORY = 8
_SYNC_PERIOD = 10
_STEPS_AFTER_SYNC = 4


def _make_agent(row, case, summary_dir=None):
  """Builds `row`'s agent around `case`'s network, in a new graph."""
  return row.agent_class(
      None, _NUM_ACTIONS,
      observation_shape=case.inputs.shape,
      observation_dtype=case.inputs.dtype,
      stack_size=case.inputs.stack_size,
      network=case.network,
      min_replay_history=_MIN_REPLAY_HISTORY,
      update_period=1,
      target_update_period=_SYNC_PERIOD,
      epsilon_fn=dqn_agent.identity_epsilon,
      epsilon_eval=0.0,
      optimizer=tf.compat.v1.train.AdamOptimizer(0.01),
      summary_writer=summary_dir,
      summary_writing_frequency=1,
      **row.kwargs)


def _observation(rng, inputs):
  if inputs.dtype == tf.uint8:
    return rng.integers(0, 256, size=inputs.shape, dtype=np.uint8)
  return rng.normal(size=inputs.shape)


def _weights(agent, network):
  """Returns the values of `network`'s trainable variables."""
  return agent._sess.run(network_variables.trainable_tf_variables(network))


def _all_variables(agent):
  """{name: value} of every variable in the agent's graph."""
  variables = agent._sess.graph.get_collection('variables')
  return dict(zip([v.name for v in variables], agent._sess.run(variables)))


def _all_equal(first, second):
  assert len(first) == len(second), (len(first), len(second))
  return all(np.array_equal(a, b) for a, b in zip(first, second))


def _summary_tags(directory):
  tags = set()
  for path in glob.glob(os.path.join(directory, 'events.out.tfevents.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      tags.update(value.tag for value in event.summary.value)
  return tags


class AgentNetworksTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)
    gin.clear_config()
    for memory in ('WrappedReplayBuffer', 'WrappedPrioritizedReplayBuffer'):
      gin.bind_parameter(memory + '.replay_capacity', 100)
      gin.bind_parameter(memory + '.batch_size', 4)

  def _agent(self, row, case, summary_dir=None):
    agent = _make_agent(row, case, summary_dir)
    self.addCleanup(agent._sess.close)
    if agent.summary_writer is not None:
      self.addCleanup(agent.summary_writer.close)
    return agent

  @parameterized.named_parameters(*_CASES)
  def test_trains_syncs_and_restores(self, row, case):
    summary_dir = fixtures.temp_dir(self)
    agent = self._agent(row, case, summary_dir)
    rng = np.random.default_rng(0)
    agent.begin_episode(_observation(rng, case.inputs))
    initial = _weights(agent, agent.online_convnet)
    for _ in range(_SYNC_PERIOD):
      agent.step(1.0, _observation(rng, case.inputs))
    # Training step _SYNC_PERIOD trained the online network, then synced.
    synced = _weights(agent, agent.online_convnet)
    self.assertFalse(_all_equal(initial, synced))
    self.assertTrue(_all_equal(_weights(agent, agent.target_convnet), synced))
    for _ in range(_STEPS_AFTER_SYNC):
      agent.step(1.0, _observation(rng, case.inputs))
    trained = _weights(agent, agent.online_convnet)
    self.assertFalse(_all_equal(trained, synced))
    self.assertTrue(_all_equal(_weights(agent, agent.target_convnet), synced))

    agent.summary_writer.flush()
    self.assertIn('Losses/' + row.loss_tag, _summary_tags(summary_dir))

    checkpoint_dir = fixtures.temp_dir(self)
    bundle = agent.bundle_and_checkpoint(checkpoint_dir, 1)
    fresh = self._agent(row, case)
    self.assertFalse(_all_equal(_weights(fresh, fresh.online_convnet),
                                trained))
    self.assertTrue(fresh.unbundle(checkpoint_dir, 1, bundle))
    self.assertEqual(fresh.training_steps, agent.training_steps)
    # Every variable: both networks and the optimizer's slots.
    saved, restored = _all_variables(agent), _all_variables(fresh)
    self.assertEqual(set(restored), set(saved))
    for name, value in saved.items():
      np.testing.assert_array_equal(restored[name], value, err_msg=name)
    # The restored agent acts (greedily: epsilon_eval is 0). Its action is
    # not compared with the saved agent's: agents that sample quantiles
    # (IQN) may break near-ties differently.
    fresh.eval_mode = True
    self.assertIn(fresh.begin_episode(_observation(rng, case.inputs)),
                  range(_NUM_ACTIONS))


class KerasVersionTest(absltest.TestCase):

  def test_tf_keras_is_the_requested_keras(self):
    # The values TensorFlow's lazy loader accepts.
    legacy = os.environ.get('TF_USE_LEGACY_KERAS') in ('1', 'true', 'True')
    # Keras 3 lives in the package `keras`, Keras 2 (tf-keras) in `tf_keras`.
    self.assertEqual(tf.keras.Model.__module__.split('.')[0],
                     'tf_keras' if legacy else 'keras')


class LegacyKerasTest(absltest.TestCase):
  """Runs the table again under tf-keras, in one subprocess."""

  def test_table_under_tf_keras(self):
    result = fixtures.run_python(
        ['-m', 'tests.agents.agent_networks_test', 'AgentNetworksTest',
         'KerasVersionTest'], 900, TF_USE_LEGACY_KERAS='1')
    output = result.stdout + result.stderr
    self.assertEqual(result.returncode, 0, output[-5000:])
    ran = re.search(r'Ran (\d+) tests?', output)
    self.assertIsNotNone(ran, output[-5000:])
    self.assertEqual(int(ran.group(1)), len(_CASES) + 1, output[-5000:])
    self.assertNotRegex(output, r'skipped=\d')


if __name__ == '__main__':
  absltest.main()
