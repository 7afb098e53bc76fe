# coding=utf-8
"""The out-of-graph circular replay memory, vectorized.

A drop-in replacement for ``dopamine.tf.replay_memory.circular_replay_buffer``
(Dopamine 4.1.2): same classes, constructor, methods, transition layout and
checkpoint format. Transitions live in a circular buffer, one frame per slot;
frame stacks and n-step returns are assembled at sample time (Mnih et al.,
2015; n-step returns as in Hessel et al., 2018), for a whole batch at once,
with no Python loop per transition.

The memory's parts live in modules of their own: the checks of `add`
(`add_checks`), the lazily backed storage (`lazy_storage`), sampling
(`sampling`), checkpoints (`memory_checkpoint`) and locks (`locking`). It
is NumPy only: importing this module does not import TensorFlow.
`WrappedReplayBuffer` (its body is `wrapped_replay_buffer`'s) and
`as_dataset` reach TensorFlow through `wrapped_replay_buffer`, when first
used. What differs from Dopamine: docs/compat.md#circular_replay_buffer.
"""

import collections
import math
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from absl import logging
import gin
import numpy as np

from dopamine_per import errors
from dopamine_per.file_io import gzip_files
from dopamine_per.replay_memory import add_checks
from dopamine_per.replay_memory import frame_stacks
from dopamine_per.replay_memory import kernels
from dopamine_per.replay_memory import lazy_storage
from dopamine_per.replay_memory import locking
from dopamine_per.replay_memory import memory_checkpoint
from dopamine_per.replay_memory import sampling
from dopamine_per.replay_memory import transition_kernels
from dopamine_per.replay_memory import validation
from dopamine_per.replay_memory import wrapped_replay_buffer

if TYPE_CHECKING:
  import tensorflow as tf  # pylint: disable=g-bad-import-order

__all__ = ['ReplayElement', 'STORE_FILENAME_PREFIX', 'DOPAMINE_PER_STATE_NAME',
           'modulo_range', 'invalid_range', 'OutOfGraphReplayBuffer',
           'WrappedReplayBuffer', 'latest_checkpoint_iteration',
           'synchronized']

# Describes one stored or returned element: its name, its shape (per
# transition for storage and add arguments, with the batch dimension for
# sampled batches) and its NumPy type.
ReplayElement = collections.namedtuple('ReplayElement',
                                       ['name', 'shape', 'type'])

# The checkpoint names, under their Dopamine module (see memory_checkpoint).
STORE_FILENAME_PREFIX = memory_checkpoint.STORE_FILENAME_PREFIX
DOPAMINE_PER_STATE_NAME = memory_checkpoint.DOPAMINE_PER_STATE_NAME
latest_checkpoint_iteration = memory_checkpoint.latest_checkpoint_iteration

# Default of `add`'s priority keyword: tells "not given" (an error for the
# prioritized memory, as in Dopamine) from None (its largest priority).
_OMITTED = object()

# Dopamine's functions of the slots the cursor blocks (see `sampling`), and
# the memories' lock decorator (see `locking`), where they used to be.
modulo_range = sampling.modulo_range
invalid_range = sampling.invalid_range
synchronized = locking.synchronized


@gin.configurable
class OutOfGraphReplayBuffer(object):
  """A circular replay memory with uniform, vectorized sampling.

  Stores transitions (observation, action, reward, terminal and any extra
  elements) one per slot and builds states as stacks of the last
  `stack_size` observations at sample time, so every frame is stored once.
  At the start of each episode `stack_size - 1` all-zero transitions are
  written first, so the first states of an episode are padded with zeros.

  Attributes:
    add_count: np.ndarray (0-d int64), how many transitions were written,
      padding included: at most `validation.MAX_ADD_COUNT` (2**53).
    invalid_range: np.ndarray, the slots next to the cursor that cannot be
      sampled (see `invalid_range`).
    episode_end_indices: set of int, the slots holding the last transition of
      an episode (terminal or `episode_end`). Maintained by `add`; treat it as
      read-only.
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
    """Creates an empty replay memory.

    Args:
      observation_shape: tuple of ints, the shape of one observation.
      stack_size: int, frames per state.
      replay_capacity: int, the number of transitions kept.
      batch_size: int, the default batch size.
      update_horizon: int, the N of N-step returns.
      gamma: float, the discount factor: a real number in [0, 1].
      max_sample_attempts: int, how many invalid draws `sample_index_batch`
        tolerates before giving up.
      extra_storage_types: list of ReplayElement, extra per-transition
        elements given to `add` after `terminal` and returned by sampling.
      observation_dtype: np.dtype of observations (uint8 for Atari).
      terminal_dtype: np.dtype of terminal flags.
      action_shape: tuple of ints, () for a scalar action.
      action_dtype: np.dtype of actions.
      reward_shape: tuple of ints, () for a scalar reward.
      reward_dtype: np.dtype of rewards; n-step returns are computed in it.
      checkpoint_duration: int, how many iterations a checkpoint is kept.
      keep_every: int or None; checkpoints whose iteration is a multiple of it
        are never garbage-collected.
      rng: None to draw indices from NumPy's global generator (``np.random``,
        as Dopamine; reproducible with ``np.random.seed``), or a
        ``numpy.random.Generator`` or seed for an own, checkpointed stream.

    Raises:
      ValueError: If an argument is malformed, or replay_capacity is smaller
        than update_horizon + stack_size. A non-tuple observation_shape (as
        Dopamine asserts), and a gamma that is not a real number in [0, 1]
        (NaN, inf, a string, a bool), raise dopamine_per.errors.ArgumentError,
        also an AssertionError.
    """
    if not isinstance(observation_shape, (tuple, list)):
      raise errors.ArgumentError('observation_shape must be a tuple, got '
                                 '{!r}'.format(observation_shape))
    check_int = validation.check_int
    self._observation_shape = add_checks.check_shape('observation_shape',
                                                     observation_shape)
    self._stack_size = check_int('stack_size', stack_size, 1)
    self._replay_capacity = check_int('replay_capacity', replay_capacity, 1)
    self._batch_size = check_int('batch_size', batch_size, 1)
    self._update_horizon = check_int('update_horizon', update_horizon, 1)
    self._max_sample_attempts = check_int('max_sample_attempts',
                                          max_sample_attempts, 0)
    self._checkpoint_duration = check_int('checkpoint_duration',
                                          checkpoint_duration, 1)
    self._keep_every = (None if keep_every is None else
                        check_int('keep_every', keep_every, 1))
    if self._replay_capacity < self._update_horizon + self._stack_size:
      raise ValueError('There is not enough capacity to cover '
                       'update_horizon and stack_size.')
    self._gamma = validation.check_real('gamma', gamma, 0.0, 1.0)
    self._observation_dtype = observation_dtype
    self._terminal_dtype = terminal_dtype
    self._action_shape = add_checks.check_shape('action_shape', action_shape)
    self._action_dtype = action_dtype
    self._reward_shape = add_checks.check_shape('reward_shape', reward_shape)
    self._reward_dtype = reward_dtype
    self._state_shape = self._observation_shape + (self._stack_size,)
    self._extra_storage_types = [
        ReplayElement(e.name, add_checks.check_shape(e.name + ' shape',
                                                     e.shape), e.type)
        for e in (extra_storage_types or [])]
    self._rng = validation.check_rng(rng)

    logging.info(
        'Creating a %s replay memory: observation_shape=%s (%s), '
        'stack_size=%d, replay_capacity=%d, batch_size=%d, update_horizon=%d, '
        'gamma=%f, terminal_dtype=%s, checkpoint_duration=%d, keep_every=%s.',
        self.__class__.__name__, self._observation_shape,
        np.dtype(observation_dtype).name, self._stack_size,
        self._replay_capacity, self._batch_size, self._update_horizon,
        self._gamma, np.dtype(terminal_dtype).name, self._checkpoint_duration,
        self._keep_every)

    self._create_storage()
    self._add_count = 0
    # Discount factors gamma^0 .. gamma^(N-1), in float32 as Dopamine, so
    # that returns come out bit-identical.
    self._cumulative_discount_vector = np.array(
        [math.pow(self._gamma, j) for j in range(self._update_horizon)],
        dtype=np.float32)
    self._next_experience_is_episode_start = True
    self.episode_end_indices = set()
    # Per-slot mirror of episode_end_indices, for vectorized validity checks.
    self._episode_end = np.zeros(self._replay_capacity, dtype=bool)
    self._stack_offsets = np.arange(1 - self._stack_size, 1, dtype=np.int64)
    self._lock = threading.RLock()
    # get_transition_elements(batch_size) by batch size, for sampling (see
    # `sampling.transition_batch`).
    self._batch_layouts = {}
    # Memory for sampled states, reused once the caller has dropped them.
    self._stack_buffers = frame_stacks.BufferPool()
    # The loops (compiled or NumPy's) for sampling and the sum tree, chosen
    # once (see `kernels`).
    self._kernels = kernels.choose()
    self._prepare_add()

  # ------------------------------------------------------------ signatures

  def _create_storage(self) -> None:
    """Allocates one zeroed array per stored element (lazily backed)."""
    # _mappings: the mapped arrays, backed ahead of the cursor up to slot
    # _populated (see `_write`).
    self._store, self._mappings = lazy_storage.allocate(
        self.get_storage_signature(), self._replay_capacity)
    self._populated = 0

  def _prepare_add(self) -> None:
    """Precomputes the per-argument checks and padding values of `add`."""
    signature = self.get_add_args_signature()
    self._add_specs = [add_checks.AddSpec(e.name, e.shape, e.type)
                       for e in signature]
    self._padding_values = [
        np.zeros(spec.shape, dtype=spec.dtype) if spec.shape else
        spec.dtype.type(0) for spec in self._add_specs]
    # A subclass's override of Dopamine's `_check_add_types` hook, which
    # `add` calls (None when not overridden: nothing to call).
    overridden = (type(self)._check_add_types is not
                  OutOfGraphReplayBuffer._check_add_types)
    self._add_check_override = self._check_add_types if overridden else None
    self._refresh_store_arrays()

  def _refresh_store_arrays(self) -> None:
    store = self._store
    self._store_arrays = [store[e.name] for e in self.get_storage_signature()]
    # The sampling loops for this storage, chosen once.
    self._valid_mask_loop = transition_kernels.valid_mask_function(
        store['terminal'], kernels=self._kernels)
    self._transitions_and_states = transition_kernels.TransitionsAndStates(
        store['observation'], self._stack_size, store['terminal'],
        store['reward'], self._cumulative_discount_vector,
        kernels=self._kernels)

  def get_add_args_signature(self) -> List[ReplayElement]:
    """Returns the elements `add` takes, in order.

    Returns:
      list of ReplayElement.
    """
    return self.get_storage_signature()

  def get_storage_signature(self) -> List[ReplayElement]:
    """Returns the elements stored per transition, in order.

    Returns:
      list of ReplayElement: observation, action, reward, terminal, then the
      extra storage types.
    """
    return [
        ReplayElement('observation', self._observation_shape,
                      self._observation_dtype),
        ReplayElement('action', self._action_shape, self._action_dtype),
        ReplayElement('reward', self._reward_shape, self._reward_dtype),
        ReplayElement('terminal', (), self._terminal_dtype),
    ] + list(self._extra_storage_types)

  def get_transition_elements(self, batch_size: Optional[int] = None
                             ) -> List[ReplayElement]:
    """Returns the layout of `sample_transition_batch`'s result.

    Args:
      batch_size: int, or None for the buffer's batch size.

    Returns:
      list of ReplayElement with batched shapes: state, action, reward,
      next_state, next_action, next_reward, terminal, indices, then the
      extra storage types.
    """
    batch_size = self._batch_size if batch_size is None else batch_size
    batch = (batch_size,)
    elements = [
        ReplayElement('state', batch + self._state_shape,
                      self._observation_dtype),
        ReplayElement('action', batch + self._action_shape,
                      self._action_dtype),
        ReplayElement('reward', batch + self._reward_shape,
                      self._reward_dtype),
        ReplayElement('next_state', batch + self._state_shape,
                      self._observation_dtype),
        ReplayElement('next_action', batch + self._action_shape,
                      self._action_dtype),
        ReplayElement('next_reward', batch + self._reward_shape,
                      self._reward_dtype),
        ReplayElement('terminal', batch, self._terminal_dtype),
        ReplayElement('indices', batch, np.int32),
    ]
    for element in self._extra_storage_types:
      elements.append(ReplayElement(element.name,
                                    batch + tuple(element.shape),
                                    element.type))
    return elements

  # ------------------------------------------------------------- counters

  @property
  def add_count(self) -> np.ndarray:
    """Transitions written so far, padding included (0-d int64 array).

    At most `validation.MAX_ADD_COUNT` (2**53; why: there): an `add` that
    would pass it raises OverflowError and writes nothing. Assignable, as
    Dopamine's attribute (tests set it to move the cursor): an integer in
    [0, 2**53], or an integer array holding one; anything else raises
    ValueError and changes nothing.
    """
    return np.array(self._add_count, dtype=np.int64)

  @add_count.setter
  def add_count(self, value: Any) -> None:
    count = validation.check_add_count(value)
    with self._lock:
      self._add_count = count

  @property
  def invalid_range(self) -> np.ndarray:
    """The slots next to the cursor that cannot be sampled.

    Before the first add this is ``np.zeros(stack_size)``, as in Dopamine.
    """
    if self._add_count == 0:
      return np.zeros(self._stack_size)
    return invalid_range(self.cursor(), self._replay_capacity,
                         self._stack_size, self._update_horizon)

  def is_empty(self) -> bool:
    """Returns whether nothing has been added."""
    return self._add_count == 0

  def is_full(self) -> bool:
    """Returns whether every slot has been written at least once."""
    return self._add_count >= self._replay_capacity

  def cursor(self) -> int:
    """Returns the slot the next transition will be written to."""
    return self._add_count % self._replay_capacity

  # ------------------------------------------------------------------ add

  # Whether `add` takes a priority, as its last argument (the prioritized
  # memory). Without one, `add` ignores a None priority, as Dopamine does.
  _takes_priority = False

  @synchronized('_lock')
  def add(self, observation: Any, action: Any, reward: Any, terminal: Any,
          *args: Any, priority: Any = _OMITTED, episode_end: bool = False
         ) -> None:
    """Adds a transition.

    The first add of an episode first writes `stack_size - 1` all-zero
    padding transitions. The next observation of the transition is the
    observation added next, so it is not passed. When the memory is full the
    oldest transition is overwritten. Every argument is checked before
    anything is written.

    Args:
      observation: array of shape observation_shape.
      action: the action (shape action_shape).
      reward: the reward (shape reward_shape).
      terminal: whether the transition ended the episode in a terminal state
        (the agent does not bootstrap past it).
      *args: the extra storage elements, in order (and, for prioritized
        memories, the priority last unless given by keyword).
      priority: the priority, for memories that take one (see the
        prioritized memory); it follows the positional arguments, as in
        Dopamine. A memory that takes none ignores None and rejects any
        other value.
      episode_end: whether this is the episode's last transition without
        being terminal (e.g. a time limit). The memory will not build n-step
        returns or frame stacks across it.

    Raises:
      ValueError: If the number of arguments is wrong, or an argument has the
        wrong shape or cannot be stored in its element's dtype (the message
        names the argument, the value or shape given and the one expected).
      OverflowError: If the transitions this add writes (padding included)
        would take `add_count` past `validation.MAX_ADD_COUNT`.
    """
    values = [observation, action, reward, terminal, *args]
    if priority is not _OMITTED and (priority is not None or
                                     self._takes_priority):
      values.append(priority)
    if self._add_check_override is not None:
      self._add_check_override(*values)
    values = self._check_add_args(values)
    ends_episode = bool(episode_end) or bool(values[3])
    validation.check_room_to_add(
        self._add_count,
        self._stack_size if self._next_experience_is_episode_start else 1)
    if self._next_experience_is_episode_start:
      for _ in range(self._stack_size - 1):
        self._write(self._padding_values, False)
      self._next_experience_is_episode_start = False
    self._write(values, ends_episode)
    if ends_episode:
      self._next_experience_is_episode_start = True

  def _check_add_args(self, values: List[Any]) -> List[Any]:
    """Checks (and where needed converts) the arguments of `add`.

    Args:
      values: list of the arguments, in `get_add_args_signature` order.

    Returns:
      list of values, in `get_add_args_signature` order, ready to be written.

    Raises:
      ValueError: see `add`.
    """
    if len(values) != len(self._add_specs):
      self._check_args_length(*values)
    return add_checks.check_values(self._add_specs, values)

  def _check_args_length(self, *args: Any) -> None:
    """Dopamine's hook: checks the number of arguments of `add`.

    Args:
      *args: the arguments, in `get_add_args_signature` order.

    Raises:
      ValueError: 'Add expects N elements (names), received M', as Dopamine.
    """
    specs = self._add_specs
    if len(args) != len(specs):
      raise ValueError('Add expects {} elements ({}), received {}'.format(
          len(specs), ', '.join(s.name for s in specs), len(args)))

  def _check_add_types(self, *args: Any) -> None:
    """Dopamine's hook: checks the arguments of `add` without adding them.

    Runs the same checks as `add` (number, shapes, and values that the
    storage dtypes hold exactly). A subclass may override it, as in
    Dopamine: `add` then calls the override first, with the arguments in
    `get_add_args_signature` order, and runs its own checks after it.

    Args:
      *args: the arguments, in `get_add_args_signature` order.

    Raises:
      ValueError: 'Add expects ...' for a wrong number of arguments, or a
        message naming the argument whose shape or value does not fit.
    """
    self._check_add_args(list(args))

  def _write(self, values: Sequence[Any], ends_episode: bool) -> None:
    """Writes one transition at the cursor and advances it.

    Args:
      values: `add`'s checked values (or the padding), in
        `get_add_args_signature` order: the storage elements' first.
      ends_episode: whether the slot holds the last transition of an episode.
    """
    cursor = self._add_count % self._replay_capacity
    if cursor >= self._populated and self._mappings:
      # Backs the next chunk of slots in one call (see lazy_storage).
      self._populated = lazy_storage.populate(self._mappings, cursor,
                                              self._replay_capacity)
    self._on_write(cursor, values)
    for array, value in zip(self._store_arrays, values):
      array[cursor] = value
    self._episode_end[cursor] = ends_episode
    if ends_episode:
      self.episode_end_indices.add(cursor)
    else:
      self.episode_end_indices.discard(cursor)
    self._add_count += 1

  def _on_write(self, slot: int, values: Sequence[Any]) -> None:
    """Hook of `add`, per slot written (padding too), before the storage.

    Does nothing here; the prioritized memory writes the slot's priority
    (its last value) to its sum tree. `add` holds `_lock`.

    Args:
      slot: int, the slot being written.
      values: `add`'s checked values for it, in `get_add_args_signature`
        order.
    """

  # ---------------------------------------------------------------- reads

  def get_range(self, array: np.ndarray, start_index: int, end_index: int
               ) -> np.ndarray:
    """Returns ``array[start_index:end_index]``, wrapping around the end.

    Args:
      array: np.ndarray with the capacity as first dimension.
      start_index: int, first slot (may be negative: it wraps).
      end_index: int, exclusive end slot (may exceed the capacity: it wraps).

    Returns:
      np.ndarray of shape [end_index - start_index, ...].

    Raises:
      dopamine_per.errors.ArgumentError: (a ValueError and an AssertionError,
        as Dopamine asserts) If the range is empty or malformed, or reaches
        slots not written yet.
    """
    return sampling.slot_range(array, start_index, end_index,
                               self._add_count, self._replay_capacity)

  def get_observation_stack(self, index: Any) -> np.ndarray:
    """Returns the state ending at slot `index` (frames on the last axis).

    Args:
      index: int, or an integer array for a batch of states.

    Returns:
      np.ndarray of shape observation_shape + (stack_size,), with the batch
      shape in front for an array of indices.

    Raises:
      dopamine_per.errors.ArgumentError: (a ValueError and an AssertionError,
        as Dopamine asserts) If an index is out of range or not written yet.
    """
    indices = sampling.check_stack_indices(index, self._add_count,
                                           self._replay_capacity)
    states = frame_stacks.gather_stacks_ending_at(
        self._store['observation'], indices.reshape(-1), self._stack_size,
        kernels=self._kernels, pool=self._stack_buffers)
    return states.reshape(indices.shape + self._state_shape)

  def get_terminal_stack(self, index: Any) -> np.ndarray:
    """Returns the terminal flags of the `stack_size` slots ending at `index`.

    Args:
      index: int, or an integer array.

    Returns:
      np.ndarray of shape [stack_size] (batch shape in front for an array).

    Raises:
      dopamine_per.errors.ArgumentError: (a ValueError and an AssertionError,
        as Dopamine asserts) If an index is out of range or not written yet.
    """
    indices = sampling.check_stack_indices(index, self._add_count,
                                           self._replay_capacity)
    windows = (indices[..., None] + self._stack_offsets) % self._replay_capacity
    return self._store['terminal'][windows]

  # ------------------------------------------------------------- sampling

  def _valid_mask(self, indices: np.ndarray) -> np.ndarray:
    """Vectorized validity of a 1-D int64 array of slots (see is_valid...)."""
    return self._valid_mask_loop(
        indices, self._replay_capacity, self._add_count,
        self._update_horizon, self._stack_size, self._episode_end,
        self._store['terminal'])

  def _invalid_reason(self, index: int) -> str:
    """Why slot `index` is not a valid transition (for errors)."""
    return sampling.invalid_reason(
        index, self._add_count, self._replay_capacity, self._stack_size,
        self._update_horizon, self._episode_end)

  def is_valid_transition(self, index: Any) -> Any:
    """Returns whether slot `index` holds a transition that can be sampled.

    A slot is valid if its n-step trajectory and next state have been
    written and do not straddle the cursor, its frame stack does not reach
    back into a previous episode, and no episode ends without a terminal
    inside its trajectory before the return is cut (see
    docs/compat.md#which-transitions-are-valid).

    Args:
      index: int, or an integer array of slots.

    Returns:
      bool, or a bool array shaped like `index`.

    Raises:
      ValueError: If an index is not an integer.
    """
    return sampling.is_valid(index, self._valid_mask)

  def _check_batch_size(self, batch_size: Any) -> int:
    return validation.check_int('batch_size', batch_size, 1)

  def _sampling_range(self) -> Tuple[int, int]:
    """[low, high) of uniform draws (see `sampling.sampling_range`)."""
    return sampling.sampling_range(self._add_count, self._replay_capacity,
                                   self._stack_size, self._update_horizon)

  def _draw_uniform(self, count: int) -> np.ndarray:
    low, high = self._sampling_range()
    if self._rng is None:
      draws = np.random.randint(low, high, size=count)
    else:
      draws = self._rng.integers(low, high, size=count)
    return draws.astype(np.int64) % self._replay_capacity

  @synchronized('_lock')
  def sample_index_batch(self, batch_size: int) -> np.ndarray:
    """Returns `batch_size` valid slots drawn uniformly (with replacement).

    Args:
      batch_size: int, the number of indices.

    Returns:
      np.ndarray of int64 with shape [batch_size].

    Raises:
      RuntimeError: If too few transitions have been added, or
        max_sample_attempts draws were invalid before the batch was complete.
      ValueError: If batch_size is not a positive int.
    """
    batch_size = self._check_batch_size(batch_size)
    self._sampling_range()
    return sampling.redraw_invalid(self._draw_uniform(batch_size),
                                   self._valid_mask, self._draw_uniform,
                                   self._max_sample_attempts)

  @synchronized('_lock')
  def sample_transition_batch(self, batch_size: Optional[int] = None,
                              indices: Any = None) -> Tuple[np.ndarray, ...]:
    """Returns a batch of transitions.

    Elements follow `get_transition_elements`. ``reward`` is the n-step
    return sum_j gamma^j r_{t+j}, cut after the first terminal; ``terminal``
    says whether it was cut; ``next_state`` is the state after the last step
    of the (cut) trajectory (meaningless for terminal transitions).
    Elements that this class does not know (added by a subclass) are
    returned uninitialized, for the subclass to fill.

    Args:
      batch_size: int, or None for the buffer's batch size (or the number of
        `indices` when given).
      indices: None to sample uniformly, or a sequence of valid slots.

    Returns:
      tuple of np.ndarray, one per transition element.

    Raises:
      ValueError: If an index is not an integer, out of range or not a valid
        transition, or batch_size does not match len(indices) (then a
        dopamine_per.errors.ArgumentError, also an AssertionError, as
        Dopamine asserts).
      RuntimeError: See `sample_index_batch`.
    """
    return sampling.transition_batch(self, batch_size, indices)

  def _create_batch_arrays(self, batch_size: int) -> Tuple[np.ndarray, ...]:
    """Dopamine's hook: uninitialized arrays shaped like a batch.

    Args:
      batch_size: int, or None for the memory's batch size.

    Returns:
      tuple of np.ndarray, one per `get_transition_elements(batch_size)`.
    """
    return tuple(np.empty(element.shape, dtype=element.type)
                 for element in self.get_transition_elements(batch_size))

  def _transition_element(self, element: ReplayElement, indices: np.ndarray
                         ) -> np.ndarray:
    """Returns a transition element the base class does not compute.

    Subclasses override this to fill their own elements.

    Args:
      element: ReplayElement with the batched shape.
      indices: int64 array of the sampled slots.

    Returns:
      np.ndarray of element.shape and element.type (uninitialized here).
    """
    del indices
    return np.empty(element.shape, dtype=element.type)

  def as_dataset(self, batch_size: Optional[int] = None,
                 prefetch: int = 1) -> 'tf.data.Dataset':
    """Returns an endless `tf.data.Dataset` of sampled batches (eager TF2).

    Each element is a dict mapping the names of `get_transition_elements`
    to tensors of their shapes and dtypes, sampled by
    `sample_transition_batch` on tf.data's threads (under the memory's
    lock, so `add` and priority updates may run meanwhile). `prefetch`
    batches are sampled ahead, overlapping with a `tf.function` training
    step, as staging does in graph mode. Imports TensorFlow.

    Args:
      batch_size: int, or None for the memory's batch size.
      prefetch: int >= 0, batches sampled ahead.

    Returns:
      tf.data.Dataset.
    """
    return wrapped_replay_buffer.tensorflow_side().dataset(self, batch_size,
                                                           prefetch)

  # ---------------------------------------------------------- checkpoints

  # Files a memory class adds to the checkpoint (the prioritized memory: its
  # sum tree); see `memory_checkpoint.CheckpointExtension`.
  _checkpoint_extensions = ()

  def _return_checkpointable_elements(self) -> Dict[str, Any]:
    """Returns {file name: value} of what `save` writes, as Dopamine's hook.

    Overriding it does not change what `save` writes (see
    docs/compat.md#memory_checkpoint).
    """
    return memory_checkpoint.checkpointable_elements(self)

  def _generate_filename(self, checkpoint_dir: str, name: str,
                         suffix: Any) -> str:
    """Returns the path of checkpoint file `name` (Dopamine's hook)."""
    return gzip_files.checkpoint_filename(checkpoint_dir, name, suffix)

  @synchronized('_lock')
  def save(self, checkpoint_dir: str, iteration_number: int) -> None:
    """Writes the memory to `checkpoint_dir` in Dopamine's format.

    One gzip file per attribute, ``{name}_ckpt.{iteration_number}.gz`` (the
    storage arrays, the counters and, as in Dopamine, every other public
    attribute), plus a ``dopamine_per_state`` file for what Dopamine does not
    save. The checkpoint is replaced as a whole: a save failed or killed at any
    point leaves all of the previous one or all of the new one. Then the
    checkpoint `checkpoint_duration` iterations older is deleted (unless a
    multiple of keep_every), with the temporaries killed saves left. See
    `memory_checkpoint.save`; what differs from Dopamine:
    docs/compat.md#memory_checkpoint.

    Args:
      checkpoint_dir: str, an existing directory; if it does not exist, a
        warning is logged and nothing is written.
      iteration_number: int, the checkpoint's suffix.

    Raises:
      TypeError: If a public attribute holds something other than plain data
        (see `safe_pickle.non_plain_data`); nothing is written then.
      ValueError: If a public attribute's name cannot name a file.
      OSError: If writing fails (a full disk ...): the checkpoint of
        `iteration_number` is then the previous one, or the new one if the
        failure came after the commit point.
    """
    memory_checkpoint.save(self, checkpoint_dir, iteration_number)

  @synchronized('_lock')
  def load(self, checkpoint_dir: str, suffix: Any) -> None:
    """Restores the memory from a checkpoint written by this class or Dopamine.

    All-or-nothing: every file is checked to exist, then read and validated
    against this memory's configuration, and only then assigned; on any
    error the memory is left exactly as it was. The public attributes this
    memory has when `load` is called are restored from their files (see
    `save`), as in Dopamine. See `memory_checkpoint.load`.

    Args:
      checkpoint_dir: str, the directory.
      suffix: int or str, the checkpoint's iteration number.

    Raises:
      atomic_files.CheckpointNotFoundError: If an expected file is missing
        (but episode_end_indices, which old checkpoints lack: episode ends
        then come from the terminal flags); a FileNotFoundError and a
        CheckpointError, and a tf.errors.NotFoundError as in Dopamine where
        TensorFlow is loaded already (it is never imported to raise this).
      atomic_files.CheckpointError: (a ValueError) If a file is corrupt,
        unsafe, not a regular file, larger than this memory can need, or
        does not match this memory's configuration, whatever the underlying
        error; it names the file where it is known.
    """
    memory_checkpoint.load(self, checkpoint_dir, suffix)


@gin.configurable(
    denylist=['observation_shape', 'stack_size', 'update_horizon', 'gamma'])
class WrappedReplayBuffer(wrapped_replay_buffer.WrappedReplayBufferBase):
  """Graph-mode access to an `OutOfGraphReplayBuffer`.

  Builds its memory and the ops that sample it: see
  `wrapped_replay_buffer.WrappedReplayBufferBase`. TensorFlow is imported
  when the first one is built, not by defining or configuring it.
  """

  _memory_class = OutOfGraphReplayBuffer
