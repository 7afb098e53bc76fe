# coding=utf-8
"""The implicit quantile network (IQN) agent (Dabney et al., 2018), TF1 graphs.

`ImplicitQuantileAgent` has the constructor, gin name
(``ImplicitQuantileAgent``), defaults and graph attributes of Dopamine
4.1.2's. It subclasses `rainbow_agent.RainbowAgent`, as Dopamine's does, so
the settings it does not name (gamma, update_horizon, replay_scheme, ...)
are bound as ``RainbowAgent.*`` in gin or passed as keyword arguments.

A training step's targets are r + gamma^n * Z_tau'(s', a*) for N' levels
tau', a* maximizing the mean of K quantile values of s' (the target
network's, or the online network's with ``double_dqn``); the loss is
`quantile_huber_loss`. Unlike Dopamine's, 'prioritized' replay updates
priorities from that loss (docs/compat.md#implicit_quantile_agent).
"""

import numbers
from typing import Any, Tuple

import gin
import tensorflow as tf

from dopamine_per.agents import rainbow_agent
from dopamine_per.discrete_domains import atari_lib

__all__ = ['ImplicitQuantileAgent', 'quantile_huber_loss']


def quantile_huber_loss(target_quantile_values: tf.Tensor,
                        quantile_values: tf.Tensor, quantiles: tf.Tensor,
                        kappa: float) -> tf.Tensor:
  """Returns each transition's quantile Huber loss (Dabney et al., 2018).

  With delta_ij = target_j - value_i and the Huber loss L_kappa (quadratic
  up to |delta| = kappa, linear beyond),

    rho(delta_ij) = |tau_i - 1{delta_ij < 0}| * L_kappa(delta_ij) / kappa,

  summed over the N online quantiles i and averaged over the N' targets j
  (equation 3 of the paper). The indicator carries no gradient.

  Args:
    target_quantile_values: float tensor [batch, N'], the targets (the
      caller stops their gradient).
    quantile_values: float tensor [batch, N], the online network's values
      of the chosen actions.
    quantiles: float tensor [batch, N], the levels tau of quantile_values.
    kappa: float > 0, the Huber threshold.

  Returns:
    float tensor [batch].
  """
  errors = target_quantile_values[:, :, None] - quantile_values[:, None, :]
  abs_errors = tf.abs(errors)
  huber = tf.where(abs_errors <= kappa, 0.5 * tf.square(errors),
                   kappa * (abs_errors - 0.5 * kappa))
  below = tf.stop_gradient(tf.cast(errors < 0.0, errors.dtype))
  weights = tf.abs(quantiles[:, None, :] - below)
  per_pair = weights * huber / kappa  # [batch, N', N]
  return tf.reduce_mean(tf.reduce_sum(per_pair, axis=2), axis=1)


def _by_transition(values: tf.Tensor, num_quantiles: int,
                   batch_size: int) -> tf.Tensor:
  """Reshapes quantile-major [num_quantiles * batch, d] to [batch, nq, d]."""
  values = tf.reshape(values, [num_quantiles, batch_size, -1])
  return tf.transpose(values, [1, 0, 2])


def _check_count(name: str, value) -> None:
  """Raises ValueError naming `name` unless value is an integer >= 1."""
  if (isinstance(value, bool) or not isinstance(value, numbers.Integral) or
      value < 1):
    raise ValueError('{} must be a positive integer, got {!r}'.format(
        name, value))


@gin.configurable
class ImplicitQuantileAgent(rainbow_agent.RainbowAgent):
  """IQN: Rainbow's machinery with sampled quantiles of the return."""

  def __init__(self,
               sess,
               num_actions,
               network=atari_lib.ImplicitQuantileNetwork,
               kappa=1.0,
               num_tau_samples=32,
               num_tau_prime_samples=32,
               num_quantile_samples=32,
               quantile_embedding_dim=64,
               double_dqn=False,
               summary_writer=None,
               summary_writing_frequency=500,
               **kwargs):
    """Builds the agent's graph in `sess`'s graph and initializes it.

    Args:
      sess, num_actions, summary_writer, summary_writing_frequency: as
        `dqn_agent.DQNAgent`'s.
      network: callable(num_actions, quantile_embedding_dim, name=...)
        returning a network whose call (state, num_quantiles) returns
        `atari_lib.ImplicitQuantileNetworkType` in its quantile-major layout.
      kappa: float > 0, the Huber threshold of the loss.
      num_tau_samples: int, N, levels sampled for the replayed states.
      num_tau_prime_samples: int, N', levels sampled for the targets.
      num_quantile_samples: int, K, levels averaged into Q-values (acting
        and choosing the next action of the target).
      quantile_embedding_dim: int, cosine features per level.
      double_dqn: bool, choose the target's next action with the online
        network (van Hasselt et al., 2016) instead of the target network.
      **kwargs: any other `rainbow_agent.RainbowAgent` argument
        (observation_shape, gamma, update_horizon, replay_scheme, optimizer,
        priority_exponent ...); those not given come from gin's
        ``RainbowAgent.*`` bindings, else RainbowAgent's defaults. Its
        num_atoms, vmin and vmax are unused.

    Raises:
      ValueError: If kappa, a sample count or quantile_embedding_dim is not
        positive, or a RainbowAgent argument is invalid. Nothing is built
        then.
    """
    if not kappa > 0:
      raise ValueError('kappa must be positive, got {!r}'.format(kappa))
    for name, value in (('num_tau_samples', num_tau_samples),
                        ('num_tau_prime_samples', num_tau_prime_samples),
                        ('num_quantile_samples', num_quantile_samples),
                        ('quantile_embedding_dim', quantile_embedding_dim)):
      _check_count(name, value)
    self.kappa = float(kappa)
    # N, N' and K of the paper (below its equation 3).
    self.num_tau_samples = int(num_tau_samples)
    self.num_tau_prime_samples = int(num_tau_prime_samples)
    self.num_quantile_samples = int(num_quantile_samples)
    # n of the paper's equation 4.
    self.quantile_embedding_dim = int(quantile_embedding_dim)
    self.double_dqn = bool(double_dqn)
    super().__init__(
        sess=sess,
        num_actions=num_actions,
        network=network,
        summary_writer=summary_writer,
        summary_writing_frequency=summary_writing_frequency,
        **kwargs)

  # ------------------------------------------------------------ the graph

  def _create_network(self, name: str):
    return self.network(self.num_actions, self.quantile_embedding_dim,
                        name=name)

  def _build_networks(self) -> None:
    """Creates the networks and the quantile values acting and training use.

    Sets Dopamine's attributes: online_convnet, target_convnet,
    _net_outputs (K levels of `state_ph`), _q_values ([num_actions], their
    mean), _q_argmax, _replay_net_outputs (N levels of the replayed states)
    with _replay_net_quantile_values and _replay_net_quantiles,
    _replay_net_target_outputs (N' target levels of the next states) with
    _replay_net_target_quantile_values, _replay_net_target_q_values
    ([batch, num_actions], the mean of K levels of the next states) and
    _replay_next_qt_argmax ([batch]). Network outputs keep the networks'
    quantile-major layout.
    """
    self.online_convnet = self._create_network(name='Online')
    self.target_convnet = self._create_network(name='Target')
    # num_quantiles by keyword: Keras 3 models take only tensors
    # positionally.
    self._net_outputs = self.online_convnet(
        self.state_ph, num_quantiles=self.num_quantile_samples)
    # One state: the mean over the K rows is its Q-values.
    self._q_values = tf.reduce_mean(self._net_outputs.quantile_values, axis=0)
    self._q_argmax = tf.argmax(self._q_values, axis=0)

    replay = self._replay
    self._replay_net_outputs = self.online_convnet(
        replay.states, num_quantiles=self.num_tau_samples)
    self._replay_net_quantile_values = self._replay_net_outputs.quantile_values
    self._replay_net_quantiles = self._replay_net_outputs.quantiles
    self._replay_net_target_outputs = self.target_convnet(
        replay.next_states, num_quantiles=self.num_tau_prime_samples)
    self._replay_net_target_quantile_values = (
        self._replay_net_target_outputs.quantile_values)

    chooser = self.online_convnet if self.double_dqn else self.target_convnet
    next_values = chooser(
        replay.next_states,
        num_quantiles=self.num_quantile_samples).quantile_values
    self._replay_net_target_q_values = tf.reduce_mean(
        _by_transition(next_values, self.num_quantile_samples,
                       replay.batch_size), axis=1)
    self._replay_next_qt_argmax = tf.argmax(self._replay_net_target_q_values,
                                            axis=1, output_type=tf.int32)

  def _build_target_quantile_values_op(self) -> tf.Tensor:
    """Returns the [batch, N'] targets r + gamma^n * Z_tau'(s', a*).

    Past a terminal the target is r. (Dopamine's method returns the same
    values as a quantile-major [N' * batch, 1] column.)
    """
    batch_size = self._replay.batch_size
    next_values = _by_transition(self._replay_net_target_quantile_values,
                                 self.num_tau_prime_samples, batch_size)
    next_values = tf.gather(next_values, self._replay_next_qt_argmax, axis=2,
                            batch_dims=1)
    rewards = tf.cast(self._replay.rewards, tf.float32)[:, None]
    not_terminal = 1.0 - tf.cast(self._replay.terminals, tf.float32)
    discounts = (self.cumulative_gamma * not_terminal)[:, None]
    return rewards + discounts * next_values

  def _build_train_op(self) -> Tuple[Any, tf.Tensor]:
    """Returns (train op, per-transition loss) for one replay batch."""
    batch_size = self._replay.batch_size
    targets = tf.stop_gradient(self._build_target_quantile_values_op())
    values = _by_transition(self._replay_net_quantile_values,
                            self.num_tau_samples, batch_size)
    actions = tf.cast(self._replay.actions, tf.int32)
    chosen_values = tf.gather(values, actions, axis=2, batch_dims=1)
    quantiles = _by_transition(self._replay_net_quantiles,
                               self.num_tau_samples, batch_size)[:, :, 0]
    loss = quantile_huber_loss(targets, chosen_values, quantiles, self.kappa)
    return self._minimize_with_priorities(loss, 'QuantileLoss')
