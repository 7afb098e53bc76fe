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

NumPy only, as the circular memory. What differs from Dopamine:
docs/compat.md#prioritized_replay_buffer.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import gin
import numpy as np

from dopamine_per.native import native_memory as native_memory_lib
from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import sum_tree
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from dopamine_per.replay_memory.circular_replay_buffer import ReplayElement
from dopamine_per.replay_memory.graph import wrapped_replay_buffer
from dopamine_per.replay_memory.memory import batch_plan
from dopamine_per.replay_memory.memory import validation

__all__ = ['OutOfGraphPrioritizedReplayBuffer',
           'WrappedPrioritizedReplayBuffer', 'ReplayElement']


@gin.configurable
class OutOfGraphPrioritizedReplayBuffer(
    circular_replay_buffer.OutOfGraphReplayBuffer):
  """A circular replay memory sampling transitions in proportion to priority.

  Sampled batches end with ``sampling_probabilities`` (the raw priorities).
  ``add`` takes a priority after the extra storage elements, positionally
  or by keyword, as in Dopamine (omitting it is an error): a priority (see
  `set_priority`), or None for ``sum_tree.max_recorded_priority``. An
  invalid priority raises ValueError and nothing is written.

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
               rng: Any = None,
               kernels: Any = None,
               compress_observations: bool = False,
               checkpoint_format: Optional[str] = None):
    """Creates an empty prioritized replay memory.

    The arguments are `OutOfGraphReplayBuffer`'s; these differ:

    Args:
      extra_storage_types: list of ReplayElement, extra per-transition
        elements given to `add` after `terminal` (before the priority).
      rng: None for Dopamine's sources (Python's ``random`` for priority
        draws, as Dopamine's sum tree; ``np.random`` otherwise), or a
        ``numpy.random.Generator`` or seed shared by the memory and its sum
        tree and saved with checkpoints.
      kernels: the per-batch loops of the memory and its sum tree.

    Raises:
      ValueError: As `OutOfGraphReplayBuffer`'s constructor.
    """
    super().__init__(
        observation_shape, stack_size, replay_capacity, batch_size,
        update_horizon, gamma, max_sample_attempts, extra_storage_types,
        observation_dtype, terminal_dtype, action_shape, action_dtype,
        reward_shape, reward_dtype, checkpoint_duration, keep_every, rng,
        kernels, compress_observations, checkpoint_format)
    # Priorities must read back from get_priority (float32) as they were
    # set, never as 0 or inf: the tree refuses any outside float32's range.
    self._sum_tree = sum_tree.SumTree(self._replay_capacity, rng=self._rng,
                                      priority_dtype=np.float32,
                                      kernels=self._kernels)
    # Guards the sum tree; taken after `_lock` when both are needed (the
    # native registry entry's tree lock, where there is one).
    self._priority_lock = native_memory_lib.lock_of(self._native, tree=True)

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

  # `add` takes the priority after the positional arguments, as in Dopamine.
  _takes_priority = True

  def _check_add_args(self, values: List[Any]) -> List[Any]:
    """Checks the arguments of `add`; a None priority becomes the maximum.

    The priority is checked as given, before the storage checks turn a
    complex number without imaginary part into its real part.

    Raises:
      ValueError: see `add`; also if the priority is not a valid priority
        (see `set_priority`).
    """
    if len(values) == len(self._add_specs):
      priority = values[-1]
      tree = self._sum_tree
      values[-1] = (tree.max_recorded_priority if priority is None else
                    validation.check_priority(priority, 'priority',
                                              tree.priority_dtype))
    return super()._check_add_args(values)

  def _on_write(self, slot: int, values: Sequence[Any]) -> None:
    # `add` checked the priority (values[-1]; 0 for padding) and the slot is
    # its cursor: skip `set`'s checks, as this runs once per environment
    # step. `add` holds `_lock`; `_priority_lock` comes after it.
    with self._priority_lock:
      self._sum_tree.set_validated(slot, values[-1])

  # ------------------------------------------------------------- sampling

  def _draw(self, count: int) -> np.ndarray:
    # One slot from each of `count` equal strata of the total priority.
    with self._priority_lock:
      return self.sum_tree.stratified_sample(count)

  def _redraw(self, count: int) -> np.ndarray:
    # Replacements: independent draws from the whole distribution.
    with self._priority_lock:
      return self.sum_tree.sample_batch(count)

  def _draw_generator(self, count: int) -> Tuple[Any, bool]:
    # The tree's generator; without one, the words of Python's `random` its
    # strata would draw, unless sampling raises before any draw (the Python
    # path raises it).
    rng = self.sum_tree.rng
    if rng is not None:
      return rng.bit_generator, False
    if (self._storage.counters[0] < self._sampleable_from or
        not self.sum_tree.total_priority() > 0):
      return None, False
    return sum_tree.python_random_words(count), False

  @property
  def nbytes(self) -> int:
    """See `OutOfGraphReplayBuffer.nbytes`; the sum tree included."""
    return super().nbytes + self._sum_tree.nbytes

  def _row_elements(self) -> batch_plan.RowElements:
    # Each transition's priority, the leaf at its slot.
    return {'sampling_probabilities': ('priorities', False)}

  def _row_sources(self) -> Dict[str, np.ndarray]:
    return dict(self._storage.arrays, priorities=self.sum_tree.leaves)

  def _row_lock(self) -> Any:
    return self._priority_lock  # The kernels read the priorities.

  # ----------------------------------------------------------- priorities

  def set_priority(self, indices: Any, priorities: Any) -> None:
    """Sets the priorities of a batch of slots.

    The whole batch is checked before anything is written; with repeated
    indices the last priority wins.

    A priority is a real number (a Python or NumPy integer or float; not
    a bool, string, bytes or complex number) that is 0 or lies in
    float32's positive range, [2**-149, 3.4028235e38]: `get_priority` then
    returns it (rounded to float32) and never 0 or inf. See
    docs/compat.md#prioritized_replay_buffer.

    Args:
      indices: integer array (any integer dtype) of slots in
        [0, replay_capacity).
      priorities: array-like of the same shape (or a scalar) of such
        priorities.

    Raises:
      ValueError: If the shapes differ, or a priority is not one (see
        above); errors.InvalidIndexError (an IndexError and ValueError)
        if an index is out of range; errors.InvalidIndexTypeError (a
        TypeError and ValueError) if the indices are not integers.
    """
    with self._priority_lock:
      if self.sum_tree.set_if_valid(indices, priorities):
        return
      indices = validation.check_index_array(indices, self._replay_capacity)
      if np.ndim(priorities) and np.shape(priorities) != indices.shape:
        raise ValueError(
            'priorities of shape {} do not match indices of shape {}.'.format(
                np.shape(priorities), indices.shape))
      self.sum_tree.set(indices, validation.check_priorities(
          priorities, indices.shape, 'priorities',
          self.sum_tree.priority_dtype))

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
      errors.InvalidIndexError: If an index is out of range.
      errors.InvalidIndexTypeError: If the indices are not integers.
    """
    with self._priority_lock:
      return self.sum_tree.get(validation.check_index_array(
          indices, self._replay_capacity)).astype(np.float32)

  # ---------------------------------------------------------- checkpoints

  # Checkpoints add the sum tree, as Dopamine's `sum_tree` file.
  checkpoint_extensions = (memory_checkpoint.SUM_TREE,)

  def get_sum_tree_state(self, leaves_only: bool = False) -> Dict[str, Any]:
    """`sum_tree.get_state(leaves_only)`, taken while no priority changes."""
    with self._priority_lock:
      return self.sum_tree.get_state(leaves_only)

  @property
  def sum_tree(self) -> sum_tree.SumTree:
    """The sum tree over the slots' priorities (assignable, as Dopamine's).

    An assigned tree must be a `SumTree` of the memory's capacity; the
    native ops, if bound, read it from then on.
    """
    return self._sum_tree

  @sum_tree.setter
  def sum_tree(self, tree: 'sum_tree.SumTree') -> None:
    if (not isinstance(tree, sum_tree.SumTree) or
        tree.capacity != self._replay_capacity):
      raise ValueError('sum_tree must be a SumTree of capacity {}, got '
                       '{!r}'.format(self._replay_capacity, tree))
    with self._lock, self._priority_lock:
      self._sum_tree = tree
      if self._native is not None and self._native.bound:
        self._native.bind(self)

  def set_sum_tree_state(self, state: Dict[str, Any]) -> None:
    """`sum_tree.set_state(state)`, while no priority is read or set."""
    with self._priority_lock:
      self.sum_tree.set_state(state)


@gin.configurable(
    denylist=['observation_shape', 'stack_size', 'update_horizon', 'gamma'])
class WrappedPrioritizedReplayBuffer(
    wrapped_replay_buffer.WrappedPrioritizedReplayBufferBase,
    circular_replay_buffer.WrappedReplayBuffer):
  """Graph-mode access to an `OutOfGraphPrioritizedReplayBuffer`.

  A `WrappedReplayBuffer` with `tf_set_priority` and `tf_get_priority` (see
  `wrapped_replay_buffer`); the sampled `transition` ends with
  `sampling_probabilities` (raw priorities). Every constructor argument
  reaches the memory.
  """

  _memory_class = OutOfGraphPrioritizedReplayBuffer
