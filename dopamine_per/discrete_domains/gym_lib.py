# coding=utf-8
"""Classic-control environments and networks, as Dopamine's ``gym_lib``.

The names of ``dopamine.discrete_domains.gym_lib`` (Dopamine 4.1.2): the
observation bounds and gin constants (``gym_lib.CARTPOLE_OBSERVATION_SHAPE``
...), `create_gym_environment`, `GymPreprocessing` and the networks, which
are `graph_layers.Network` modules as `atari_lib`'s are. Environments come
from ``gymnasium``. What differs from Dopamine (``hidden_units``, the added
networks): docs/compat.md#gym_lib.
"""

import importlib
import itertools
import math
from typing import Optional, Sequence

from absl import logging
import gin
import numpy as np
import tensorflow as tf

from dopamine_per import errors
from dopamine_per.discrete_domains import atari_lib
from dopamine_per.discrete_domains import graph_layers

__all__ = [
    'CARTPOLE_MIN_VALS', 'CARTPOLE_MAX_VALS', 'ACROBOT_MIN_VALS',
    'ACROBOT_MAX_VALS', 'MOUNTAINCAR_MIN_VALS', 'MOUNTAINCAR_MAX_VALS',
    'create_gym_environment', 'GymPreprocessing',
    'BasicDiscreteDomainNetwork', 'CartpoleDQNNetwork',
    'CartpoleRainbowNetwork', 'AcrobotDQNNetwork', 'AcrobotRainbowNetwork',
    'LunarLanderDQNNetwork', 'MountainCarDQNNetwork', 'FourierBasis',
    'FourierDQNNetwork', 'CartpoleFourierDQNNetwork',
    'AcrobotFourierDQNNetwork', 'ImplicitQuantileDomainNetwork',
    'CartpoleImplicitQuantileNetwork', 'AcrobotImplicitQuantileNetwork',
    'MountainCarImplicitQuantileNetwork', 'LunarLanderImplicitQuantileNetwork',
    'LunarLanderRainbowNetwork', 'MountainCarRainbowNetwork',
]

# Bounds used to rescale observations to [-1, 1] (velocities are unbounded in
# the environments; these are Dopamine's practical ranges).
CARTPOLE_MIN_VALS = np.array([-2.4, -5.0, -math.pi / 12.0, -math.pi * 2.0])
CARTPOLE_MAX_VALS = np.array([2.4, 5.0, math.pi / 12.0, math.pi * 2.0])
ACROBOT_MIN_VALS = np.array([-1.0, -1.0, -1.0, -1.0, -5.0, -5.0])
ACROBOT_MAX_VALS = np.array([1.0, 1.0, 1.0, 1.0, 5.0, 5.0])
MOUNTAINCAR_MIN_VALS = np.array([-1.2, -0.07])
MOUNTAINCAR_MAX_VALS = np.array([0.6, 0.07])

# Observation layouts for the agents: (features, 1) with stack size 1.
for _name, _size in (('CARTPOLE', 4), ('ACROBOT', 6), ('LUNAR', 8),
                     ('MOUNTAINCAR', 2)):
  gin.constant('gym_lib.{}_OBSERVATION_SHAPE'.format(_name), (_size, 1))
  gin.constant('gym_lib.{}_OBSERVATION_DTYPE'.format(_name), tf.float64)
  gin.constant('gym_lib.{}_STACK_SIZE'.format(_name), 1)
del _name, _size

_DEFAULT_HIDDEN_UNITS = (512, 512)


def _current_spec(environment_name: str, version: str):
  """Returns the gymnasium spec to make for Dopamine's name and version.

  A version below the newest registered one, which gymnasium has retired
  (Dopamine's ``LunarLander-v2``; gymnasium 1.x has v3), is replaced by the
  newest, with a warning; anything else must be registered as given.

  Raises:
    ValueError: If gymnasium has no such name, or only older versions.
  """
  import gymnasium  # pylint: disable=g-import-not-at-top
  from gymnasium.envs import registration  # pylint: disable=g-import-not-at-top
  requested = '{}-{}'.format(environment_name, version)
  newest = None
  try:
    return gymnasium.spec(requested)
  except gymnasium.error.DeprecatedEnv as e:
    # Gymnasium raises this for a version below the newest registered one
    # (and for a name registered without versions: `newest` stays None).
    namespace, name, _ = registration.parse_env_id(requested)
    latest = registration.find_highest_version(namespace, name)
    if latest is not None:
      newest = registration.get_env_id(namespace, name, latest)
    cause = e
  except gymnasium.error.Error as e:  # Unknown name, version or namespace.
    cause = e
  if newest is None:
    raise ValueError(
        'create_gym_environment: gymnasium {} has no environment {!r} '
        '(environment_name={!r}, version={!r}): {}'.format(
            gymnasium.__version__, requested, environment_name, version,
            cause)) from cause
  logging.warning(
      'create_gym_environment: gymnasium %s no longer provides %s; using %s '
      'instead.', gymnasium.__version__, requested, newest)
  return gymnasium.spec(newest)


def _check_extra_installed(spec) -> None:
  """Raises ImportError naming the ``box2d`` extra if `spec` lacks Box2D.

  Checked first: gymnasium's own message (or a cached import) would not
  name this package's extra.
  """
  entry_point = spec.entry_point  # A class or function needs nothing.
  if not (isinstance(entry_point, str) and
          entry_point.startswith('gymnasium.envs.box2d.')):
    return
  try:
    importlib.import_module('Box2D')
  except ImportError as e:
    raise ImportError("{} needs Box2D ({}): pip install "
                      "'dopamine_per[box2d]'".format(spec.id, e)) from e


@gin.configurable
def create_gym_environment(environment_name: Optional[str] = None,
                           version: str = 'v0'):
  """Creates a gymnasium environment for Dopamine's agents.

  The environment's own time limit is removed: episode lengths are the
  Runner's ``max_steps_per_episode``. A version that gymnasium has retired
  (e.g. ``LunarLander-v2``) is replaced by the newest one, with a warning.

  Args:
    environment_name: str, e.g. 'CartPole' or 'Acrobot'.
    version: str, e.g. 'v1'.

  Returns:
    A `GymPreprocessing` around the environment.

  Raises:
    ArgumentError: If environment_name is None (Dopamine asserts).
    ValueError: If gymnasium has no such environment (see `_current_spec`).
    ImportError: If the environment needs an install extra that is missing
      (LunarLander: ``pip install 'dopamine_per[box2d]'``).
  """
  if environment_name is None:
    raise errors.ArgumentError(
        'create_gym_environment needs an environment_name, got None; e.g. '
        "create_gym_environment.environment_name = 'CartPole'.")
  import gymnasium  # pylint: disable=g-import-not-at-top
  spec = _current_spec(environment_name, version)
  _check_extra_installed(spec)
  env = gymnasium.make(spec)
  # Remove gymnasium's wrappers (TimeLimit, order enforcing, checks).
  return GymPreprocessing(env.unwrapped)


@gin.configurable
class GymPreprocessing(atari_lib.EnvironmentWrapper):
  """Adapts a gymnasium environment to Dopamine's four-value `step`.

  Attributes:
    environment: the gymnasium environment.
    game_over: bool, whether the last step ended the episode (a terminal
      state; a truncation is not a game over).
  """

  def __init__(self, environment):
    self.environment = environment
    self.game_over = False
    self._seed = None

  @property
  def observation_space(self):
    return self.environment.observation_space

  def reset(self) -> np.ndarray:
    """Starts an episode; returns the first observation."""
    seed, self._seed = self._seed, None
    observation, _ = self.environment.reset(seed=seed)
    self.game_over = False
    return observation

  def step(self, action):
    """Returns (observation, reward, game_over, info)."""
    observation, reward, terminated, truncated, info = self.environment.step(
        action)
    info = dict(info)
    info['TimeLimit.truncated'] = bool(truncated and not terminated)
    self.game_over = bool(terminated)
    return observation, reward, self.game_over, info


def _rescaled_inputs(state: tf.Tensor, min_vals, max_vals) -> tf.Tensor:
  """Flattens states to float32, rescaled from the bounds to [-1, 1].

  `min_vals` None: not rescaled.
  """
  x = graph_layers.flatten(tf.cast(state, tf.float32))
  if min_vals is not None:
    low = tf.constant(min_vals, tf.float32)
    high = tf.constant(max_vals, tf.float32)
    x = 2.0 * (x - low) / (high - low) - 1.0
  return x


@gin.configurable
class BasicDiscreteDomainNetwork(graph_layers.Network):
  """A fully connected network on rescaled low-dimensional observations.

  Inputs are rescaled from [min_vals, max_vals] to [-1, 1] when bounds are
  given. With num_atoms None the output is [batch, num_actions] (DQN), else
  [batch, num_actions * num_atoms] (Rainbow).
  """

  def __init__(self, min_vals, max_vals, num_actions: int,
               num_atoms: Optional[int] = None, name: Optional[str] = None,
               activation_fn=tf.nn.relu,
               hidden_units: Sequence[int] = _DEFAULT_HIDDEN_UNITS):
    """Creates the layers.

    Args:
      min_vals: array or None, lower observation bounds.
      max_vals: array or None, upper observation bounds.
      num_actions: int, the number of actions.
      num_atoms: int or None, atoms per action (None: a Q-value per action).
      name: str, the name scope of the variables.
      activation_fn: callable, the hidden layers' activation.
      hidden_units: sequence of int, the hidden layer sizes (Dopamine: two
        layers of 512).
    """
    super().__init__(name=name)
    self.num_actions = num_actions
    self.num_atoms = num_atoms
    self.min_vals = min_vals
    self.max_vals = max_vals
    outputs = num_actions if num_atoms is None else num_actions * num_atoms
    with self.name_scope:
      self.hidden = [graph_layers.Dense(units, activation=activation_fn,
                                        name='fully_connected')
                     for units in hidden_units]
      self.last_layer = graph_layers.Dense(outputs, name='fully_connected')

  def call(self, state: tf.Tensor) -> tf.Tensor:
    """Returns the output layer's values for a batch of states."""
    x = _rescaled_inputs(state, self.min_vals, self.max_vals)
    for layer in self.hidden:
      x = layer(x)
    return self.last_layer(x)


class _DQNDomainNetwork(graph_layers.Network):
  """A `BasicDiscreteDomainNetwork` returning `atari_lib.DQNNetworkType`."""

  _KIND = 'DQN'
  _MIN_VALS = None
  _MAX_VALS = None

  def __init__(self, num_actions: int, name: Optional[str] = None,
               hidden_units: Sequence[int] = _DEFAULT_HIDDEN_UNITS):
    """Creates the network (arguments: `BasicDiscreteDomainNetwork`'s)."""
    super().__init__(name=name)
    self.num_actions = num_actions
    with self.name_scope:
      self.net = BasicDiscreteDomainNetwork(
          self._MIN_VALS, self._MAX_VALS, num_actions,
          hidden_units=hidden_units)

  def call(self, state: tf.Tensor) -> atari_lib.DQNNetworkType:
    return atari_lib.DQNNetworkType(self.net(state))


class _RainbowDomainNetwork(graph_layers.Network):
  """A `BasicDiscreteDomainNetwork` returning `RainbowNetworkType`."""

  _KIND = 'Rainbow'
  _MIN_VALS = None
  _MAX_VALS = None

  def __init__(self, num_actions: int, num_atoms: int, support: tf.Tensor,
               name: Optional[str] = None,
               hidden_units: Sequence[int] = _DEFAULT_HIDDEN_UNITS):
    """Creates the network (arguments: `BasicDiscreteDomainNetwork`'s).

    Args:
      support: tensor [num_atoms], the atoms' values.
    """
    super().__init__(name=name)
    self.num_actions = num_actions
    self.num_atoms = num_atoms
    self.support = support
    with self.name_scope:
      self.net = BasicDiscreteDomainNetwork(
          self._MIN_VALS, self._MAX_VALS, num_actions, num_atoms=num_atoms,
          hidden_units=hidden_units)

  def call(self, state: tf.Tensor) -> atari_lib.RainbowNetworkType:
    return atari_lib.distribution_outputs(
        self.net(state), self.num_actions, self.num_atoms, self.support)


# The IQN networks' default layers (see ImplicitQuantileDomainNetwork).
_IQN_HIDDEN_UNITS = (512, 512, 512)


@gin.configurable
class ImplicitQuantileDomainNetwork(atari_lib.ImplicitQuantileNetworkBase):
  """An implicit quantile network on low-dimensional observations.

  Laid out like `atari_lib.ImplicitQuantileNetwork` with fully connected
  layers: the rescaled observation goes through ``hidden_units[:-1]`` (the
  state embedding), is multiplied by the quantile embedding, then goes
  through a layer of ``hidden_units[-1]`` units and the output layer.
  Kernels are Glorot uniform, as in the other gym networks.
  """

  def __init__(self, min_vals, max_vals, num_actions: int,
               quantile_embedding_dim: int, name: Optional[str] = None,
               activation_fn=tf.nn.relu,
               hidden_units: Sequence[int] = _IQN_HIDDEN_UNITS):
    """Creates the layers.

    Args:
      min_vals: array or None, lower observation bounds (None: inputs are
        not rescaled).
      max_vals: array or None, upper observation bounds.
      num_actions: int, the number of actions.
      quantile_embedding_dim: int, cosine features per quantile level.
      name: str, the name scope of the variables.
      activation_fn: callable, the hidden layers' activation.
      hidden_units: non-empty sequence of int, the hidden layer sizes (the
        last one comes after the quantile product).

    Raises:
      ValueError: If hidden_units is empty or quantile_embedding_dim is not
        positive.
    """
    if not hidden_units:
      raise ValueError('hidden_units must name at least one layer, got '
                       '{!r}'.format(hidden_units))
    super().__init__(quantile_embedding_dim, name=name)
    self.num_actions = num_actions
    self.min_vals = min_vals
    self.max_vals = max_vals
    with self.name_scope:
      self.hidden = [graph_layers.Dense(units, activation=activation_fn,
                                        name='fully_connected')
                     for units in hidden_units[:-1]]
      self.dense1 = graph_layers.Dense(hidden_units[-1],
                                       activation=activation_fn,
                                       name='fully_connected')
      self.last_layer = graph_layers.Dense(num_actions,
                                           name='fully_connected')

  def _embed_state(self, state: tf.Tensor) -> tf.Tensor:
    x = _rescaled_inputs(state, self.min_vals, self.max_vals)
    for layer in self.hidden:
      x = layer(x)
    return x

  def _quantile_head(self, x: tf.Tensor) -> tf.Tensor:
    return self.last_layer(self.dense1(x))


class _BoundedImplicitQuantileNetwork(ImplicitQuantileDomainNetwork):
  """An `ImplicitQuantileDomainNetwork` with its domain's bounds built in."""

  _KIND = 'IQN'
  _MIN_VALS = None
  _MAX_VALS = None

  def __init__(self, num_actions: int, quantile_embedding_dim: int,
               name: Optional[str] = None,
               hidden_units: Sequence[int] = _IQN_HIDDEN_UNITS):
    """Creates the network (see `ImplicitQuantileDomainNetwork`)."""
    super().__init__(self._MIN_VALS, self._MAX_VALS, num_actions,
                     quantile_embedding_dim, name=name,
                     hidden_units=hidden_units)


def _domain_network(base, name: str, domain):
  """Returns a gin-configurable subclass `name` of `base` for one domain.

  `domain` is (label, min_vals, max_vals); bounds None: inputs not rescaled.
  """
  label, min_vals, max_vals = domain
  return gin.configurable(type(name, (base,), {
      '__module__': __name__, '_MIN_VALS': min_vals, '_MAX_VALS': max_vals,
      '__doc__': '{} network for {} (inputs {}).'.format(
          base._KIND, label,  # pylint: disable=protected-access
          'not rescaled' if min_vals is None else 'rescaled to [-1, 1]')}))


_CARTPOLE = ('CartPole', CARTPOLE_MIN_VALS, CARTPOLE_MAX_VALS)
_ACROBOT = ('Acrobot', ACROBOT_MIN_VALS, ACROBOT_MAX_VALS)
_MOUNTAINCAR = ('MountainCar', MOUNTAINCAR_MIN_VALS, MOUNTAINCAR_MAX_VALS)
_LUNARLANDER = ('LunarLander', None, None)
CartpoleDQNNetwork = _domain_network(
    _DQNDomainNetwork, 'CartpoleDQNNetwork', _CARTPOLE)
CartpoleRainbowNetwork = _domain_network(
    _RainbowDomainNetwork, 'CartpoleRainbowNetwork', _CARTPOLE)
CartpoleImplicitQuantileNetwork = _domain_network(
    _BoundedImplicitQuantileNetwork, 'CartpoleImplicitQuantileNetwork',
    _CARTPOLE)
AcrobotDQNNetwork = _domain_network(
    _DQNDomainNetwork, 'AcrobotDQNNetwork', _ACROBOT)
AcrobotRainbowNetwork = _domain_network(
    _RainbowDomainNetwork, 'AcrobotRainbowNetwork', _ACROBOT)
AcrobotImplicitQuantileNetwork = _domain_network(
    _BoundedImplicitQuantileNetwork, 'AcrobotImplicitQuantileNetwork',
    _ACROBOT)
MountainCarDQNNetwork = _domain_network(
    _DQNDomainNetwork, 'MountainCarDQNNetwork', _MOUNTAINCAR)
MountainCarRainbowNetwork = _domain_network(
    _RainbowDomainNetwork, 'MountainCarRainbowNetwork', _MOUNTAINCAR)
MountainCarImplicitQuantileNetwork = _domain_network(
    _BoundedImplicitQuantileNetwork, 'MountainCarImplicitQuantileNetwork',
    _MOUNTAINCAR)
LunarLanderDQNNetwork = _domain_network(
    _DQNDomainNetwork, 'LunarLanderDQNNetwork', _LUNARLANDER)
LunarLanderRainbowNetwork = _domain_network(
    _RainbowDomainNetwork, 'LunarLanderRainbowNetwork', _LUNARLANDER)
LunarLanderImplicitQuantileNetwork = _domain_network(
    _BoundedImplicitQuantileNetwork, 'LunarLanderImplicitQuantileNetwork',
    _LUNARLANDER)


class FourierBasis(object):
  """Cosine Fourier features of order `order` (Konidaris et al., 2011).

  Inputs are rescaled to [0, 1] with the bounds; the constant term is left
  out.
  """

  def __init__(self, nvars: int, min_vals=0, max_vals=None, order: int = 3):
    self.order = order
    self.min_vals = min_vals
    self.max_vals = max_vals
    terms = list(itertools.product(range(order + 1), repeat=nvars))[1:]
    self.multipliers = tf.constant(terms, dtype=tf.float32)

  def scale(self, values: tf.Tensor) -> tf.Tensor:
    shifted = values - self.min_vals
    if self.max_vals is None:
      return shifted
    return shifted / (self.max_vals - self.min_vals)

  def compute_features(self, features: tf.Tensor) -> tf.Tensor:
    scaled = self.scale(features)
    return tf.cos(np.pi * tf.matmul(scaled, self.multipliers,
                                    transpose_b=True))


@gin.configurable
class FourierDQNNetwork(graph_layers.Network):
  """A linear Q-function on Fourier features (Konidaris et al., 2011)."""

  def __init__(self, min_vals, max_vals, num_actions: int,
               fourier_basis_order: int = 3, name: Optional[str] = None):
    super().__init__(name=name)
    self.num_actions = num_actions
    self.fourier_basis_order = fourier_basis_order
    self.min_vals = min_vals
    self.max_vals = max_vals
    self.feature_generator = None
    with self.name_scope:
      self.last_layer = graph_layers.Dense(num_actions, use_bias=False,
                                           name='fully_connected')

  def call(self, state: tf.Tensor) -> atari_lib.DQNNetworkType:
    x = graph_layers.flatten(tf.cast(state, tf.float32))
    if self.feature_generator is None:
      self.feature_generator = FourierBasis(
          int(x.shape[-1]),
          np.asarray(self.min_vals, np.float32),
          np.asarray(self.max_vals, np.float32),
          order=self.fourier_basis_order)
    return atari_lib.DQNNetworkType(
        self.last_layer(self.feature_generator.compute_features(x)))


@gin.configurable
class CartpoleFourierDQNNetwork(FourierDQNNetwork):
  """Fourier-basis linear network for CartPole."""

  def __init__(self, num_actions: int, name: Optional[str] = None):
    super().__init__(CARTPOLE_MIN_VALS, CARTPOLE_MAX_VALS, num_actions,
                     name=name)


@gin.configurable
class AcrobotFourierDQNNetwork(FourierDQNNetwork):
  """Fourier-basis linear network for Acrobot."""

  def __init__(self, num_actions: int, name: Optional[str] = None):
    super().__init__(ACROBOT_MIN_VALS, ACROBOT_MAX_VALS, num_actions,
                     name=name)
