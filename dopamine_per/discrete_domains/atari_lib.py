# coding=utf-8
"""Atari 2600 environments and networks, as Dopamine's ``atari_lib``.

Same names as ``dopamine.discrete_domains.atari_lib`` (Dopamine 4.1.2): the
Nature DQN constants, the network output types, the networks and
`create_atari_environment` with `AtariPreprocessing` (Machado et al., 2018).
Frames are resized by area averaging (OpenCV's ``INTER_AREA``) with two
small matrix products, so OpenCV is not needed. The environment comes from
``ale-py`` (the ``atari`` install extra), imported only when an environment
is created. The networks are built from `graph_layers`, with Dopamine's
constructors, call signatures, outputs and variable names. What differs
from Dopamine: docs/compat.md#atari_lib.
"""

import collections
from typing import Optional

from absl import logging
import gin
import numpy as np
import tensorflow as tf

from dopamine_per import errors
from dopamine_per.discrete_domains import graph_layers

__all__ = [
    'NATURE_DQN_OBSERVATION_SHAPE',
    'NATURE_DQN_DTYPE',
    'NATURE_DQN_STACK_SIZE',
    'DQNNetworkType',
    'RainbowNetworkType',
    'ImplicitQuantileNetworkType',
    'create_atari_environment',
    'maybe_transform_variable_names',
    'NatureDQNNetwork',
    'RainbowNetwork',
    'ImplicitQuantileNetworkBase',
    'ImplicitQuantileNetwork',
    'cosine_quantile_embedding',
    'AtariPreprocessing',
    'area_resize_matrix',
]

NATURE_DQN_OBSERVATION_SHAPE = (84, 84)  # Downscaled Atari frame, pixels.
NATURE_DQN_DTYPE = tf.uint8  # Atari observations are bytes.
NATURE_DQN_STACK_SIZE = 4  # Frames per state.

# Network outputs. The namedtuple type names are Dopamine's.
DQNNetworkType = collections.namedtuple('dqn_network', ['q_values'])
RainbowNetworkType = collections.namedtuple(
    'c51_network', ['q_values', 'logits', 'probabilities'])
ImplicitQuantileNetworkType = collections.namedtuple(
    'iqn_network', ['quantile_values', 'quantiles'])

# Episodes are cut after 108,000 frames (30 minutes of play), as Machado et
# al. (2018) recommend.
_MAX_FRAMES_PER_EPISODE = 108000


@gin.configurable
def create_atari_environment(game_name: Optional[str] = None,
                             sticky_actions: bool = True):
  """Creates an Atari 2600 game with Dopamine's preprocessing.

  Args:
    game_name: str, the game, e.g. 'Pong' (ALE's ``ALE/Pong-v5``).
    sticky_actions: bool, repeat the previous action with probability 0.25
      (Machado et al., 2018); False for deterministic actions.

  Returns:
    An `AtariPreprocessing` around the ALE environment.

  Raises:
    ArgumentError: If game_name is None (Dopamine asserts).
    ImportError: If ale-py is not installed (the ``atari`` extra).
  """
  if game_name is None:
    raise errors.ArgumentError(
        'create_atari_environment needs a game_name, got None; e.g. '
        "create_atari_environment.game_name = 'Pong'.")
  try:
    import ale_py  # pylint: disable=g-import-not-at-top
    import gymnasium  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        'Atari environments need ale-py and gymnasium: pip install '
        "'dopamine_per[atari]'") from e
  gymnasium.register_envs(ale_py)
  env = gymnasium.make(
      'ALE/{}-v5'.format(game_name),
      repeat_action_probability=0.25 if sticky_actions else 0.0,
      frameskip=1,
      max_num_frames_per_episode=_MAX_FRAMES_PER_EPISODE)
  # Drop gymnasium's wrappers (time limit, order checks): the episode length
  # is limited by the ALE and the Runner.
  return AtariPreprocessing(env.unwrapped)


@gin.configurable(denylist=['variables'])
def maybe_transform_variable_names(variables, legacy_checkpoint_load=False):
  """Maps variables to the names of tf-slim checkpoints, if asked.

  Args:
    variables: list of tf.Variable.
    legacy_checkpoint_load: bool, if True return {slim name: variable}, where
      slim names say 'weights' and 'biases' for 'kernel' and 'bias'.

  Returns:
    dict or None (None: use the variables' own names).
  """
  logging.info('legacy_checkpoint_load: %s', legacy_checkpoint_load)
  if not legacy_checkpoint_load:
    return None
  return {v.op.name.replace('bias', 'biases').replace('kernel', 'weights'): v
          for v in variables}


def _nature_torso(initializer):
  """The three convolutions and the 512-unit layer of Mnih et al. (2015)."""
  relu = tf.nn.relu
  return [
      graph_layers.Conv2D(32, 8, strides=4, activation=relu,
                          kernel_initializer=initializer, name='Conv'),
      graph_layers.Conv2D(64, 4, strides=2, activation=relu,
                          kernel_initializer=initializer, name='Conv'),
      graph_layers.Conv2D(64, 3, strides=1, activation=relu,
                          kernel_initializer=initializer, name='Conv'),
  ], graph_layers.Dense(512, activation=relu, kernel_initializer=initializer,
                        name='fully_connected')


def _run_convs(convs, state):
  """Returns the flattened output of `convs` on frames scaled to [0, 1]."""
  x = tf.cast(state, tf.float32) / 255.0
  for conv in convs:
    x = conv(x)
  return graph_layers.flatten(x)


class NatureDQNNetwork(graph_layers.Network):
  """The convolutional Q-network of Mnih et al. (2015)."""

  def __init__(self, num_actions: int, name: Optional[str] = None):
    """Creates the layers.

    Args:
      num_actions: int, the number of actions.
      name: str, the name scope of the network's variables.
    """
    super().__init__(name=name)
    self.num_actions = num_actions
    with self.name_scope:
      self.convs, self.dense1 = _nature_torso(None)
      self.dense2 = graph_layers.Dense(num_actions, name='fully_connected')

  def call(self, state: tf.Tensor) -> DQNNetworkType:
    """Returns q_values [batch, num_actions] of [batch, 84, 84, stack]."""
    return DQNNetworkType(self.dense2(self.dense1(_run_convs(self.convs,
                                                             state))))


class RainbowNetwork(graph_layers.Network):
  """The Nature network with a categorical return distribution per action.

  Kernels are initialized as in Dopamine's Rainbow network (fan-in variance
  scaling with scale 1/sqrt(3), uniform).
  """

  def __init__(self, num_actions: int, num_atoms: int, support: tf.Tensor,
               name: Optional[str] = None):
    """Creates the layers.

    Args:
      num_actions: int, the number of actions.
      num_atoms: int, atoms of each distribution.
      support: tensor [num_atoms], the atoms' values.
      name: str, the name scope of the network's variables.
    """
    super().__init__(name=name)
    self.num_actions = num_actions
    self.num_atoms = num_atoms
    self.support = support
    initializer = graph_layers.variance_scaling_uniform(1.0 / np.sqrt(3.0))
    with self.name_scope:
      self.convs, self.dense1 = _nature_torso(initializer)
      self.dense2 = graph_layers.Dense(num_actions * num_atoms,
                                       kernel_initializer=initializer,
                                       name='fully_connected')

  def call(self, state: tf.Tensor) -> RainbowNetworkType:
    """Returns the distributions of a batch [batch, 84, 84, stack].

    q_values is [batch, num_actions]; logits and probabilities are
    [batch, num_actions, num_atoms].
    """
    x = self.dense2(self.dense1(_run_convs(self.convs, state)))
    return distribution_outputs(x, self.num_actions, self.num_atoms,
                                self.support)


def distribution_outputs(x: tf.Tensor, num_actions: int, num_atoms: int,
                         support: tf.Tensor) -> RainbowNetworkType:
  """Turns [batch, num_actions * num_atoms] logits into Rainbow outputs."""
  logits = tf.reshape(x, [-1, num_actions, num_atoms])
  probabilities = tf.nn.softmax(logits)
  q_values = tf.reduce_sum(support * probabilities, axis=2)
  return RainbowNetworkType(q_values, logits, probabilities)


def cosine_quantile_embedding(quantiles: tf.Tensor,
                              embedding_dim: int) -> tf.Tensor:
  """Returns cos(pi * i * tau) for i = 1..embedding_dim (Dabney et al., 2018).

  The fixed part of IQN's quantile embedding (equation 4 of the paper; a
  learned ReLU layer follows it in the network).

  Args:
    quantiles: float tensor [n, 1], the sampled quantile levels tau.
    embedding_dim: int, the number of cosine features (n in the paper).

  Returns:
    float tensor [n, embedding_dim].
  """
  frequencies = np.pi * tf.range(1, embedding_dim + 1, dtype=tf.float32)
  return tf.cos(quantiles * frequencies[None, :])


class ImplicitQuantileNetworkBase(graph_layers.Network):
  """What every implicit quantile network shares (Dabney et al., 2018).

  A call ``network(state, num_quantiles)`` embeds the states with
  `_embed_state` ([batch, d]), draws ``num_quantiles`` levels tau ~ U(0, 1)
  per state, embeds each with `cosine_quantile_embedding` and a ReLU layer
  of width d (``dense_quantile``, created on the first call because d is
  only known then), multiplies the two embeddings elementwise and maps the
  product to one value per action with `_quantile_head`.

  Outputs follow Dopamine's layout, quantile-major: row ``q * batch + b``
  holds the q-th sampled level of state b.
  """

  def __init__(self, quantile_embedding_dim: int,
               kernel_initializer: Optional[graph_layers.Initializer] = None,
               name: Optional[str] = None):
    """Sets up the quantile embedding; subclasses add their layers.

    Args:
      quantile_embedding_dim: int, cosine features per quantile level.
      kernel_initializer: the kernel initializer of the quantile layer, or
        None for Glorot uniform.
      name: str, the name scope of the network's variables.

    Raises:
      ValueError: If quantile_embedding_dim is not positive.
    """
    super().__init__(name=name)
    if quantile_embedding_dim < 1:
      raise ValueError('quantile_embedding_dim must be positive, got '
                       '{!r}'.format(quantile_embedding_dim))
    self.quantile_embedding_dim = int(quantile_embedding_dim)
    self._quantile_initializer = kernel_initializer
    self.dense_quantile = None

  def _embed_state(self, state: tf.Tensor) -> tf.Tensor:
    """Returns the [batch, d] embedding of a batch of states."""
    raise NotImplementedError

  def _quantile_head(self, x: tf.Tensor) -> tf.Tensor:
    """Maps [n, d] state-and-quantile embeddings to [n, num_actions]."""
    raise NotImplementedError

  def call(self, state: tf.Tensor,
           num_quantiles: int) -> ImplicitQuantileNetworkType:
    """Returns sampled quantile values of a batch of states.

    Args:
      state: tensor [batch, ...], the states.
      num_quantiles: int, levels sampled per state.

    Returns:
      ImplicitQuantileNetworkType: quantile_values
      [num_quantiles * batch, num_actions] (float32) and quantiles
      [num_quantiles * batch, 1] (float32), quantile-major.
    """
    state_embedding = self._embed_state(state)
    batch_size = state_embedding.shape[0]
    if batch_size is None:
      batch_size = tf.shape(state_embedding)[0]
    quantiles = tf.random.uniform([num_quantiles * batch_size, 1],
                                  minval=0.0, maxval=1.0, dtype=tf.float32)
    if self.dense_quantile is None:
      with self.name_scope:
        self.dense_quantile = graph_layers.Dense(
            int(state_embedding.shape[-1]), activation=tf.nn.relu,
            kernel_initializer=self._quantile_initializer, name='dense')
    quantile_embedding = self.dense_quantile(
        cosine_quantile_embedding(quantiles, self.quantile_embedding_dim))
    x = tf.tile(state_embedding, [num_quantiles, 1]) * quantile_embedding
    return ImplicitQuantileNetworkType(self._quantile_head(x), quantiles)


class ImplicitQuantileNetwork(ImplicitQuantileNetworkBase):
  """Dopamine's Atari IQN: the Nature convolutions, then the quantile product.

  Kernels are initialized as in Dopamine's (fan-in variance scaling with
  scale 1/sqrt(3), uniform).
  """

  def __init__(self, num_actions: int, quantile_embedding_dim: int,
               name: Optional[str] = None):
    """Creates the layers.

    Args:
      num_actions: int, the number of actions.
      quantile_embedding_dim: int, cosine features per quantile level.
      name: str, the name scope of the network's variables.
    """
    initializer = graph_layers.variance_scaling_uniform(1.0 / np.sqrt(3.0))
    super().__init__(quantile_embedding_dim, kernel_initializer=initializer,
                     name=name)
    self.num_actions = num_actions
    with self.name_scope:
      self.convs, self.dense1 = _nature_torso(initializer)
      self.dense2 = graph_layers.Dense(num_actions,
                                       kernel_initializer=initializer,
                                       name='fully_connected')

  def _embed_state(self, state: tf.Tensor) -> tf.Tensor:
    return _run_convs(self.convs, state)

  def _quantile_head(self, x: tf.Tensor) -> tf.Tensor:
    return self.dense2(self.dense1(x))


def area_resize_matrix(source: int, target: int) -> np.ndarray:
  """Returns the [target, source] matrix of an area-averaging resize.

  Row i weights every source pixel by its overlap with output pixel i's span
  ``[i * source / target, (i + 1) * source / target)``, divided by the span's
  length, so rows sum to 1. For a downscale this is OpenCV's ``INTER_AREA``.

  Args:
    source: int, the source length in pixels.
    target: int, the target length in pixels.
  """
  scale = source / target
  starts = np.arange(target)[:, None] * scale
  ends = starts + scale
  pixels = np.arange(source)[None, :]
  overlap = np.clip(np.minimum(ends, pixels + 1) - np.maximum(starts, pixels),
                    0.0, None)
  return (overlap / scale).astype(np.float32)


class EnvironmentWrapper(object):
  """What a Dopamine environment wrapper passes through to `environment`.

  Subclasses set `self.environment` and define the observation space, the
  seeding, `reset` and `step`.
  """

  environment = None

  @property
  def action_space(self):
    return self.environment.action_space

  @property
  def reward_range(self):
    return getattr(self.environment, 'reward_range', (-np.inf, np.inf))

  @property
  def metadata(self):
    return self.environment.metadata

  def seed(self, seed: Optional[int]) -> None:
    """Seeds the next reset (later resets continue the same stream)."""
    self._seed = seed  # pylint: disable=attribute-defined-outside-init

  def close(self):
    return self.environment.close()


@gin.configurable
class AtariPreprocessing(EnvironmentWrapper):
  """Dopamine's Atari preprocessing around an ALE gymnasium environment.

  Frame skipping, max-pooling of the last two grayscale frames, area resize
  to a square, and optionally a terminal signal on every lost life
  (Mnih et al., 2015; Machado et al., 2018).

  Attributes:
    environment: the wrapped gymnasium environment (its ``ale`` attribute is
      the ALE interface).
    game_over: bool, whether the last step ended the game.
    lives: int, lives left after the last step.
  """

  def __init__(self, environment, frame_skip: int = 4,
               terminal_on_life_loss: bool = False, screen_size: int = 84):
    """Wraps an environment.

    Args:
      environment: a gymnasium ALE environment (with ``ale``, or whose
        ``unwrapped`` has it).
      frame_skip: int, frames per agent step.
      terminal_on_life_loss: bool, report a terminal when a life is lost.
      screen_size: int, side of the square output frame.

    Raises:
      ValueError: If frame_skip or screen_size is not positive.
    """
    if frame_skip <= 0:
      raise ValueError(
          'frame_skip must be positive, got {}'.format(frame_skip))
    if screen_size <= 0:
      raise ValueError(
          'screen_size must be positive, got {}'.format(screen_size))
    self.environment = environment
    self.frame_skip = frame_skip
    self.terminal_on_life_loss = terminal_on_life_loss
    self.screen_size = screen_size
    self._ale = getattr(environment, 'ale', None)
    if self._ale is None:
      self._ale = environment.unwrapped.ale
    height, width = self.environment.observation_space.shape[:2]
    self.screen_buffer = [np.zeros((height, width), np.uint8),
                          np.zeros((height, width), np.uint8)]
    self._rows = area_resize_matrix(height, screen_size)
    self._columns = area_resize_matrix(width, screen_size).T.copy()
    self.game_over = False
    self.lives = 0
    self._seed = None

  @property
  def observation_space(self):
    import gymnasium  # pylint: disable=g-import-not-at-top
    return gymnasium.spaces.Box(low=0, high=255, dtype=np.uint8,
                                shape=(self.screen_size, self.screen_size, 1))

  def reset(self) -> np.ndarray:
    """Starts a new game; returns the first [84, 84, 1] observation."""
    seed, self._seed = self._seed, None
    self.environment.reset(seed=seed)
    self.lives = self._ale.lives()
    self.game_over = False
    self._ale.getScreenGrayscale(self.screen_buffer[0])
    self.screen_buffer[1].fill(0)
    return self._pool_and_resize()

  def render(self, mode='rgb_array'):
    del mode
    return self.environment.render()

  def step(self, action):
    """Plays `action` for frame_skip frames.

    Fewer frames are played when the game (or, with terminal_on_life_loss, a
    life) ends first.

    Args:
      action: int, the action.

    Returns:
      (observation [84, 84, 1] uint8, summed reward, is_terminal, info).
    """
    total_reward = 0.0
    is_terminal = game_over = False
    info = {}
    for frame in range(self.frame_skip):
      _, reward, terminated, truncated, info = self.environment.step(action)
      total_reward += reward
      game_over = terminated or truncated
      if self.terminal_on_life_loss:
        lives = self._ale.lives()
        is_terminal = game_over or lives < self.lives
        self.lives = lives
      else:
        is_terminal = game_over
      pool_slot = frame - (self.frame_skip - 2)
      if pool_slot >= 0:
        self._ale.getScreenGrayscale(self.screen_buffer[pool_slot])
      if is_terminal:
        break
    self.game_over = game_over
    return self._pool_and_resize(), total_reward, is_terminal, info

  def _pool_and_resize(self) -> np.ndarray:
    frame = self.screen_buffer[0]
    if self.frame_skip > 1:
      frame = np.maximum(self.screen_buffer[0], self.screen_buffer[1])
    resized = self._rows @ frame.astype(np.float32) @ self._columns
    return np.clip(np.rint(resized), 0, 255).astype(np.uint8)[:, :, None]
