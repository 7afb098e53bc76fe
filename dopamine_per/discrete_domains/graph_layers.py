# coding=utf-8
"""Minimal dense and convolutional layers that build in TF1 graph mode.

The networks of `atari_lib` and `gym_lib` are built from these layers, not
Keras layers, so that their variables are the same whichever Keras
``tf.keras`` is (why: docs/compat.md#graph_layers). The layers are
`tf.Module`s whose `tf.Variable`s (``kernel`` and ``bias``, named as
tf-keras names them) are created on the first call, under the module's name
scope, with Keras' default initializers (Glorot uniform kernels, zero
biases), in graph mode or eagerly.

A `Network` creates its layers in its name scope, so that a network named
``Online`` owns variables named ``Online/fully_connected/kernel`` and so on,
and its `trainable_variables` (sorted by attribute name, hence in the same
order for two instances of the same class) pair the online and the target
network's variables.
"""

from typing import Any, Callable, Optional, Sequence, Union

import tensorflow as tf

__all__ = ['Network', 'Dense', 'Conv2D', 'flatten', 'glorot_uniform',
           'variance_scaling_uniform']

Initializer = Callable[..., Any]


def glorot_uniform() -> Initializer:
  """Returns Keras' default kernel initializer (Glorot and Bengio, 2010)."""
  return tf.compat.v1.glorot_uniform_initializer()


def variance_scaling_uniform(scale: float) -> Initializer:
  """Returns a fan-in variance-scaling uniform initializer.

  Args:
    scale: float, the variance scale (e.g. 1/sqrt(3) in Dopamine's Rainbow
      network).
  """
  return tf.compat.v1.variance_scaling_initializer(
      scale=scale, mode='fan_in', distribution='uniform')


def flatten(x: tf.Tensor) -> tf.Tensor:
  """Reshapes [batch, d1, d2, ...] to [batch, d1 * d2 * ...]."""
  static = x.shape[1:]
  if static.is_fully_defined():
    return tf.reshape(x, [-1, static.num_elements()])
  return tf.reshape(x, [tf.shape(x)[0], -1])


class Network(tf.Module):
  """Base class of the agents' networks.

  Subclasses create their layers in `__init__` inside ``with
  self.name_scope:`` and define `call`; calling the network calls `call`.
  Every call shares the same variables.
  """

  def __call__(self, *args, **kwargs):
    return self.call(*args, **kwargs)

  def call(self, *args, **kwargs):
    raise NotImplementedError


class _Layer(tf.Module):
  """A layer whose variables are created on the first call."""

  def __init__(self, activation: Optional[Callable[[tf.Tensor], tf.Tensor]],
               kernel_initializer: Optional[Initializer], use_bias: bool,
               name: str):
    super().__init__(name=name)
    self.activation = activation
    self.kernel_initializer = kernel_initializer or glorot_uniform()
    self.use_bias = use_bias
    self.kernel = None
    self.bias = None

  def _build(self, x: tf.Tensor, kernel_size: Sequence[int], units: int,
             dimension: str) -> None:
    """Creates the kernel [*kernel_size, inputs, units] and the bias.

    Raises:
      ValueError: If x's last dimension (named `dimension`) is unknown.
    """
    if x.shape[-1] is None:
      raise ValueError('{} needs a known {} dimension, got shape {}'.format(
          type(self).__name__, dimension, x.shape))
    kernel_shape = list(kernel_size) + [int(x.shape[-1]), units]
    with self.name_scope:
      self.kernel = tf.Variable(
          lambda: self.kernel_initializer(kernel_shape, dtype=x.dtype),
          name='kernel', dtype=x.dtype)
      if self.use_bias:
        self.bias = tf.Variable(lambda: tf.zeros([units], dtype=x.dtype),
                                name='bias', dtype=x.dtype)

  def _finish(self, x: tf.Tensor) -> tf.Tensor:
    if self.bias is not None:
      x = tf.nn.bias_add(x, self.bias)
    if self.activation is not None:
      x = self.activation(x)
    return x


class Dense(_Layer):
  """A fully connected layer: ``activation(x @ kernel + bias)``."""

  def __init__(self, units: int, activation=None, kernel_initializer=None,
               use_bias: bool = True, name: str = 'fully_connected'):
    """Creates the layer (variables come with the first call).

    Args:
      units: int, the output size.
      activation: callable or None, applied to the output.
      kernel_initializer: a tf.compat.v1 initializer, or None for Glorot
        uniform.
      use_bias: bool, whether to add a bias.
      name: str, the layer's name scope.
    """
    super().__init__(activation, kernel_initializer, use_bias, name)
    self.units = int(units)

  def __call__(self, x: tf.Tensor) -> tf.Tensor:
    if self.kernel is None:
      self._build(x, [], self.units, 'last')
    return self._finish(tf.matmul(x, self.kernel))


class Conv2D(_Layer):
  """A 2-D convolution over NHWC inputs."""

  def __init__(self, filters: int, kernel_size: Union[int, Sequence[int]],
               strides: int = 1, padding: str = 'same', activation=None,
               kernel_initializer=None, use_bias: bool = True,
               name: str = 'Conv'):
    """Creates the layer (variables come with the first call).

    Args:
      filters: int, the number of output channels.
      kernel_size: int or [height, width].
      strides: int, the stride in both spatial dimensions.
      padding: str, 'same' or 'valid'.
      activation: callable or None, as `Dense`'s.
      kernel_initializer: as `Dense`'s.
      use_bias: bool, as `Dense`'s.
      name: str, the layer's name scope.
    """
    super().__init__(activation, kernel_initializer, use_bias, name)
    if isinstance(kernel_size, int):
      kernel_size = (kernel_size, kernel_size)
    self.filters = int(filters)
    self.kernel_size = tuple(int(k) for k in kernel_size)
    self.strides = int(strides)
    self.padding = padding.upper()

  def __call__(self, x: tf.Tensor) -> tf.Tensor:
    if self.kernel is None:
      self._build(x, self.kernel_size, self.filters, 'channel')
    y = tf.nn.conv2d(x, self.kernel, strides=self.strides,
                     padding=self.padding)
    return self._finish(y)
