"""Tests for network_variables: TF variables of any network, target sync."""

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from dopamine_per.agents import network_variables
from dopamine_per.discrete_domains import gym_lib
from tests.support import graph_util


class OneLayerModel(tf.keras.Model):
  """A one-layer Keras model (Keras 3 unless TF_USE_LEGACY_KERAS is set)."""

  def __init__(self, name=None):
    super().__init__(name=name)
    self.layer = tf.keras.layers.Dense(3, name='fully_connected')

  def call(self, x):
    return self.layer(x)


def _scoped_function_network(scope):
  """A network that does not track its variables: tf.compat.v1 style."""

  def network(x):
    with tf.compat.v1.variable_scope(scope, reuse=tf.compat.v1.AUTO_REUSE):
      kernel = tf.compat.v1.get_variable('kernel', [2, 3])
      bias = tf.compat.v1.get_variable('bias', [3])
    return tf.matmul(x, kernel) + bias

  return network


class AsTfVariableTest(graph_util.GraphTestCase):

  def test_tf_variable_is_returned_as_is(self):
    variable = tf.Variable(1.0)
    self.assertIs(network_variables.as_tf_variable(variable), variable)

  def test_keras_variable_gives_the_graph_variable_it_wraps(self):
    model = OneLayerModel(name='Online')
    model(tf.zeros([1, 2]))
    graph_variables = tf.compat.v1.global_variables()
    for variable in model.trainable_variables:
      unwrapped = network_variables.as_tf_variable(variable)
      self.assertIsInstance(unwrapped, tf.Variable)
      self.assertTrue(any(unwrapped is v for v in graph_variables))

  def test_other_values_are_refused(self):
    for value in (tf.constant(1.0), np.ones(2), None):
      with self.assertRaisesRegex(TypeError, 'Expected a tf.Variable'):
        network_variables.as_tf_variable(value)


class TrainableTfVariablesTest(graph_util.GraphTestCase):

  def test_keras_model_variables_are_fetchable(self):
    model = OneLayerModel(name='Online')
    model(tf.zeros([1, 2]))
    variables = network_variables.trainable_tf_variables(model, 'Online')
    self.session.run(tf.compat.v1.global_variables_initializer())
    kernel, bias = self.session.run(variables)
    self.assertEqual(kernel.shape, (2, 3))
    np.testing.assert_array_equal(bias, np.zeros(3))

  def test_module_order_is_the_same_for_two_instances(self):
    state = tf.zeros([1, 4, 1, 1])
    first = gym_lib.CartpoleDQNNetwork(2, name='Online', hidden_units=(5,))
    second = gym_lib.CartpoleDQNNetwork(2, name='Target', hidden_units=(5,))
    first(state)
    second(state)
    names = [[v.name.split('/', 1)[1] for v in
              network_variables.trainable_tf_variables(network)]
             for network in (first, second)]
    self.assertEqual(names[0], names[1])
    self.assertLen(names[0], 4)

  def test_untracked_variables_are_found_by_scope(self):
    network = _scoped_function_network('Online')
    network(tf.zeros([1, 2]))
    _scoped_function_network('Target')(tf.zeros([1, 2]))
    variables = network_variables.trainable_tf_variables(network, 'Online')
    self.assertEqual([v.name for v in variables],
                     ['Online/bias:0', 'Online/kernel:0'])
    self.assertEqual(
        network_variables.trainable_tf_variables(network, 'Other'), [])
    self.assertEqual(network_variables.trainable_tf_variables(network), [])

  def test_variables_outside_the_scope_are_logged(self):
    model = OneLayerModel()  # An automatic name, not 'Online'.
    model(tf.zeros([1, 2]))
    with self.assertLogs(level='WARNING') as logs:
      variables = network_variables.trainable_tf_variables(model, 'Online')
    self.assertLen(variables, 2)
    self.assertIn("pass the network's `name`", logs.output[0])


class BuildSyncOpsTest(graph_util.GraphTestCase):

  def test_copies_online_into_target(self):
    online = [tf.Variable(np.arange(3.0)), tf.Variable(np.eye(2))]
    target = [tf.Variable(np.zeros(3)), tf.Variable(np.zeros((2, 2)))]
    ops = network_variables.build_sync_ops(online, target)
    self.session.run(tf.compat.v1.global_variables_initializer())
    self.session.run(ops)
    for o, t in zip(self.session.run(online), self.session.run(target)):
      np.testing.assert_array_equal(o, t)

  def test_mismatches_build_nothing(self):
    cases = [
        ('same, non-zero number', [], []),
        ('same, non-zero number', [tf.Variable(1.0)], []),
        ('does not match', [tf.Variable(np.zeros(3))],
         [tf.Variable(np.zeros(4))]),
        ('does not match', [tf.Variable(np.zeros(3))],
         [tf.Variable(np.zeros(3, np.float32))]),
    ]
    for message, online, target in cases:
      operations = len(self.graph.get_operations())
      with self.assertRaisesRegex(ValueError, message):
        network_variables.build_sync_ops(online, target)
      self.assertLen(self.graph.get_operations(), operations)


if __name__ == '__main__':
  absltest.main()
