# coding=utf-8
"""The out-of-graph prioritized replay memory (Schaul et al., 2015).

A drop-in replacement for
``dopamine.tf.replay_memory.prioritized_replay_buffer`` (Dopamine 4.1.2).
Each slot has a priority, kept in a `sum_tree.SumTree`; batches are drawn
proportionally to priority with stratified sampling, one draw per equal
stratum of the total priority (Schaul et al., 2015, appendix B.2.1). New
transitions get the largest priority recorded so far, so every transition is
seen at least once; the zero padding at episode starts gets priority 0 and is
never drawn. The priority exponent alpha and the importance-sampling weights
belong to the agent (Dopamine's Rainbow agent, Hessel et al., 2018), which
sets ``priority = loss ** alpha`` with `set_priority`.

Deviations from Dopamine (all in docs/compat.md): the batch is never returned
with an invalid index; priorities and indices are checked before anything is
written and any integer index dtype is accepted; ``sampling_probabilities``
has the batch size in its shape.
"""

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gin
import numpy as np
import tensorflow as tf

from dopamine_per import errors
from dopamine_per.replay_memory import checkpoint_io
from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import numpy_function
from dopamine_per.replay_memory import sum_tree
from dopamine_per.replay_memory.circular_replay_buffer import ReplayElement

__all__ = ['OutOfGraphPrioritizedReplayBuffer', 'WrappedPrioritizedReplayBuffer',
           'ReplayElement']

# Default of `add`'s priority keyword: distinguishes "not given" (an error,
# as in Dopamine) from None (the maximum recorded priority).
_OMITTED = object()


@gin.configurable
class OutOfGraphPrioritizedReplayBuffer(
    circular_replay_buffer.OutOfGraphReplayBuffer):
  """A circular replay memory sampling transitions in proportion to priority.

  See `circular_replay_buffer.OutOfGraphReplayBuffer` for the storage and
  the transition layout; ``add`` takes a priority as its last element and
  sampled batches end with ``sampling_probabilities`` (the raw priorities).

  Attributes:
    sum_tree: sum_tree.SumTree, the priority of every slot.
  """

  def __init__(self,
               observation_shape: Tuple[int, ...],
               stack_size: int,
               replay_capacity: int,
               batch_size: int,
               update_horizon: int = 1,
               gamma: float = 0.99,
               max_sample_attempts: int = 1000,
               extra_storage_types: Optional[Sequence[ReplayElement]] = None,
               observation_dtype: Any = np.uint8,
               terminal_dtype: Any = np.uint8,
               action_shape: Tuple[int, ...] = (),
               action_dtype: Any = np.int32,
               reward_shape: Tuple[int, ...] = (),
               reward_dtype: Any = np.float32,
               checkpoint_duration: int = 4,
               keep_every: Optional[int] = None,
               rng: Any = None):
    """Creates an empty prioritized replay memory.

    Args:
      observation_shape: tuple of ints, the shape of one observation.
      stack_size: int, frames per state.
      replay_capacity: int, the number of transitions kept.
      batch_size: int, the default batch size.
      update_horizon: int, the N of N-step returns.
      gamma: float, the discount factor.
      max_sample_attempts: int, how many invalid draws `sample_index_batch`
        tolerates before giving up.
      extra_storage_types: list of ReplayElement, extra per-transition
        elements given to `add` after `terminal` (before the priority).
      observation_dtype: np.dtype of observations.
      terminal_dtype: np.dtype of terminal flags.
      action_shape: tuple of ints, () for a scalar action.
      action_dtype: np.dtype of actions.
      reward_shape: tuple of ints, () for a scalar reward.
      reward_dtype: np.dtype of rewards.
      checkpoint_duration: int, how many iterations a checkpoint is kept.
      keep_every: int or None; checkpoints whose iteration is a multiple of it
        are never garbage-collected.
      rng: None for Dopamine's sources (Python's ``random`` for priority
        draws, as Dopamine's sum tree; ``np.random`` otherwise), or a
        ``numpy.random.Generator`` or seed shared by the memory and its sum
        tree and saved with checkpoints.

    Raises:
      ValueError: If an argument is malformed, or replay_capacity is smaller
        than update_horizon + stack_size.
    """
    super().__init__(
        observation_shape=observation_shape,
        stack_size=stack_size,
        replay_capacity=replay_capacity,
        batch_size=batch_size,
        update_horizon=update_horizon,
        gamma=gamma,
        max_sample_attempts=max_sample_attempts,
        extra_storage_types=extra_storage_types,
        observation_dtype=observation_dtype,
        terminal_dtype=terminal_dtype,
        action_shape=action_shape,
        action_dtype=action_dtype,
        reward_shape=reward_shape,
        reward_dtype=reward_dtype,
        checkpoint_duration=checkpoint_duration,
        keep_every=keep_every,
        rng=rng)
    # Priorities must read back from get_priority (float32) as they were
    # set, never as 0 or inf: the tree refuses any outside float32's range.
    self.sum_tree = sum_tree.SumTree(self._replay_capacity, rng=self._rng,
                                     priority_dtype=np.float32)
    # Guards the sum tree; taken after `_lock` when both are needed.
    self._priority_lock = threading.RLock()

  def get_add_args_signature(self) -> List[ReplayElement]:
    """Returns the elements `add` takes: the storage ones, then the priority.

    Returns:
      list of ReplayElement.
    """
    return super().get_add_args_signature() + [
        ReplayElement('priority', (), np.float32)]

  def get_transition_elements(self, batch_size: Optional[int] = None
                             ) -> List[ReplayElement]:
    """Returns the layout of `sample_transition_batch`'s result.

    Args:
      batch_size: int, or None for the buffer's batch size.

    Returns:
      list of ReplayElement: the plain memory's, then
      ``sampling_probabilities`` (float32, [batch_size]), the raw priorities.
    """
    batch_size = self._batch_size if batch_size is None else batch_size
    return super().get_transition_elements(batch_size) + [
        ReplayElement('sampling_probabilities', (batch_size,), np.float32)]

  # ------------------------------------------------------------------ add

  @circular_replay_buffer.synchronized('_lock', '_priority_lock')
  def add(self, observation: Any, action: Any, reward: Any, terminal: Any,
          *args: Any, priority: Any = _OMITTED, episode_end: bool = False
         ) -> None:
    """Adds a transition with a priority.

    Args:
      observation: array of shape observation_shape.
      action: the action (shape action_shape).
      reward: the reward (shape reward_shape).
      terminal: whether the transition ended the episode in a terminal state.
      *args: the extra storage elements, in order, then the priority unless
        it is given by keyword.
      priority: a real number, 0 or in float32's positive range (see
        `set_priority`); None for ``sum_tree.max_recorded_priority``
        (Schaul et al., 2015: new transitions get the largest priority
        seen). It must be given, positionally or by keyword, as in
        Dopamine.
      episode_end: whether this is the episode's last transition without
        being terminal (e.g. a time limit).

    Raises:
      ValueError: If the number of arguments is wrong ('Add expects ...'),
        an argument has the wrong shape or dtype or a value its dtype cannot
        hold, or the priority is not a valid priority. Nothing is written
        then.
    """
    values = [observation, action, reward, terminal, *args]
    if priority is not _OMITTED:
      values.append(priority)
    # The parent's add, without its (reentrant) lock wrapper: both locks are
    # held already, and this runs once per environment step.
    self._add_values(values, episode_end)

  def _check_add_args(self, values: List[Any]) -> List[Any]:
    """Checks the arguments of `add`; a None priority becomes the maximum.

    The priority is checked as given, before the storage checks turn a
    complex number without imaginary part into its real part.

    Raises:
      ValueError: see `add`.
    """
    if len(values) == len(self._add_specs):
      priority = values[-1]
      values[-1] = (self.sum_tree.max_recorded_priority if priority is None
                    else sum_tree.validate_priority(
                        priority, 'priority', self.sum_tree.priority_dtype))
    return super()._check_add_args(values)

  def _write(self, values: Sequence[Any], ends_episode: bool) -> None:
    # Called by `add`, which holds both locks.
    # values ends with the priority, which the storage does not hold: zip in
    # the parent stops at the last storage array.
    # The slot is the cursor and `add` validated the priority: skip `set`'s
    # checks (this runs once per environment step).
    self.sum_tree._set_one(self._add_count % self._replay_capacity,  # pylint: disable=protected-access
                           values[-1])
    super()._write(values, ends_episode)

  # ------------------------------------------------------------- sampling

  @circular_replay_buffer.synchronized('_lock', '_priority_lock')
  def sample_index_batch(self, batch_size: int) -> np.ndarray:
    """Returns `batch_size` valid slots drawn in proportion to priority.

    One slot is drawn from each of `batch_size` equal strata of the total
    priority; draws that land on invalid slots are replaced by independent
    draws from the whole distribution, in vectorized rounds.

    Args:
      batch_size: int, the number of indices.

    Returns:
      np.ndarray of int64 with shape [batch_size], all valid transitions.

    Raises:
      RuntimeError: If too few transitions have been added, or
        max_sample_attempts draws were invalid before the batch was complete.
      ValueError: If batch_size is not a positive int, or every priority is
        zero.
    """
    batch_size = self._check_batch_size(batch_size)
    self._sampling_range()  # Raises if too few transitions were added.
    candidates = self.sum_tree.stratified_sample(batch_size)
    return self._redraw_invalid(candidates, self.sum_tree.sample_batch)

  def _transition_element(self, element: ReplayElement, indices: np.ndarray
                         ) -> np.ndarray:
    if element.name == 'sampling_probabilities':
      with self._priority_lock:  # The indices were just checked.
        return self.sum_tree.get(indices).astype(np.float32)
    return super()._transition_element(element, indices)

  # ----------------------------------------------------------- priorities

  def _check_indices(self, indices: Any) -> np.ndarray:
    if np.ndim(indices) == 0:
      raise errors.ArgumentError(
          'indices must be an array, got {!r}'.format(indices))
    return sum_tree.validate_indices(indices, self._replay_capacity,
                                     'indices')

  @circular_replay_buffer.synchronized('_priority_lock')
  def set_priority(self, indices: Any, priorities: Any) -> None:
    """Sets the priorities of a batch of slots.

    The whole batch is checked before anything is written; with repeated
    indices the last priority wins.

    A priority is a real number (a Python or NumPy integer or float; not
    a bool, string, bytes or complex number) that is 0 or lies in
    float32's positive range, [2**-149, 3.4028235e38]: `get_priority` then
    returns it (rounded to float32) and never 0 or inf. See
    docs/compat.md.

    Args:
      indices: integer array (any integer dtype) of slots in
        [0, replay_capacity).
      priorities: array-like of the same shape (or a scalar) of such
        priorities.

    Raises:
      ValueError: If the shapes differ, or a priority is not one (see
        above); sum_tree.InvalidIndexError (an IndexError and ValueError)
        if an index is out of range; sum_tree.InvalidIndexTypeError (a
        TypeError and ValueError) if the indices are not integers.
    """
    if np.ndim(indices) and self.sum_tree.set_if_valid(indices, priorities):
      return
    indices = self._check_indices(indices)
    if np.ndim(priorities) and np.shape(priorities) != indices.shape:
      raise ValueError(
          'priorities of shape {} do not match indices of shape {}.'.format(
              np.shape(priorities), indices.shape))
    self.sum_tree.set(indices, sum_tree.validate_priorities(
        priorities, indices.shape, 'priorities',
        self.sum_tree.priority_dtype))

  @circular_replay_buffer.synchronized('_priority_lock')
  def get_priority(self, indices: Any) -> np.ndarray:
    """Returns the priorities of a batch of slots (0 for unused slots).

    Args:
      indices: integer array (any integer dtype) of slots in
        [0, replay_capacity).

    Returns:
      np.ndarray of float32 shaped like `indices`.

    Raises:
      AssertionError: (also a ValueError) If `indices` is a scalar, as in
        Dopamine.
      sum_tree.InvalidIndexError: If an index is out of range.
      sum_tree.InvalidIndexTypeError: If the indices are not integers.
    """
    return self.sum_tree.get(self._check_indices(indices)).astype(np.float32)

  # ---------------------------------------------------------- checkpoints

  def _checkpoint_layout(self) -> List[Tuple[str, str]]:
    return super()._checkpoint_layout() + [('sum_tree', 'sum_tree')]

  @circular_replay_buffer.synchronized('_priority_lock')
  def _checkpoint_value(self, name: str) -> Any:
    if name == 'sum_tree':
      return self.sum_tree.get_state()
    return super()._checkpoint_value(name)

  def _pickle_limits(self, name: str) -> checkpoint_io.PickleLimits:
    if name == 'sum_tree':
      # Dopamine's binary levels: 2 * leaves - 1 floats, at most 64 bytes
      # each in any pickle protocol; and a generator state (MT19937's holds
      # 624 words).
      leaves = 1 << max(self._replay_capacity - 1, 0).bit_length()
      return checkpoint_io.PickleLimits(
          max_bytes=128 * leaves + (1 << 16),
          max_elements=2 * leaves + (1 << 12), max_depth=8)
    return super()._pickle_limits(name)

  def _read_checkpoint(self, checkpoint_dir: str, suffix: Any,
                       missing_episode_ends: bool) -> Dict[str, Any]:
    pending = super()._read_checkpoint(checkpoint_dir, suffix,
                                       missing_episode_ends)
    path = checkpoint_io.checkpoint_filename(checkpoint_dir, 'sum_tree',
                                             suffix)
    with checkpoint_io.refusing(path):
      loaded = checkpoint_io.load_pickle_gz(
          path, expected=pending['digest_of']('sum_tree'),
          limits=self._pickle_limits('sum_tree'))
      if isinstance(loaded, checkpoint_io.PickledSumTreeState):
        state = loaded.state
      elif isinstance(loaded, dict):
        state = loaded
      else:
        raise checkpoint_io.CorruptCheckpointError(
            '{}: expected a pickled SumTree, got {}'.format(
                path, type(loaded).__name__))
      # The generator is the memory's (restored from the dopamine_per
      # state), shared with the tree: keep the tree's object.
      state = {k: v for k, v in state.items() if k != 'rng_state'}
      try:
        # A scratch tree of the same priority bounds: set_state validates.
        sum_tree.SumTree(
            self._replay_capacity,
            priority_dtype=self.sum_tree.priority_dtype).set_state(state)
      except ValueError as e:
        raise checkpoint_io.CorruptCheckpointError(
            '{}: {}'.format(path, e)) from e
    pending['sum_tree'] = state
    return pending

  @circular_replay_buffer.synchronized('_priority_lock')
  def _commit_checkpoint(self, pending: Dict[str, Any]) -> None:
    # Validated in _read_checkpoint; set_state is all-or-nothing anyway, and
    # runs first so that nothing else has changed if it raises.
    self.sum_tree.set_state(pending['sum_tree'])
    super()._commit_checkpoint(pending)


@gin.configurable(
    denylist=['observation_shape', 'stack_size', 'update_horizon', 'gamma'])
class WrappedPrioritizedReplayBuffer(circular_replay_buffer.WrappedReplayBuffer):
  """Graph-mode access to an `OutOfGraphPrioritizedReplayBuffer`.

  Adds `tf_set_priority` and `tf_get_priority` to `WrappedReplayBuffer`; the
  sampled `transition` ends with `sampling_probabilities` (raw priorities).
  Every constructor argument reaches the memory.
  """

  @staticmethod
  def _memory_class():
    return OutOfGraphPrioritizedReplayBuffer

  def tf_set_priority(self, indices, priorities) -> tf.Operation:
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
    return numpy_function.numpy_function(
        self.memory.set_priority, [indices, priorities], [],
        name='prioritized_replay_set_priority_py_func')

  def tf_get_priority(self, indices) -> tf.Tensor:
    """Returns a float32 tensor of shape [n]: the priorities at `indices`.

    Args:
      indices: int tensor of shape [n], memory indices.
    """
    indices = tf.convert_to_tensor(indices)
    priorities, = numpy_function.numpy_function(
        self.memory.get_priority, [indices], [tf.float32],
        name='prioritized_replay_get_priority_py_func')
    priorities.set_shape(indices.shape)
    return priorities
