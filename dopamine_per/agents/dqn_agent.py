# coding=utf-8
"""The DQN agent (Mnih et al., 2015) in TF1 graph mode, as Dopamine's.

`DQNAgent` has the constructor, gin name (``DQNAgent``), defaults and methods
of ``dopamine.tf.agents.dqn.dqn_agent.DQNAgent`` (Dopamine 4.1.2). Its replay
memory is `circular_replay_buffer.WrappedReplayBuffer`, configured through
gin as in Dopamine (``WrappedReplayBuffer.replay_capacity`` ...). Where this
agent, and those that subclass it, differ from Dopamine (networks of either
Keras, time limits, all-or-nothing restores): docs/compat.md#dqn_agent.
"""

import inspect
import math
import os
import random
from typing import Any, Callable, Dict, Optional

from absl import logging
import gin
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2

from dopamine_per import errors
from dopamine_per import external_configurables  # pylint: disable=unused-import
from dopamine_per.agents import network_variables
from dopamine_per.discrete_domains import atari_lib
from dopamine_per.discrete_domains import tf_checkpoint
from dopamine_per.replay_memory import circular_replay_buffer

__all__ = [
    'NATURE_DQN_OBSERVATION_SHAPE',
    'NATURE_DQN_DTYPE',
    'NATURE_DQN_STACK_SIZE',
    'nature_dqn_network',
    'linearly_decaying_epsilon',
    'identity_epsilon',
    'DQNAgent',
    'fast_callable',
]

NATURE_DQN_OBSERVATION_SHAPE = atari_lib.NATURE_DQN_OBSERVATION_SHAPE
NATURE_DQN_DTYPE = atari_lib.NATURE_DQN_DTYPE
NATURE_DQN_STACK_SIZE = atari_lib.NATURE_DQN_STACK_SIZE
nature_dqn_network = atari_lib.NatureDQNNetwork


@gin.configurable
def linearly_decaying_epsilon(decay_period, step, warmup_steps, epsilon):
  """Returns epsilon for Nature DQN's schedule (Mnih et al., 2015).

  1.0 for the first `warmup_steps` steps, then linear down to `epsilon` over
  `decay_period` steps, then `epsilon`.

  Args:
    decay_period: float, steps over which epsilon decreases.
    step: int, training steps so far.
    warmup_steps: int, steps before the decrease starts.
    epsilon: float, the final value.

  Returns:
    float, the exploration rate.
  """
  remaining = decay_period + warmup_steps - step
  bonus = np.clip((1.0 - epsilon) * remaining / decay_period, 0.0,
                  1.0 - epsilon)
  return epsilon + bonus


@gin.configurable
def identity_epsilon(unused_decay_period, unused_step, unused_warmup_steps,
                     epsilon):
  """Returns `epsilon`: a constant exploration rate."""
  return epsilon


def fast_callable(sess, fetches, feeds=(), targets=()):
  """Returns f(*feed_values) -> list of fetched values, for a hot loop.

  Uses the session's callable API (``CallableOptions``), which skips
  `Session.run`'s per-call graph pruning and argument handling, most of a
  small network's cost per call. Falls back to `Session.run` if the API is
  unavailable.

  Args:
    sess: tf.compat.v1.Session.
    fetches: list of tensors to return.
    feeds: list of placeholders, fed positionally.
    targets: list of ops (or tensors) to run without returning them.
  """
  fetches, feeds, targets = list(fetches), list(feeds), list(targets)
  # TensorFlow's private method, its only fast route with feeds: the public
  # `Session.make_callable` calls `Session.run` when given a feed list.
  make = getattr(sess, '_make_callable_from_options', None)
  if make is not None:
    options = config_pb2.CallableOptions()
    options.feed.extend(t.name for t in feeds)
    options.fetch.extend(t.name for t in fetches)
    options.target.extend(t.name for t in targets)
    try:
      return make(options)
    except (AttributeError, TypeError, tf.errors.OpError):
      logging.info('Session callables unavailable; using Session.run.')

  def run(*values):
    return sess.run([fetches, targets], dict(zip(feeds, values)))[0]
  return run


@gin.configurable
class DQNAgent(object):
  """A DQN agent: epsilon-greedy acting, replay, a target network."""

  def __init__(self,
               sess,
               num_actions,
               observation_shape=atari_lib.NATURE_DQN_OBSERVATION_SHAPE,
               observation_dtype=atari_lib.NATURE_DQN_DTYPE,
               stack_size=atari_lib.NATURE_DQN_STACK_SIZE,
               network=atari_lib.NatureDQNNetwork,
               gamma=0.99,
               update_horizon=1,
               min_replay_history=20000,
               update_period=4,
               target_update_period=8000,
               epsilon_fn=linearly_decaying_epsilon,
               epsilon_train=0.01,
               epsilon_eval=0.001,
               epsilon_decay_period=250000,
               tf_device='/cpu:*',
               eval_mode=False,
               use_staging=False,
               max_tf_checkpoints_to_keep=4,
               optimizer=None,
               summary_writer=None,
               summary_writing_frequency=500,
               allow_partial_reload=False):
    """Builds the agent's graph in `sess`'s graph and initializes it.

    Args:
      sess: tf.compat.v1.Session, or None for a new session on a new graph.
      num_actions: int, the number of actions.
      observation_shape: tuple of ints, the shape of one observation.
      observation_dtype: tf.DType of observations (tf.float32/64 for
        continuous inputs).
      stack_size: int, observations per state.
      network: callable(num_actions, name=...) returning a network whose call
        on a state batch returns `atari_lib.DQNNetworkType`: a Keras model
        (either Keras), a `graph_layers.Network` or a `tf.Module`, whose
        variables live under `name` (checkpoints are keyed by their names).
      gamma: float, the discount factor.
      update_horizon: int, n of the n-step return.
      min_replay_history: int, transitions stored before training starts.
      update_period: int, agent steps between training steps.
      target_update_period: int, agent steps between target syncs.
      epsilon_fn: callable(decay_period, step, warmup_steps, epsilon) giving
        the training exploration rate.
      epsilon_train: float, the final training exploration rate.
      epsilon_eval: float, the exploration rate in eval mode.
      epsilon_decay_period: int, steps over which epsilon decays.
      tf_device: str, the device of the graph's ops.
      eval_mode: bool, start in evaluation mode (no storing, no training).
      use_staging: bool, prefetch the next replay batch while training
        (see `circular_replay_buffer.WrappedReplayBuffer`).
      max_tf_checkpoints_to_keep: int, TF checkpoints kept in the directory
        `bundle_and_checkpoint` writes to (the Runner's staging directory).
      optimizer: a tf.compat.v1.train.Optimizer, or None for Dopamine's
        default RMSProp (lr 0.00025, decay 0.95, epsilon 1e-5, centered).
      summary_writer: a tf.compat.v1.summary.FileWriter, a directory (str)
        to create one in, or None for no training summaries.
      summary_writing_frequency: int, training steps between summaries.
      allow_partial_reload: bool, let `unbundle` succeed without the replay
        memory or the bundle.

    Raises:
      errors.ArgumentError: If observation_shape is not a tuple.
      ValueError: If the online and target networks' trainable variables do
        not pair up (count, shapes, dtypes).
      TypeError: If a network variable is neither a tf.Variable nor a Keras
        variable wrapping one.
    """
    if not isinstance(observation_shape, tuple):
      raise errors.ArgumentError(
          'observation_shape must be a tuple, got {!r}'.format(
              observation_shape))
    logging.info('Creating %s agent: gamma %f, update_horizon %d, '
                 'min_replay_history %d, update_period %d, '
                 'target_update_period %d, epsilon_train %f, epsilon_eval %f, '
                 'epsilon_decay_period %d, tf_device %s, use_staging %s',
                 self.__class__.__name__, gamma, update_horizon,
                 min_replay_history, update_period, target_update_period,
                 epsilon_train, epsilon_eval, epsilon_decay_period, tf_device,
                 use_staging)
    self.num_actions = num_actions
    self.observation_shape = tuple(observation_shape)
    self.observation_dtype = tf.as_dtype(observation_dtype)
    self.stack_size = stack_size
    self.network = network
    self.gamma = gamma
    self.update_horizon = update_horizon
    self.cumulative_gamma = math.pow(gamma, update_horizon)
    self.min_replay_history = min_replay_history
    self._min_replay_history_held = False
    self.target_update_period = target_update_period
    self.epsilon_fn = epsilon_fn
    self.epsilon_train = epsilon_train
    self.epsilon_eval = epsilon_eval
    self.epsilon_decay_period = epsilon_decay_period
    self.update_period = update_period
    self.eval_mode = eval_mode
    self.training_steps = 0
    self.summary_writing_frequency = summary_writing_frequency
    self.allow_partial_reload = allow_partial_reload

    if sess is None:
      config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
      config.gpu_options.allow_growth = True
      sess = tf.compat.v1.Session(graph=tf.Graph(), config=config)
    self._sess = sess
    graph = sess.graph

    with graph.as_default():
      self.optimizer = (optimizer if optimizer is not None
                        else self._default_optimizer())
      if isinstance(summary_writer, str):
        self.summary_writer = tf.compat.v1.summary.FileWriter(summary_writer)
      else:
        self.summary_writer = summary_writer
      with tf.device(tf_device):
        state_shape = (1,) + self.observation_shape + (stack_size,)
        self.state = np.zeros(state_shape,
                              self.observation_dtype.as_numpy_dtype)
        self.state_ph = tf.compat.v1.placeholder(
            self.observation_dtype, state_shape, name='state_ph')
        self._replay = self._build_replay_buffer(use_staging)
        # The replay memory's save being written (`bundle_and_checkpoint`).
        self._replay_saving = None
        self._build_networks()
        self._train_op = self._build_train_op()
        self._sync_qt_ops = self._build_sync_op()
      self._merged_summaries = None
      if self.summary_writer is not None:
        self._merged_summaries = tf.compat.v1.summary.merge_all()
      var_map = atari_lib.maybe_transform_variable_names(
          tf.compat.v1.global_variables())
      # Relative paths in TF's `checkpoint` state file: it stays right when
      # the Runner's checkpointer moves it out of its staging directory.
      self._saver = tf.compat.v1.train.Saver(
          var_list=var_map, max_to_keep=max_tf_checkpoints_to_keep,
          save_relative_paths=True)
      if self.summary_writer is not None:
        self.summary_writer.add_graph(graph=graph)
      self._sess.run(tf.compat.v1.global_variables_initializer())
      self._select_greedy = fast_callable(self._sess, [self._q_argmax],
                                          feeds=[self.state_ph])
      self._run_train = self._make_train_callable()
      self._run_sync = fast_callable(self._sess, [], targets=self._sync_qt_ops)

    self._observation = None
    self._last_observation = None
    self.action = None

  # ------------------------------------------------------------ the graph

  def _default_optimizer(self):
    """Dopamine's default: centered RMSProp (Mnih et al., 2015)."""
    return tf.compat.v1.train.RMSPropOptimizer(
        learning_rate=0.00025, decay=0.95, momentum=0.0, epsilon=0.00001,
        centered=True)

  def _create_network(self, name: str):
    """Returns a new network instance whose variables live under `name`."""
    return self.network(self.num_actions, name=name)

  def _build_networks(self) -> None:
    """Creates the online and target networks and their outputs.

    Sets online_convnet, target_convnet, _net_outputs (Q-values of
    `state_ph`), _q_argmax, _replay_net_outputs (online outputs on replayed
    states) and _replay_next_target_net_outputs (target outputs on replayed
    next states).
    """
    self.online_convnet = self._create_network(name='Online')
    self.target_convnet = self._create_network(name='Target')
    self._net_outputs = self.online_convnet(self.state_ph)
    self._q_argmax = tf.argmax(self._net_outputs.q_values, axis=1)[0]
    self._replay_net_outputs = self.online_convnet(self._replay.states)
    self._replay_next_target_net_outputs = self.target_convnet(
        self._replay.next_states)

  # The replay memory class; RainbowAgent's is the prioritized one.
  _replay_buffer_class = circular_replay_buffer.WrappedReplayBuffer

  def _build_replay_buffer(self, use_staging: bool):
    """Returns the agent's replay memory (sized through gin)."""
    return self._replay_buffer_class(
        observation_shape=self.observation_shape,
        stack_size=self.stack_size,
        use_staging=use_staging,
        update_horizon=self.update_horizon,
        gamma=self.gamma,
        observation_dtype=self.observation_dtype.as_numpy_dtype)

  def _build_target_q_op(self) -> tf.Tensor:
    """Returns r + gamma^n * max_a Q_target(s', a), zero past terminals."""
    next_q_max = tf.reduce_max(
        self._replay_next_target_net_outputs.q_values, axis=1)
    not_terminal = 1.0 - tf.cast(self._replay.terminals, tf.float32)
    return (self._replay.rewards +
            self.cumulative_gamma * next_q_max * not_terminal)

  def _build_train_op(self):
    """Returns the op of one Huber-loss training step on a replay batch."""
    chosen_q = tf.reduce_sum(
        self._replay_net_outputs.q_values *
        tf.one_hot(self._replay.actions, self.num_actions, 1.0, 0.0,
                   name='action_one_hot'),
        axis=1, name='replay_chosen_q')
    target = tf.stop_gradient(self._build_target_q_op())
    loss = tf.compat.v1.losses.huber_loss(
        target, chosen_q, reduction=tf.compat.v1.losses.Reduction.NONE)
    if self.summary_writer is not None:
      with tf.compat.v1.variable_scope('Losses'):
        tf.compat.v1.summary.scalar('HuberLoss', tf.reduce_mean(loss))
    return self.optimizer.minimize(tf.reduce_mean(loss))

  def _build_sync_op(self):
    """Returns the ops copying the online weights to the target network."""
    return network_variables.build_sync_ops(
        network_variables.trainable_tf_variables(self.online_convnet,
                                                 'Online'),
        network_variables.trainable_tf_variables(self.target_convnet,
                                                 'Target'))

  def _make_train_callable(self) -> Callable[[], Any]:
    """Returns a callable running one training step."""
    return fast_callable(self._sess, [], targets=[self._train_op])

  # ------------------------------------------------------------- acting

  def begin_episode(self, observation) -> int:
    """Starts an episode: returns the first action.

    Args:
      observation: np.ndarray, the first observation.

    Returns:
      int, the action.
    """
    self._reset_state()
    self._record_observation(observation)
    if not self.eval_mode:
      self._train_step()
    self.action = self._select_action()
    return self.action

  def step(self, reward, observation) -> int:
    """Stores the last transition (training), trains, returns an action.

    Args:
      reward: float, the reward for the previous action.
      observation: np.ndarray, the observation it led to.

    Returns:
      int, the next action.
    """
    self._last_observation = self._observation
    self._record_observation(observation)
    if not self.eval_mode:
      self._store_transition(self._last_observation, self.action, reward,
                             False)
      self._train_step()
    self.action = self._select_action()
    return self.action

  def end_episode(self, reward, terminal=True) -> None:
    """Ends the episode; stores the last transition when training.

    Args:
      reward: float, the last reward.
      terminal: bool, whether the episode reached a terminal state (True, as
        in Dopamine) or was cut short, e.g. by a time limit (False: stored
        as an episode end the memory does not bootstrap from).
    """
    if not self.eval_mode:
      self._store_transition(self._observation, self.action, reward,
                             bool(terminal), episode_end=not terminal)

  def _epsilon(self) -> float:
    if self.eval_mode:
      return self.epsilon_eval
    return self.epsilon_fn(self.epsilon_decay_period, self.training_steps,
                           self.min_replay_history, self.epsilon_train)

  def _select_action(self) -> int:
    """Returns an epsilon-greedy action for the current state."""
    if random.random() <= self._epsilon():
      return random.randint(0, self.num_actions - 1)
    return int(self._select_greedy(self.state)[0])

  def train_step(self) -> None:
    """Runs `step`'s training step alone (`_train_step`, Dopamine's name)."""
    self._train_step()

  def _train_step(self) -> None:
    """Trains every update_period steps once min_replay_history is stored.

    Also writes summaries every summary_writing_frequency steps and syncs
    the target network every target_update_period steps.
    """
    if self.holds_min_replay_history():
      if self.training_steps % self.update_period == 0:
        self._run_train()
        if (self.summary_writer is not None and
            self._merged_summaries is not None and self.training_steps > 0 and
            self.training_steps % self.summary_writing_frequency == 0):
          summary = self._sess.run(self._merged_summaries)
          self.summary_writer.add_summary(summary, self.training_steps)
      if self.training_steps % self.target_update_period == 0:
        self._run_sync()
    self.training_steps += 1

  def holds_min_replay_history(self) -> bool:
    """Whether the memory holds more than min_replay_history transitions.

    A memory's add_count only grows until a checkpoint is loaded, so a True
    answer is kept until then (`unbundle`): a sharded memory would otherwise
    ask its shards on every training step.
    """
    if not self._min_replay_history_held:
      self._min_replay_history_held = bool(
          self._replay.memory.add_count > self.min_replay_history)
    return self._min_replay_history_held

  @property
  def session(self) -> tf.compat.v1.Session:
    """The session the agent's graph runs in (`sess`, or the agent's own)."""
    return self._sess

  @property
  def replay_memory(self) -> Any:
    """The memory the agent stores into and trains on (its wrapper's)."""
    return self._replay.memory

  def _record_observation(self, observation) -> None:
    """Pushes `observation` as the newest frame of the state."""
    self._observation = np.reshape(observation, self.observation_shape)
    self.state = np.roll(self.state, -1, axis=-1)
    self.state[0, ..., -1] = self._observation

  def _store_transition(self, last_observation, action, reward, is_terminal,
                        episode_end=False) -> None:
    """Adds a transition; `episode_end`: cut short here (a time limit)."""
    self._replay.add(last_observation, action, reward, is_terminal,
                     episode_end=episode_end)

  def _reset_state(self) -> None:
    """Zeroes the frame stack."""
    self.state.fill(0)

  # -------------------------------------------------------- checkpoints

  def _bundle_extras(self) -> Dict[str, Any]:
    """Returns what subclasses add to the bundle (plain data)."""
    return {}

  def bundle_and_checkpoint(self, checkpoint_dir: str, iteration_number: int,
                            background: bool = False
                           ) -> Optional[Dict[str, Any]]:
    """Saves the TF variables and the replay memory; returns the rest.

    Args:
      checkpoint_dir: str, an existing directory.
      iteration_number: int, the checkpoint number.
      background: bool, take the replay memory's state now and write it in
        the background (the memory's `save`): `wait_for_checkpoint` waits
        for its files.

    Returns:
      dict of the agent's Python state (``state``, ``training_steps``), or
      None if checkpoint_dir does not exist.
    """
    if not tf.io.gfile.exists(checkpoint_dir):
      return None
    with self._sess.graph.as_default():
      self._saver.save(self._sess, os.path.join(checkpoint_dir, 'tf_ckpt'),
                       global_step=iteration_number, write_meta_graph=False)
    if background and 'background' in inspect.signature(
        self._replay.save).parameters:
      self._replay_saving = self._replay.save(
          checkpoint_dir, iteration_number, background=True)
    else:  # Also a memory with Dopamine's `save`.
      self._replay.save(checkpoint_dir, iteration_number)
    bundle = {'state': self.state, 'training_steps': self.training_steps}
    bundle.update(self._bundle_extras())
    return bundle

  def wait_for_checkpoint(self) -> None:
    """Waits for the replay memory's files of the last background
    `bundle_and_checkpoint`, if any; raises if writing them failed."""
    saving, self._replay_saving = self._replay_saving, None
    if saving is not None:
      saving.result()

  def unbundle(self, checkpoint_dir: str, iteration_number: int,
               bundle_dictionary: Optional[Dict[str, Any]]) -> bool:
    """Restores the agent from `bundle_and_checkpoint`'s files and bundle.

    All or nothing: the TF checkpoint's variables are first checked against
    the graph's (names, shapes, dtypes), the variables are restored, then
    the replay memory is loaded (its `load` changes nothing when it fails);
    if that fails the variables get their previous values back. The Python
    attributes are set last, when nothing can fail any more.

    Args:
      checkpoint_dir: str, the checkpoint directory.
      iteration_number: int, the checkpoint number.
      bundle_dictionary: dict returned by `bundle_and_checkpoint`, or None.

    Returns:
      bool, whether the agent was restored (False, with the agent
      unchanged, when the checkpoint, its replay memory or the bundle is
      missing and allow_partial_reload is False).

    Raises:
      atomic_files.CheckpointError: If the TF checkpoint does not match the
        network or a file is damaged (reading one may also raise TF's
        errors, OSError and others); the agent is unchanged.
    """
    prefix = os.path.join(checkpoint_dir, 'tf_ckpt-{}'.format(iteration_number))
    if not self.allow_partial_reload and (
        bundle_dictionary is None or not tf.io.gfile.exists(prefix + '.index')):
      return False
    with self._sess.graph.as_default():
      variables = tf.compat.v1.global_variables()
      tf_checkpoint.check_tf_checkpoint(
          prefix,
          atari_lib.maybe_transform_variable_names(variables) or variables)
      snapshot = tf_checkpoint.VariableSnapshot(self._sess, variables)
      try:
        self._saver.restore(self._sess, prefix)
        self._min_replay_history_held = False  # The memory may shrink.
        self._replay.load(checkpoint_dir, iteration_number)
      except tf.errors.NotFoundError:
        if not self.allow_partial_reload:
          snapshot.restore()
          return False
        logging.warning('Unable to reload the replay memory.')
      except BaseException:
        snapshot.restore()
        raise
      # The saver is not told of the directory's TF checkpoints: its
      # max_to_keep would delete files a kept completion marker lists.
    if bundle_dictionary is None:
      logging.warning("Unable to reload the agent's Python state.")
    else:
      for key, value in bundle_dictionary.items():
        if key in self.__dict__:
          self.__dict__[key] = value
    return True
