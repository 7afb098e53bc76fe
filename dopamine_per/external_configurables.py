# coding=utf-8
"""Registers TensorFlow's TF1 optimizers with gin, as ``gin.tf`` did.

Dopamine's gin files bind ``@tf.train.AdamOptimizer()`` after
``import gin.tf.external_configurables``, which no longer imports with
current TensorFlow; this module registers the ``tf.compat.v1.train``
optimizers under the same gin names in its place. Importing it twice, or
alongside a working ``gin.tf``, is harmless. The agents import it too
(docs/compat.md#external_configurables).
"""

import gin
import tensorflow as tf

__all__ = ['OPTIMIZERS']

# gin name (under module 'tf.train') -> optimizer class.
OPTIMIZERS = {
    'AdamOptimizer': tf.compat.v1.train.AdamOptimizer,
    'RMSPropOptimizer': tf.compat.v1.train.RMSPropOptimizer,
    'GradientDescentOptimizer': tf.compat.v1.train.GradientDescentOptimizer,
    'MomentumOptimizer': tf.compat.v1.train.MomentumOptimizer,
    'AdagradOptimizer': tf.compat.v1.train.AdagradOptimizer,
}


def _register():
  for name, optimizer in OPTIMIZERS.items():
    try:
      gin.external_configurable(optimizer, name=name, module='tf.train')
    except ValueError:
      pass  # Already registered (e.g. by gin.tf or an earlier import).


_register()
