"""Tests for rainbow_agent: project_distribution, PER exponents, the agent."""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from dopamine_per.agents import rainbow_agent
from dopamine_per.discrete_domains import gym_lib
from tests.support import small_agents


def _reference_projection(supports, weights, target_support):
  """Equation 7 of Bellemare et al. (2017), one atom at a time in NumPy."""
  supports = np.asarray(supports, np.float64)
  weights = np.asarray(weights, np.float64)
  z = np.asarray(target_support, np.float64)
  delta = z[1] - z[0]
  out = np.zeros_like(weights)
  for b in range(supports.shape[0]):
    for j in range(supports.shape[1]):
      value = min(max(supports[b, j], z[0]), z[-1])
      for i in range(len(z)):
        out[b, i] += max(0.0, 1.0 - abs(value - z[i]) / delta) * weights[b, j]
  return out


# (name, supports, weights, target_support, expected); expected None means
# "compare with the reference implementation".
_PROJECTION_CASES = [
    # Every atom lands exactly on a target atom or is clipped to an end.
    ('on_atoms', [[0, 2, 4, 6, 8], [1, 3, 4, 5, 6]],
     [[0.1, 0.6, 0.1, 0.1, 0.1], [0.1, 0.2, 0.5, 0.1, 0.1]], [4, 5, 6, 7, 8],
     [[0.8, 0.0, 0.1, 0.0, 0.1], [0.8, 0.1, 0.1, 0.0, 0.0]]),
    # Half-way between two atoms: split evenly.
    ('split', [[0.5, 1.5, 2.5]], [[1.0, 1.0, 1.0]], [0, 1, 2],
     [[0.5, 1.0, 1.5]]),
    # A shifted support (r + gamma * z) with uneven fractions.
    ('shifted', [[-0.25, 0.75, 1.75]], [[0.2, 0.3, 0.5]], [0, 1, 2], None),
    # All mass outside the range goes to the ends.
    ('clipped', [[-9.0, -7.0], [7.0, 9.0]], [[0.5, 0.5], [0.25, 0.75]],
     [-1, 1], [[1.0, 0.0], [0.0, 1.0]]),
    # Weights need not be probabilities.
    ('unnormalized', [[0.1, 0.2, 0.3, 2.9]], [[2.0, 3.0, 0.0, 7.0]],
     [0, 1, 2, 3], None),
]


class ProjectDistributionTest(parameterized.TestCase):

  def _project(self, supports, weights, target, validate_args=False):
    with tf.Graph().as_default():
      projection = rainbow_agent.project_distribution(
          tf.constant(supports, tf.float32), tf.constant(weights, tf.float32),
          tf.constant(target, tf.float32), validate_args=validate_args)
      with tf.compat.v1.Session() as sess:
        return sess.run(projection)

  @parameterized.named_parameters(*_PROJECTION_CASES)
  def test_projection(self, supports, weights, target, expected):
    if expected is None:
      expected = _reference_projection(supports, weights, target)
    for validate in (False, True):
      np.testing.assert_allclose(
          self._project(supports, weights, target, validate), expected,
          atol=1e-6)

  def test_mass_is_conserved(self):
    rng = np.random.default_rng(0)
    supports = rng.normal(scale=5.0, size=(16, 11))
    weights = rng.dirichlet(np.ones(11), size=16)
    projected = self._project(supports, weights, np.linspace(-10, 10, 11))
    np.testing.assert_allclose(projected.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(
        projected, _reference_projection(supports, weights,
                                         np.linspace(-10, 10, 11)),
        atol=1e-5)

  @parameterized.named_parameters(
      ('supports_vs_weights', [[0., 1., 2.]], [[0.5, 0.5]], [0., 1., 2.]),
      ('row_vs_target', [[0., 1.]], [[0.5, 0.5]], [0., 1., 2.]),
      ('target_not_vector', [[0., 1.]], [[0.5, 0.5]], [[0., 1.]]),
  )
  def test_static_shape_errors(self, supports, weights, target):
    with tf.Graph().as_default():
      with self.assertRaises(ValueError):
        rainbow_agent.project_distribution(
            tf.constant(supports), tf.constant(weights), tf.constant(target))

  @parameterized.named_parameters(
      ('decreasing', [2.0, 1.0, 0.0]),
      ('uneven', [0.0, 1.0, 3.0]),
  )
  def test_validate_args_rejects_bad_target_support(self, target):
    with tf.Graph().as_default():
      supports = tf.constant([[0.0, 1.0, 2.0]])
      weights = tf.constant([[0.2, 0.3, 0.5]])
      # Unknown static shapes leave the checks to the run-time assertions.
      ph = tf.compat.v1.placeholder(tf.float32, [None])
      projection = rainbow_agent.project_distribution(
          supports, weights, ph, validate_args=True)
      with tf.compat.v1.Session() as sess:
        with self.assertRaises(tf.errors.InvalidArgumentError):
          sess.run(projection, {ph: target})
        unchecked = rainbow_agent.project_distribution(supports, weights, ph)
        sess.run(unchecked, {ph: target})  # No assertion without validation.

  def test_validate_args_rejects_dynamic_shape_mismatch(self):
    with tf.Graph().as_default():
      supports = tf.compat.v1.placeholder(tf.float32, [None, None])
      weights = tf.compat.v1.placeholder(tf.float32, [None, None])
      projection = rainbow_agent.project_distribution(
          supports, weights, tf.constant([0.0, 1.0, 2.0]), validate_args=True)
      with tf.compat.v1.Session() as sess:
        with self.assertRaises(tf.errors.InvalidArgumentError):
          sess.run(projection, {supports: np.zeros((1, 3)),
                                weights: np.zeros((1, 2))})


def _make_agent(**kwargs):
  """A small CartPole-shaped Rainbow agent."""
  defaults = dict(
      network=lambda *a, **k: gym_lib.CartpoleRainbowNetwork(
          *a, hidden_units=(16,), **k),
      num_atoms=11, vmax=10.0, update_horizon=3, update_period=1,
      target_update_period=5)
  defaults.update(kwargs)
  return small_agents.cartpole_agent(rainbow_agent.RainbowAgent, None,
                                     **defaults)


# Feeds transitions in episodes of 25, rewards 1.
_play = functools.partial(small_agents.play, episode_length=25)


class RainbowAgentTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    small_agents.bind_small_memory(self, 'WrappedPrioritizedReplayBuffer')

  @parameterized.named_parameters(
      ('negative_alpha', dict(priority_exponent=-0.1)),
      ('beta_above_one', dict(importance_sampling_exponent=1.5)),
      ('anneal_zero', dict(importance_sampling_anneal_steps=0)),
      ('vmin_above_vmax', dict(vmin=20.0)),
      ('replay_scheme', dict(replay_scheme='ranked')),
  )
  def test_invalid_arguments(self, kwargs):
    with self.assertRaises(ValueError):
      _make_agent(**kwargs)

  def test_default_support_and_explicit_vmin(self):
    agent = _make_agent()
    np.testing.assert_allclose(agent._sess.run(agent._support),
                               np.linspace(-10, 10, 11), rtol=1e-6)
    agent = _make_agent(vmin=0.0)
    np.testing.assert_allclose(agent._sess.run(agent._support),
                               np.linspace(0, 10, 11), rtol=1e-6)

  def test_outputs_and_shapes(self):
    agent = _make_agent()
    outputs = agent._sess.run(agent._net_outputs,
                              {agent.state_ph: np.zeros((1, 4, 1, 1))})
    self.assertEqual(outputs.q_values.shape, (1, 2))
    self.assertEqual(outputs.logits.shape, (1, 2, 11))
    np.testing.assert_allclose(outputs.probabilities.sum(-1), 1.0, rtol=1e-5)

  def test_beta_annealing(self):
    agent = _make_agent(importance_sampling_exponent=0.4,
                        importance_sampling_anneal_steps=100)
    self.assertAlmostEqual(agent._importance_sampling_exponent_value(), 0.4)
    agent.training_steps = 50
    self.assertAlmostEqual(agent._importance_sampling_exponent_value(), 0.7)
    agent.training_steps = 500
    self.assertAlmostEqual(agent._importance_sampling_exponent_value(), 1.0)
    fixed = _make_agent()
    fixed.training_steps = 10**6
    self.assertAlmostEqual(fixed._importance_sampling_exponent_value(), 0.5)

  def test_eval_mode_stores_nothing(self):
    agent = _make_agent()
    agent.eval_mode = True
    _play(agent, 30)
    self.assertEqual(int(agent._replay.memory.add_count), 0)
    self.assertEqual(agent.training_steps, 0)

  def test_time_limit_end_is_not_terminal(self):
    agent = _make_agent()
    agent.begin_episode(np.zeros(4))
    agent.step(1.0, np.ones(4))
    agent.end_episode(1.0, terminal=False)
    memory = agent._replay.memory
    self.assertEqual(memory._store['terminal'][1], 0)
    self.assertIn(1, memory.episode_end_indices)


if __name__ == '__main__':
  absltest.main()
