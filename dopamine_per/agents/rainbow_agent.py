# coding=utf-8
"""Dopamine's simplified Rainbow agent (Hessel et al., 2018), TF1 graph mode.

`RainbowAgent` has the constructor, gin name (``RainbowAgent``), defaults and
methods of ``dopamine.tf.agents.rainbow.rainbow_agent.RainbowAgent``
(Dopamine 4.1.2): a categorical return distribution (C51, Bellemare et al.,
2017) projected with `project_distribution`, n-step returns and prioritized
replay (Schaul et al., 2015) through
`prioritized_replay_buffer.WrappedPrioritizedReplayBuffer`. With
``replay_scheme='uniform'`` every transition gets priority 1 and the loss is
not reweighted; that plus ``update_horizon=1`` is C51.

Priorities are (loss + 1e-10) ** ``priority_exponent`` (alpha) and the loss
weights (probability + 1e-10) ** -beta over the batch maximum, beta starting
at ``importance_sampling_exponent`` (optionally annealed to 1); the defaults
(0.5, 0.5, fixed) are Dopamine's sqrt(loss) and 1 / sqrt(priority). What
differs from Dopamine (these exponents, ``vmin``):
docs/compat.md#rainbow_agent.
"""

from typing import Any, Callable, Tuple

import gin
import numpy as np
import tensorflow as tf

from dopamine_per.agents import dqn_agent
from dopamine_per.discrete_domains import atari_lib
from dopamine_per.replay_memory import prioritized_replay_buffer

__all__ = ['RainbowAgent', 'project_distribution']

# Added to losses and priorities so that no priority is 0 and no weight
# infinite (Dopamine's constant).
_EPSILON = 1e-10


@gin.configurable
class RainbowAgent(dqn_agent.DQNAgent):
  """C51 + n-step returns + prioritized replay (Dopamine's Rainbow)."""

  def __init__(self,
               sess,
               num_actions,
               observation_shape=dqn_agent.NATURE_DQN_OBSERVATION_SHAPE,
               observation_dtype=dqn_agent.NATURE_DQN_DTYPE,
               stack_size=dqn_agent.NATURE_DQN_STACK_SIZE,
               network=atari_lib.RainbowNetwork,
               num_atoms=51,
               vmin=None,
               vmax=10.0,
               gamma=0.99,
               update_horizon=1,
               min_replay_history=20000,
               update_period=4,
               target_update_period=8000,
               epsilon_fn=dqn_agent.linearly_decaying_epsilon,
               epsilon_train=0.01,
               epsilon_eval=0.001,
               epsilon_decay_period=250000,
               replay_scheme='prioritized',
               tf_device='/cpu:*',
               use_staging=False,
               optimizer=None,
               summary_writer=None,
               summary_writing_frequency=500,
               priority_exponent=0.5,
               importance_sampling_exponent=0.5,
               importance_sampling_anneal_steps=None):
    """Builds the agent's graph in `sess`'s graph and initializes it.

    Args:
      sess, num_actions, observation_shape, observation_dtype, stack_size,
        gamma, update_horizon, min_replay_history, update_period,
        target_update_period, epsilon_fn, epsilon_train, epsilon_eval,
        epsilon_decay_period, tf_device, use_staging, summary_writer,
        summary_writing_frequency: as `dqn_agent.DQNAgent`'s.
      network: callable(num_actions, num_atoms, support, name=...) returning
        a network whose call returns `atari_lib.RainbowNetworkType` (see
        `dqn_agent.DQNAgent`).
      num_atoms: int, atoms of the return distribution.
      vmin: float or None, the smallest atom; None means -vmax.
      vmax: float, the largest atom.
      replay_scheme: str, 'prioritized' or 'uniform'.
      optimizer: a tf.compat.v1.train.Optimizer, or None for Dopamine's
        default Adam (lr 0.00025, epsilon 0.0003125).
      priority_exponent: float, alpha of Schaul et al. (2015): new
        priorities are (loss + 1e-10) ** alpha. Default 0.5 (Dopamine).
      importance_sampling_exponent: float, beta (the starting beta when
        annealed): loss weights are priority ** -beta, normalized by the
        batch maximum. Default 0.5 (Dopamine).
      importance_sampling_anneal_steps: int or None; if set, beta rises
        linearly to 1 over this many training steps (Schaul et al., 2015).

    Raises:
      ValueError: If replay_scheme is not 'prioritized' or 'uniform', or an
        exponent is out of range.
      errors.ArgumentError: If observation_shape is not a tuple (see
        `dqn_agent.DQNAgent` for the network errors).
    """
    if replay_scheme not in ('uniform', 'prioritized'):
      raise ValueError('Invalid replay scheme: {}'.format(replay_scheme))
    if priority_exponent < 0:
      raise ValueError('priority_exponent must be >= 0, got {}'.format(
          priority_exponent))
    if not 0.0 <= importance_sampling_exponent <= 1.0:
      raise ValueError('importance_sampling_exponent must be in [0, 1], got '
                       '{}'.format(importance_sampling_exponent))
    if (importance_sampling_anneal_steps is not None and
        importance_sampling_anneal_steps <= 0):
      raise ValueError('importance_sampling_anneal_steps must be positive or '
                       'None, got {}'.format(importance_sampling_anneal_steps))
    vmax = float(vmax)
    self._num_atoms = num_atoms
    self._vmin = -vmax if vmin is None else float(vmin)
    self._vmax = vmax
    if not self._vmin < self._vmax:
      raise ValueError('vmin ({}) must be below vmax ({})'.format(
          self._vmin, self._vmax))
    self._replay_scheme = replay_scheme
    self.priority_exponent = float(priority_exponent)
    self.importance_sampling_exponent = float(importance_sampling_exponent)
    self.importance_sampling_anneal_steps = importance_sampling_anneal_steps
    super().__init__(
        sess=sess,
        num_actions=num_actions,
        observation_shape=observation_shape,
        observation_dtype=observation_dtype,
        stack_size=stack_size,
        network=network,
        gamma=gamma,
        update_horizon=update_horizon,
        min_replay_history=min_replay_history,
        update_period=update_period,
        target_update_period=target_update_period,
        epsilon_fn=epsilon_fn,
        epsilon_train=epsilon_train,
        epsilon_eval=epsilon_eval,
        epsilon_decay_period=epsilon_decay_period,
        tf_device=tf_device,
        use_staging=use_staging,
        optimizer=optimizer,
        summary_writer=summary_writer,
        summary_writing_frequency=summary_writing_frequency)

  # ------------------------------------------------------------ the graph

  def _default_optimizer(self):
    """Dopamine's default for Rainbow: Adam, lr 0.00025, epsilon 0.0003125."""
    return tf.compat.v1.train.AdamOptimizer(learning_rate=0.00025,
                                            epsilon=0.0003125)

  def _create_network(self, name: str):
    return self.network(self.num_actions, self._num_atoms, self._support,
                        name=name)

  def _build_networks(self) -> None:
    self._support = tf.linspace(self._vmin, self._vmax, self._num_atoms)
    super()._build_networks()

  # Both replay schemes use the prioritized memory; 'uniform' stores every
  # transition with priority 1 and never changes it.
  _replay_buffer_class = (
      prioritized_replay_buffer.WrappedPrioritizedReplayBuffer)

  def _build_target_distribution(self) -> tf.Tensor:
    """Returns the projected C51 target (Bellemare et al., 2017).

    The target support is r + gamma^n * z (just r past a terminal), weighted
    by the target network's distribution for its greedy next action, then
    projected onto the agent's support.
    """
    batch_size = self._replay.batch_size
    rewards = tf.cast(self._replay.rewards, tf.float32)[:, None]
    not_terminal = 1.0 - tf.cast(self._replay.terminals, tf.float32)
    discounts = (self.cumulative_gamma * not_terminal)[:, None]
    target_support = rewards + discounts * self._support[None, :]
    next_outputs = self._replay_next_target_net_outputs
    next_actions = tf.argmax(next_outputs.q_values, axis=1,
                             output_type=tf.int32)
    next_probabilities = tf.gather(next_outputs.probabilities, next_actions,
                                   axis=1, batch_dims=1)
    next_probabilities.set_shape([batch_size, self._num_atoms])
    return project_distribution(target_support, next_probabilities,
                                self._support)

  def _importance_sampling_exponent_value(self) -> float:
    """Returns beta for the current training step."""
    beta = self.importance_sampling_exponent
    steps = self.importance_sampling_anneal_steps
    if steps is None:
      return beta
    return beta + (1.0 - beta) * min(1.0, self.training_steps / float(steps))

  def _build_train_op(self):
    """Returns (train op, per-transition loss) for one replay batch."""
    target_distribution = tf.stop_gradient(self._build_target_distribution())
    actions = tf.cast(self._replay.actions, tf.int32)
    chosen_logits = tf.gather(self._replay_net_outputs.logits, actions,
                              axis=1, batch_dims=1)
    loss = tf.nn.softmax_cross_entropy_with_logits(
        labels=target_distribution, logits=chosen_logits)
    return self._minimize_with_priorities(loss, 'CrossEntropyLoss')

  def _minimize_with_priorities(self, loss: tf.Tensor, summary_name: str
                               ) -> Tuple[tf.Operation, tf.Tensor]:
    """Returns (train op, loss) minimizing a per-transition loss.

    With 'prioritized' replay it sets the sampled transitions' priorities
    from the loss and weights the loss (see the module docstring); with
    'uniform', neither. Sets _unweighted_loss, _new_priorities (None for
    'uniform') and _beta_ph, which the training callable feeds.

    Args:
      loss: float tensor [batch], each transition's loss.
      summary_name: str, the tag of its mean under ``Losses/``.
    """
    self._unweighted_loss = loss
    self._new_priorities = None
    self._beta_ph = tf.compat.v1.placeholder_with_default(
        tf.constant(self.importance_sampling_exponent, tf.float32), [],
        name='importance_sampling_exponent')
    update_priorities_op = tf.no_op()
    if self._replay_scheme == 'prioritized':
      probabilities = self._replay.transition['sampling_probabilities']
      weights = tf.pow(probabilities + _EPSILON, -self._beta_ph)
      weights /= tf.reduce_max(weights)
      self._new_priorities = tf.pow(loss + _EPSILON, self.priority_exponent)
      update_priorities_op = self._replay.tf_set_priority(
          self._replay.indices, self._new_priorities)
      loss = weights * loss
    with tf.control_dependencies([update_priorities_op]):
      if self.summary_writer is not None:
        with tf.compat.v1.variable_scope('Losses'):
          tf.compat.v1.summary.scalar(summary_name, tf.reduce_mean(loss))
      return self.optimizer.minimize(tf.reduce_mean(loss)), loss

  def _make_train_callable(self) -> Callable[[], Any]:
    run = dqn_agent.fast_callable(self._sess, [], feeds=[self._beta_ph],
                                  targets=[self._train_op[0]])
    return lambda: run(np.float32(self._importance_sampling_exponent_value()))

  # ------------------------------------------------------------- acting

  def _store_transition(self, last_observation, action, reward, is_terminal,
                        priority=None, episode_end=False) -> None:
    """Adds a transition with a priority to the replay memory.

    `priority` None is 1 for 'uniform' and, for 'prioritized', the largest
    priority so far (the memory's `add` reads it itself).
    """
    if priority is None and self._replay_scheme == 'uniform':
      priority = 1.0
    if not self.eval_mode:
      self._replay.add(last_observation, action, reward, is_terminal,
                       priority, episode_end=episode_end)


def project_distribution(supports, weights, target_support,
                         validate_args=False):
  """Projects distributions on `supports` onto `target_support`.

  Each row's mass at supports[b, j] is split between the two atoms of
  target_support around it, in proportion to proximity; mass outside
  [target_support[0], target_support[-1]] goes to the nearest end
  (equation 7 of Bellemare et al., 2017):

    projection[b, i] = sum_j clip(1 - |clip(supports[b, j]) - z_i| / dz,
                                  0, 1) * weights[b, j]

  Dopamine's function, with its static shape checks and ``validate_args``
  assertions, computed without building the [batch, atoms, atoms] tiled
  tensor twice.

  Args:
    supports: float tensor [batch_size, num_dims], each row's atoms.
    weights: float tensor [batch_size, num_dims], each atom's mass (need not
      be probabilities).
    target_support: float tensor [num_dims], increasing and evenly spaced.
    validate_args: bool, add run-time assertions that the shapes agree and
      target_support is increasing and evenly spaced.

  Returns:
    float tensor [batch_size, num_dims], the projected masses.

  Raises:
    ValueError: If the static shapes are incompatible: supports and weights
      differ, a row of supports does not match target_support, or
      target_support is not a vector.
  """
  target_support_deltas = target_support[1:] - target_support[:-1]
  delta_z = target_support_deltas[0]
  supports.shape.assert_is_compatible_with(weights.shape)
  supports[0].shape.assert_is_compatible_with(target_support.shape)
  target_support.shape.assert_has_rank(1)
  checks = []
  if validate_args:
    checks = [
        tf.Assert(tf.reduce_all(tf.equal(tf.shape(supports),
                                         tf.shape(weights))),
                  [supports, weights]),
        tf.Assert(tf.reduce_all(tf.equal(tf.shape(supports)[1],
                                         tf.shape(target_support))),
                  [supports, target_support]),
        tf.Assert(tf.equal(tf.size(tf.shape(target_support)), 1),
                  [target_support]),
        tf.Assert(tf.reduce_all(target_support_deltas > 0), [target_support]),
        tf.Assert(tf.reduce_all(tf.equal(target_support_deltas, delta_z)),
                  [target_support]),
    ]
  with tf.control_dependencies(checks):
    v_min, v_max = target_support[0], target_support[-1]
    # [batch, 1, num_dims]: the clipped source atoms.
    clipped = tf.clip_by_value(supports, v_min, v_max)[:, None, :]
    # [1, num_dims, 1]: the target atoms.
    targets = target_support[None, :, None]
    # [batch, num_dims (target i), num_dims (source j)].
    share = tf.clip_by_value(1.0 - tf.abs(clipped - targets) / delta_z, 0.0,
                             1.0)
    return tf.reduce_sum(share * weights[:, None, :], axis=2)
