# coding=utf-8
"""The TensorFlow variables of an agent's network, whatever built it.

A network's ``trainable_variables`` hold `tf.Variable`s, or Keras 3
variables that each wrap the `tf.Variable` the graph, the optimizer and the
`Saver` use; a network that tracks none (a function creating
``tf.compat.v1`` variables) has them under its name scope.
"""

import os
from typing import Any, List, Sequence

from absl import logging
import tensorflow as tf

__all__ = ['as_tf_variable', 'trainable_tf_variables', 'build_sync_ops']


def as_tf_variable(variable: Any) -> tf.Variable:
  """Returns the `tf.Variable` that `variable` is or wraps.

  Args:
    variable: a `tf.Variable`, or a Keras 3 variable on the TF backend.

  Raises:
    TypeError: If `variable` is neither, e.g. a Keras 3 variable of another
      backend, one not yet built, or one read inside a mixed-precision
      autocast scope (where ``value`` is a cast tensor).
  """
  if isinstance(variable, tf.Variable):
    return variable
  value = getattr(variable, 'value', None)
  if isinstance(value, tf.Variable):
    return value
  raise TypeError(
      'Expected a tf.Variable or a Keras variable wrapping one (TensorFlow '
      'backend), got {!r} of type {}'.format(variable, type(variable).__name__))


def trainable_tf_variables(network: Any, scope: str = '') -> List[tf.Variable]:
  """Returns the trainable `tf.Variable`s of a built network, in its order.

  The order is that of the network's ``trainable_variables`` (for Keras,
  the order its layers were assigned; for a `tf.Module`, sorted by attribute
  name), so two instances of the same class list matching variables in the
  same positions.

  Args:
    network: a called (built) network: a Keras model of either Keras, a
      `tf.Module`, or any callable.
    scope: str, the network's name (the agents' ``Online`` and ``Target``),
      relative to the current name scope. When the network lists no
      variables, the default graph's trainable variables under this scope
      are returned, sorted by name; otherwise a warning is logged if a
      variable's name is outside it (checkpoints are keyed by names).

  Returns:
    list of tf.Variable (empty when nothing is found).

  Raises:
    TypeError: If a listed variable is not, and does not wrap, a tf.Variable.
  """
  prefix = os.path.join(
      tf.compat.v1.get_default_graph().get_name_scope(), scope) + '/'
  listed = getattr(network, 'trainable_variables', None)
  if listed:
    variables = [as_tf_variable(v) for v in listed]
    outside = [v.name for v in variables if not v.name.startswith(prefix)]
    if scope and outside:
      logging.warning(
          'Variables of network %r are outside its name scope %r (e.g. %s); '
          'pass the network\'s `name` to its base class so that checkpoints '
          'restore in another agent.', scope, prefix, outside[0])
    return variables
  if not scope:
    return []
  found = tf.compat.v1.get_collection(
      tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES, scope=prefix)
  return sorted(found, key=lambda v: v.name)


def build_sync_ops(online: Sequence[tf.Variable],
                   target: Sequence[tf.Variable]) -> List[tf.Operation]:
  """Returns ops copying each online variable into its target partner.

  Variables are paired by position (see `trainable_tf_variables`); the
  assign ops use ``use_locking=True``, as Dopamine's.

  Args:
    online: tf.Variables of the online network.
    target: tf.Variables of the target network, in the same order.

  Raises:
    ValueError: If the lists are empty, differ in length, or a pair differs
      in shape or dtype; nothing is built then.
  """
  if not online or len(online) != len(target):
    raise ValueError(
        'The online and target networks must have the same, non-zero number '
        'of trainable variables; got {} and {}.'.format(len(online),
                                                        len(target)))
  for o, t in zip(online, target):
    if o.shape != t.shape or o.dtype != t.dtype:
      raise ValueError(
          'Online variable {} ({}, {}) does not match target variable {} '
          '({}, {}).'.format(o.name, o.shape, o.dtype.name, t.name, t.shape,
                             t.dtype.name))
  return [t.assign(o, use_locking=True) for o, t in zip(online, target)]
