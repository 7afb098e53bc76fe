# coding=utf-8
"""Tests for dopamine_per.distributed.actor on a local Ray (loopback only).

One Ray (2 CPUs) serves the Ray tests; each actor process imports
TensorFlow and builds a small Rainbow agent for CartPole-v1 (a few seconds).
"""

import time

from absl.testing import absltest
from absl.testing import parameterized
import gin
import numpy as np
import ray
import tensorflow as tf

from dopamine_per.discrete_domains import gym_lib
from dopamine_per.discrete_domains import run_experiment
from dopamine_per.distributed import actor as actor_lib
from dopamine_per.distributed import replay
from dopamine_per.distributed import weights as weights_lib
from tests.support import gin_util
from tests.support import ray_util
from tests.support import sharded_memories

# The learner's configuration, which the actors parse: a small Rainbow agent
# for CartPole-v1.
_GIN_CONFIG = """
import dopamine_per.agents.dqn_agent
import dopamine_per.agents.rainbow_agent
import dopamine_per.discrete_domains.gym_lib
import dopamine_per.discrete_domains.run_experiment

RainbowAgent.observation_shape = %gym_lib.CARTPOLE_OBSERVATION_SHAPE
RainbowAgent.observation_dtype = %gym_lib.CARTPOLE_OBSERVATION_DTYPE
RainbowAgent.stack_size = %gym_lib.CARTPOLE_STACK_SIZE
RainbowAgent.network = @gym_lib.CartpoleRainbowNetwork
gym_lib.CartpoleRainbowNetwork.hidden_units = (16, 16)
RainbowAgent.num_atoms = 11
RainbowAgent.vmin = 0.
RainbowAgent.vmax = 100.
RainbowAgent.update_horizon = 3
RainbowAgent.tf_device = '/cpu:*'
create_gym_environment.environment_name = 'CartPole'
create_gym_environment.version = 'v1'
create_agent.agent_name = 'rainbow'
WrappedPrioritizedReplayBuffer.replay_capacity = 1000
"""

_EPISODE_LIMIT = 40  # agent steps: episodes end often


def setUpModule():  # pylint: disable=invalid-name
  ray_util.start_local_ray()


def tearDownModule():  # pylint: disable=invalid-name
  ray.shutdown()


class ApexEpsilonTest(parameterized.TestCase):

  @parameterized.parameters(
      # (actor_index, num_actors, expected), base 0.4 and exponent 7.
      (0, 1, 0.4),
      (0, 2, 0.4), (1, 2, 0.4 ** 8),
      (0, 8, 0.4), (1, 8, 0.4 ** 2), (7, 8, 0.4 ** 8),
      (3, 4, 0.4 ** 8), (1, 3, 0.4 ** 4.5),
  )
  def test_ape_x_values(self, actor_index, num_actors, expected):
    self.assertAlmostEqual(
        actor_lib.apex_epsilon(actor_index, num_actors), expected, places=12)

  def test_base_and_exponent_through_gin(self):
    self.addCleanup(gin.clear_config)
    gin.parse_config(['apex_epsilon.base = 0.5', 'apex_epsilon.exponent = 2.'])
    self.assertEqual(actor_lib.apex_epsilon(0, 3), 0.5)
    self.assertAlmostEqual(actor_lib.apex_epsilon(1, 3), 0.5 ** 2)
    self.assertAlmostEqual(actor_lib.apex_epsilon(2, 3), 0.5 ** 3)

  @parameterized.parameters(
      (2, 2, {}, 'actor_index'), (-1, 2, {}, 'actor_index'),
      (0, 0, {}, 'num_actors'), (0, 2, {'base': 1.5}, 'base'),
      (0, 2, {'exponent': -1.0}, 'exponent'))
  def test_refuses_out_of_range(self, actor_index, num_actors, kwargs, word):
    with self.assertRaisesRegex(ValueError, word):
      actor_lib.apex_epsilon(actor_index, num_actors, **kwargs)


class LearnerConfigTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)
    gin.clear_config()
    self.addCleanup(gin.clear_config)

  def test_an_actor_drops_the_learners_sharded_memory(self):
    # The learner's config gives its agent the sharded memory; an actor's
    # agent, built from the same config, must not start shards of its own.
    gin.parse_config(_GIN_CONFIG + (
        'import dopamine_per.distributed.replay\n'
        'WrappedPrioritizedReplayBuffer.wrapped_memory = '
        '@ShardedPrioritizedReplayBuffer()\n'))
    actor_lib._drop_sharded_memory_binding()
    self.assertIsNone(gin.query_parameter(
        'WrappedPrioritizedReplayBuffer.wrapped_memory'))
    # Without the binding (or the wrapper's module) it changes nothing.
    gin.clear_config()
    actor_lib._drop_sharded_memory_binding()
    with self.assertRaises(ValueError):
      gin.query_parameter('WrappedPrioritizedReplayBuffer.wrapped_memory')


class WeightAssignerTest(absltest.TestCase):

  def test_assigns_all_or_nothing(self):
    graph = tf.Graph()
    with graph.as_default():
      a = tf.compat.v1.get_variable('a', initializer=np.zeros((2, 3),
                                                              np.float32))
      b = tf.compat.v1.get_variable('b', initializer=np.zeros(3, np.float32))
      sess = tf.compat.v1.Session(graph=graph)
      sess.run(tf.compat.v1.global_variables_initializer())
    assigner = actor_lib.WeightAssigner(sess, [a, b])
    assigner.assign([np.ones((2, 3)), np.full(3, 2.0)])
    values = actor_lib.read_weights(sess, [a, b])
    np.testing.assert_array_equal(values[0], np.ones((2, 3)))
    np.testing.assert_array_equal(values[1], np.full(3, 2.0))
    with self.assertRaisesRegex(ValueError, r'b.*shape \(4,\)'):
      assigner.assign([np.zeros((2, 3)), np.zeros(4)])
    with self.assertRaisesRegex(ValueError, 'Expected 2 weight arrays'):
      assigner.assign([np.zeros((2, 3))])
    np.testing.assert_array_equal(actor_lib.read_weights(sess, [a])[0],
                                  np.ones((2, 3)))  # Unchanged.


class ActorTest(absltest.TestCase):

  def _start(self, store=None, **kwargs):
    """A sharded memory, and actors writing to it (`kwargs`: 2 by default)
    that pull from `store` (None: a new one); all killed at the end."""
    memory = replay.ShardedPrioritizedReplayBuffer(
        num_shards=2, replay_capacity=4000, batch_size=32,
        num_cpus_per_shard=0.1,
        observation_shape=(4, 1), stack_size=1, update_horizon=3,
        observation_dtype=np.float64, rng=0)  # gym_lib's CartPole constants.
    if store is None:
      store = weights_lib.create_weight_store()
    kwargs.setdefault('num_actors', 2)
    actors = actor_lib.create_actors(
        memory, store, _GIN_CONFIG,
        create_environment_fn=gym_lib.create_gym_environment,
        max_steps_per_episode=_EPISODE_LIMIT, num_cpus_per_actor=0.5, seed=0,
        **kwargs)

    def cleanup():
      for handle in actors + [store]:
        ray.kill(handle)
      memory.close()
    self.addCleanup(cleanup)
    return memory, actors

  def test_actors_write_cartpole_transitions_to_their_shards(self):
    memory, actors = self._start()
    stats0 = ray.get(actors[0].run.remote(150))
    # Stream 0 writes to shard 0 only; the shard holds the finished
    # episodes, one transition per CartPole step (reward 1 per step).
    self.assertEqual(memory.shard_add_counts(),
                     [int(sum(stats0['episode_returns'])), 0])
    self.assertEqual(stats0['steps'], 150)
    self.assertEqual(stats0['total_steps'], 150)
    self.assertEqual(stats0['epsilon'], 0.4)
    self.assertGreaterEqual(len(stats0['episode_returns']),
                            150 // _EPISODE_LIMIT)
    self.assertTrue(all(0 < r <= _EPISODE_LIMIT
                        for r in stats0['episode_returns']))
    self.assertGreater(stats0['steps_per_second'], 0)
    self.assertEqual(stats0['weights_version'], 0)  # Nothing published.
    self.assertFalse(stats0['restarted'])
    stats1 = ray.get(actors[1].run.remote(100))
    self.assertAlmostEqual(stats1['epsilon'], 0.4 ** 8)
    self.assertEqual(memory.shard_add_counts(),
                     [int(sum(stats0['episode_returns'])),
                      int(sum(stats1['episode_returns']))])
    batch = sharded_memories.as_dict(memory, memory.sample_transition_batch())
    self.assertEqual(batch['state'].shape, (32, 4, 1, 1))
    states = batch['state'][:, :, 0, 0]
    # CartPole's observations: cart position in [-2.4, 2.4] and pole angle
    # in [-0.21, 0.21] radians while the episode runs (a little past at its
    # last step).
    self.assertTrue(np.all(np.abs(states[:, 0]) < 4.8))
    self.assertTrue(np.all(np.abs(states[:, 2]) < 0.42))
    self.assertTrue(np.all(np.isin(batch['action'], [0, 1])))
    # 3-step returns of rewards 1, gamma 0.99, cut at terminals.
    returns = np.array([1.0, 1.99, 2.9701])
    distances = np.abs(batch['reward'][:, None] - returns[None, :]).min(1)
    np.testing.assert_allclose(distances, 0.0, atol=1e-5)

  def test_actor_acts_with_the_weights_the_learner_publishes(self):
    # The learner: the same configuration, in this process.
    # Dopamine's configurables, which other tests of the process may have
    # registered, would make the short names ambiguous.
    gin_util.hide_dopamine_configurables(self)
    gin.parse_config(_GIN_CONFIG)
    environment = gym_lib.create_gym_environment()
    sess = tf.compat.v1.Session(graph=tf.Graph())
    with sess.graph.as_default():
      learner = run_experiment.create_agent(sess, environment)
    learner_weights = actor_lib.read_weights(
        sess, actor_lib.online_network_variables(learner, sess.graph))
    zeros = [np.zeros_like(w) for w in learner_weights]
    store = weights_lib.create_weight_store()
    self.assertEqual(weights_lib.publish_weights(store, zeros), 1)
    memory, actors = self._start(store, num_actors=1, weight_pull_period=10,
                                 epsilon_fn=lambda i, n: 0.0)
    stats = ray.get(actors[0].run.remote(100))
    self.assertEqual(stats['weights_version'], 1)
    for value in ray.get(actors[0].weights.remote()):
      np.testing.assert_array_equal(value, 0.0)
    # All-zero weights: equal Q-values, so the greedy action is always 0.
    batch = sharded_memories.as_dict(memory, memory.sample_transition_batch())
    np.testing.assert_array_equal(batch['action'], 0)
    self.assertEqual(weights_lib.publish_weights(store, learner_weights), 2)
    stats = ray.get(actors[0].run.remote(10))
    self.assertEqual(stats['weights_version'], 2)
    for value, expected in zip(ray.get(actors[0].weights.remote()),
                               learner_weights):
      np.testing.assert_array_equal(value, expected)

  def test_killed_actor_is_restarted_and_keeps_writing(self):
    memory, actors = self._start(num_actors=1, max_restarts=1)
    ray.get(actors[0].run.remote(100))
    before = memory.shard_add_counts()[0]
    self.assertGreater(before, 0)
    ray.kill(actors[0], no_restart=False)
    deadline = time.monotonic() + 120
    stats = {'restarted': False}
    # Calls that reach the dying process fail or (before the kill lands)
    # run there; the restarted actor says so.
    while not stats['restarted']:
      self.assertLess(time.monotonic(), deadline)
      try:
        stats = ray.get(actors[0].run.remote(100))
      except ray.exceptions.RayActorError:
        time.sleep(0.5)
    self.assertTrue(stats['restarted'])
    self.assertEqual(stats['total_steps'], 100)  # Fresh counters.
    self.assertGreater(memory.shard_add_counts()[0], before)


if __name__ == '__main__':
  absltest.main()
