# coding=utf-8
"""The replay memories' one edge with TensorFlow, and the graph-mode bases.

`circular_replay_buffer.WrappedReplayBuffer` and
`prioritized_replay_buffer.WrappedPrioritizedReplayBuffer` (Dopamine's
classes and gin names) are these bases with their memory class. Their
TensorFlow ops, and `as_dataset`'s, are built by `wrapped_sampling`, which
only `tensorflow_side` imports, on first use: configuring the wrappers or
using the NumPy memories does not import TensorFlow. What differs from
Dopamine's Wrapped* classes: docs/compat.md#wrapped_replay_buffer.
"""

import collections
import types
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple

import numpy as np

from dopamine_per import errors
from dopamine_per.replay_memory.memory import validation

if TYPE_CHECKING:
  import tensorflow as tf  # pylint: disable=g-bad-import-order

__all__ = ['WrappedReplayBufferBase', 'WrappedPrioritizedReplayBufferBase',
           'tensorflow_side']


def tensorflow_side() -> types.ModuleType:
  """Returns `wrapped_sampling`, the memories' one way to TensorFlow."""
  from dopamine_per.replay_memory.graph import wrapped_sampling  # pylint: disable=g-import-not-at-top
  return wrapped_sampling


class WrappedReplayBufferBase(object):
  """Graph-mode access to an out-of-graph replay memory.

  Every `session.run` that needs a tensor of `transition` (or the legacy
  attributes `states`, `actions`, ...) samples a fresh batch, through the
  native ops (see `native_ops`) or a `tf.numpy_function`; with staging, the
  batch staged by the previous run (see `create_sampling_ops`). Subclasses
  set `_memory_class`, the class of the memory the constructor creates.

  Attributes:
    memory: the out-of-graph replay memory; `add`, `save` and `load` go to it.
    batch_size: int, the number of transitions per sampled batch.
    transition: collections.OrderedDict of name -> tf.Tensor, in
      `memory.get_transition_elements()` order, with static shapes.
  """

  _memory_class: type

  def __init__(self,
               observation_shape: Tuple[int, ...],
               stack_size: int,
               use_staging: bool = False,
               replay_capacity: int = 1000000,
               batch_size: int = 32,
               update_horizon: int = 1,
               gamma: float = 0.99,
               wrapped_memory: Optional[Any] = None,
               max_sample_attempts: int = 1000,
               extra_storage_types: Optional[Sequence[Any]] = None,
               observation_dtype=np.uint8,
               terminal_dtype=np.uint8,
               action_shape: Tuple[int, ...] = (),
               action_dtype=np.int32,
               reward_shape: Tuple[int, ...] = (),
               reward_dtype=np.float32,
               use_native_ops: bool = True,
               compress_observations: bool = False,
               **memory_kwargs):
    """Creates the memory (unless given) and the sampling ops.

    Args:
      observation_shape: tuple of ints, the shape of one observation.
      stack_size: int, frames per state.
      use_staging: bool, prefetch the next batch while the graph trains.
      replay_capacity: int, transitions kept in memory.
      batch_size: int, transitions per sampled batch.
      update_horizon: int, n of the n-step return.
      gamma: float in [0, 1], the discount factor.
      wrapped_memory: an out-of-graph memory to use instead of a new one of
        `_memory_class`.
      max_sample_attempts: int, failed draws allowed per batch.
      extra_storage_types: list of ReplayElement, extra per-transition data.
      observation_dtype: np.dtype of observations.
      terminal_dtype: np.dtype of terminal flags.
      action_shape: tuple of ints, the shape of one action.
      action_dtype: np.dtype of actions.
      reward_shape: tuple of ints, the shape of one reward.
      reward_dtype: np.dtype of rewards.
      use_native_ops: bool, sample and set priorities through the native
        ops (the default; they fall back to `tf.numpy_function` ops, with
        one warning saying why, where they cannot serve this memory); False
        for the `tf.numpy_function` ops.
      compress_observations: bool, the memory stores its frames compressed
        (the memory's argument; ignored with `wrapped_memory`).
      **memory_kwargs: further keyword arguments for the memory's constructor
        (e.g. `checkpoint_duration`, `keep_every`, `rng`,
        `checkpoint_format`).

    Raises:
      ValueError: If update_horizon is not positive, or the capacity does
        not exceed the update horizon.
      dopamine_per.errors.ArgumentError: (a ValueError) If gamma is not a
        real number in [0, 1] (also with `wrapped_memory`): Dopamine's
        message, 'Discount factor (gamma) must be in [0, 1].', then which
        value was refused.
    """
    if replay_capacity < update_horizon + 1:
      raise ValueError(
          'Update horizon ({}) should be significantly smaller '
          'than replay capacity ({}).'.format(update_horizon, replay_capacity))
    if not update_horizon >= 1:
      raise ValueError('Update horizon must be positive.')
    try:
      validation.check_real('gamma', gamma, 0.0, 1.0)
    except errors.ArgumentError as e:
      # Dopamine's message first, for tests that match it; then ours.
      raise errors.ArgumentError(
          'Discount factor (gamma) must be in [0, 1]. {}'.format(e)) from None
    self.batch_size = batch_size
    if wrapped_memory is None:
      wrapped_memory = self._memory_class(
          observation_shape, stack_size, replay_capacity, batch_size,
          update_horizon=update_horizon, gamma=gamma,
          max_sample_attempts=max_sample_attempts,
          extra_storage_types=extra_storage_types,
          observation_dtype=observation_dtype, terminal_dtype=terminal_dtype,
          action_shape=action_shape, action_dtype=action_dtype,
          reward_shape=reward_shape, reward_dtype=reward_dtype,
          compress_observations=compress_observations, **memory_kwargs)
    self.memory = wrapped_memory
    self._use_native_ops = use_native_ops
    # The memory's registration with the native ops, or None; a sharded
    # memory's native batch queue, or None.
    self._native = None
    self._queue = None
    self.create_sampling_ops(use_staging)

  def add(self, observation, action, reward, terminal, *args, **kwargs):
    """Adds a transition to the memory (see the memory's `add`)."""
    self.memory.add(observation, action, reward, terminal, *args, **kwargs)

  def create_sampling_ops(self, use_staging: bool) -> None:
    """Builds the sampling ops and fills `transition` and legacy attributes.

    Without staging, each run samples a batch; with staging, a run returns
    the batch the previous run staged and samples the next one while the
    graph trains (see `wrapped_sampling.sampling_ops`).

    Args:
      use_staging: bool, prefetch the next batch while the graph trains.
    """
    side = tensorflow_side()
    self._native = side.native_binding(self.memory, self._use_native_ops)
    self._queue = side.queue_binding(self.memory, self._use_native_ops)
    tensors, self._staging_area = side.sampling_ops(self.memory, use_staging,
                                                    self._native, self._queue)
    self.unpack_transition(tensors, self.memory.get_transition_elements())

  def unpack_transition(self, transition_tensors, transition_type) -> None:
    """Names the sampled tensors: `transition` and the legacy attributes."""
    self.transition = collections.OrderedDict(
        (element.name, tensor)
        for tensor, element in zip(transition_tensors, transition_type))
    self.states = self.transition['state']
    self.actions = self.transition['action']
    self.rewards = self.transition['reward']
    self.next_states = self.transition['next_state']
    self.next_actions = self.transition['next_action']
    self.next_rewards = self.transition['next_reward']
    self.terminals = self.transition['terminal']
    self.indices = self.transition['indices']

  def save(self, checkpoint_dir: str, iteration_number: int,
           background: bool = False) -> Any:
    """Saves the memory; returns what its `save` returns (a future with
    `background`, else None). Without `background`, a memory with
    Dopamine's `save(checkpoint_dir, iteration_number)` does too."""
    if not background:
      return self.memory.save(checkpoint_dir, iteration_number)
    return self.memory.save(checkpoint_dir, iteration_number, background=True)

  def load(self, checkpoint_dir: str, suffix) -> None:
    """Loads the memory (see the memory's `load`).

    With staging, a batch staged before the load (one per session at most)
    lives in the session, out of the memory's reach: the next run returns
    it, and the run after samples the loaded contents. Dopamine's runners
    load before training, when nothing is staged.
    """
    self.memory.load(checkpoint_dir, suffix)


class WrappedPrioritizedReplayBufferBase(WrappedReplayBufferBase):
  """Graph-mode access to a prioritized memory: adds the priority ops."""

  def tf_set_priority(self, indices, priorities) -> 'tf.Operation':
    """Returns an op setting `priorities` at `indices` in the memory.

    Args:
      indices: int tensor of shape [n], memory indices (e.g. the sampled
        `transition['indices']`).
      priorities: float tensor of shape [n], each 0 or in float32's
        positive range (see the memory's `set_priority`).

    Returns:
      A tf.Operation; running it writes the priorities, or raises
      tf.errors.InvalidArgumentError naming the bad value and writes nothing.
    """
    return tensorflow_side().set_priority_op(self.memory, indices, priorities,
                                             self._native, self._queue)

  def tf_get_priority(self, indices) -> 'tf.Tensor':
    """Returns a float32 tensor of shape [n]: the priorities at `indices`.

    Args:
      indices: int tensor of shape [n], memory indices.
    """
    return tensorflow_side().get_priority_tensor(self.memory, indices,
                                                 self._native)
