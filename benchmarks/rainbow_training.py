r"""Rainbow's graph-mode Atari training, for the benchmarks' training steps.

benchmarks/staging_benchmark.py's `StepGraph` times a training step on a
replay batch: by default a chain of dense layers calibrated to cost about
one sample; with `network='rainbow'` the step this module builds, the
training step of the package's Rainbow agent (agents/rainbow_agent.py, with
Dopamine's Atari defaults) on a batch of replayed transitions:

1. the online `atari_lib.RainbowNetwork` on the batch's states and the
   target one on its next states (51 atoms on [-10, 10], `NUM_ACTIONS`
   actions);
2. the C51 target: the target network's distribution for its greedy next
   action on the support r + gamma^n z (just r past a terminal), projected
   onto the support (`rainbow_agent.project_distribution`);
3. the cross-entropy of the online logits of the action taken against it,
   per transition (the loss);
4. the batch's new priorities, sqrt(loss + 1e-10) (positive, and changing
   as the network learns), set through the memory's `tf_set_priority`;
5. Adam (lr 0.00025, epsilon 0.0003125) on the loss weighted by
   1 / sqrt(sampling probability), normalized by the batch's largest, after
   the priority update (a control dependency, as the agent's).

What it leaves out of the agent's step: nothing the step computes; the
target network's periodic copy and the summaries are not part of a step.
The networks and the optimizer are built once per graph (`RainbowTraining`)
and shared by every training op built on them (a sampled batch, a batch
held in variables), so those train the same weights.
"""

from typing import Callable, Mapping

import tensorflow as tf

from dopamine_per.agents import rainbow_agent
from dopamine_per.discrete_domains import atari_lib

__all__ = ['NUM_ACTIONS', 'RainbowTraining']

# ALE's full action set: the largest head any game needs (its share of the
# step's work is small: the last layer is 512 x NUM_ACTIONS * 51).
NUM_ACTIONS = 18
_NUM_ATOMS = 51
_VMAX = 10.0
_GAMMA = 0.99
_EPSILON = 1e-10  # Added to the losses and probabilities, as the agent does.

Batch = Mapping[str, tf.Tensor]
SetPriority = Callable[[tf.Tensor, tf.Tensor], tf.Operation]


class RainbowTraining(object):
  """The online and target Rainbow networks and Adam, in the default graph.

  Attributes:
    online: the trained `atari_lib.RainbowNetwork` ('Online').
    target: the target network ('Target'), not trained.
    optimizer: Dopamine's Rainbow Adam.
  """

  def __init__(self, update_horizon: int, num_actions: int = NUM_ACTIONS):
    """Creates the networks (their variables on first use) and Adam.

    Args:
      update_horizon: int, the memory's n of n-step returns (the target's
        discount is gamma ** n).
      num_actions: int, actions of the game (the batch's must be below).
    """
    self._support = tf.linspace(-_VMAX, _VMAX, _NUM_ATOMS)
    self._discount = _GAMMA ** update_horizon
    self.online = atari_lib.RainbowNetwork(num_actions, _NUM_ATOMS,
                                           self._support, name='Online')
    self.target = atari_lib.RainbowNetwork(num_actions, _NUM_ATOMS,
                                           self._support, name='Target')
    self.optimizer = tf.compat.v1.train.AdamOptimizer(
        learning_rate=0.00025, epsilon=0.0003125)

  def _target_distribution(self, batch: Batch) -> tf.Tensor:
    """The projected C51 target of each transition, [batch, atoms]."""
    rewards = tf.cast(batch['reward'], tf.float32)[:, None]
    not_terminal = 1.0 - tf.cast(batch['terminal'], tf.float32)
    target_support = (rewards + (self._discount * not_terminal)[:, None] *
                      self._support[None, :])
    next_outputs = self.target(batch['next_state'])
    next_actions = tf.argmax(next_outputs.q_values, axis=1,
                             output_type=tf.int32)
    next_probabilities = tf.gather(next_outputs.probabilities, next_actions,
                                   axis=1, batch_dims=1)
    return tf.stop_gradient(rainbow_agent.project_distribution(
        target_support, next_probabilities, self._support))

  def losses(self, batch: Batch) -> tf.Tensor:
    """Each transition's cross-entropy loss, [batch] (steps 1 to 3)."""
    target = self._target_distribution(batch)
    chosen_logits = tf.gather(self.online(batch['state']).logits,
                              tf.cast(batch['action'], tf.int32),
                              axis=1, batch_dims=1)
    return tf.nn.softmax_cross_entropy_with_logits(labels=target,
                                                   logits=chosen_logits)

  def train_op(self, batch: Batch, set_priority: SetPriority
              ) -> tf.Operation:
    """One training step on `batch` (the module docstring).

    Args:
      batch: the transition's tensors by Dopamine's names ('state',
        'action', 'reward', 'next_state', 'terminal', 'indices',
        'sampling_probabilities').
      set_priority: the memory's `tf_set_priority`.

    Returns:
      The op that sets the batch's priorities, then applies Adam.
    """
    losses = self.losses(batch)
    update = set_priority(batch['indices'],
                          tf.sqrt(losses + _EPSILON))
    weights = tf.math.rsqrt(
        tf.cast(batch['sampling_probabilities'], tf.float32) + _EPSILON)
    weights /= tf.reduce_max(weights)
    with tf.control_dependencies([update]):
      return self.optimizer.minimize(
          tf.reduce_mean(weights * losses),
          var_list=self.online.trainable_variables)
