# coding=utf-8
"""The out-of-graph circular replay memory, vectorized.

A drop-in replacement for ``dopamine.tf.replay_memory.circular_replay_buffer``
(Dopamine 4.1.2): same classes, constructor, methods, transition layout and
checkpoint format. Transitions live in a circular buffer, one frame per slot;
frame stacks and n-step returns are assembled at sample time for a whole
batch at once (docs/architecture.md#the-path-of-a-sampled-batch).

Importing this module does not import TensorFlow (`WrappedReplayBuffer`
and `as_dataset` load it when first used). What differs from Dopamine:
docs/compat.md#circular_replay_buffer.
"""

import collections
import concurrent.futures
import math
import operator
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from absl import logging
import gin
import numpy as np

from dopamine_per import errors
from dopamine_per.file_io import gzip_files
from dopamine_per.native import native_memory as native_memory_lib
from dopamine_per.replay_memory.checkpoint import checkpoints
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from dopamine_per.replay_memory.graph import wrapped_replay_buffer
from dopamine_per.replay_memory.kernels import choice
from dopamine_per.replay_memory.memory import add_checks
from dopamine_per.replay_memory.memory import batch_plan
from dopamine_per.replay_memory.memory import sampling
from dopamine_per.replay_memory.memory import shipped_frames
from dopamine_per.replay_memory.memory import storage
from dopamine_per.replay_memory.memory import validation

if TYPE_CHECKING:
  import tensorflow as tf  # pylint: disable=g-bad-import-order

__all__ = ['ReplayElement', 'STORE_FILENAME_PREFIX', 'modulo_range',
           'invalid_range', 'OutOfGraphReplayBuffer', 'WrappedReplayBuffer']

# One stored or returned element: name, shape (per transition, or with the
# batch dimension for sampled batches) and NumPy type.
ReplayElement = collections.namedtuple('ReplayElement', 'name shape type')

STORE_FILENAME_PREFIX = memory_checkpoint.STORE_FILENAME_PREFIX
modulo_range = sampling.modulo_range
invalid_range = sampling.invalid_range

# Default of `add`'s priority keyword: tells "not given" (an error for the
# prioritized memory, as in Dopamine) from None (its largest priority).
_OMITTED = object()


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
    episode_end_indices: set of int (read-only), the slots holding the last
      transition of an episode (terminal or `episode_end`).
    storage: storage.CircularStorage, the arrays and counters (read-only).
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
               kernels: choice.KernelsLike = None,
               compress_observations: bool = False,
               checkpoint_format: Optional[str] = None):
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
      kernels: the per-batch loops, as `choice.choose` takes them (None:
        the DOPAMINE_PER_KERNELS environment variable, else 'auto').
      compress_observations: bool, store the frames compressed in blocks
        (`frame_blocks`; the `compress` extra): ~15x less memory on Atari.
      checkpoint_format: 'dopamine' (Dopamine's files) or 'chunks'
        (`chunk_checkpoint`); None: 'chunks' iff compress_observations.

    Raises:
      ValueError: If an argument is malformed (an extra's name: see
        `add_checks.check_extra`), or replay_capacity is below
        update_horizon + stack_size or above 2**31 - 1. A non-tuple
        observation_shape (as Dopamine asserts), and a gamma not a real in
        [0, 1] (NaN, inf, a string, a bool), raise errors.ArgumentError.
    """
    if not isinstance(observation_shape, (tuple, list)):
      raise errors.ArgumentError('observation_shape must be a tuple, got '
                                 '{!r}'.format(observation_shape))
    check_int = validation.check_int
    self._observation_shape = add_checks.check_shape('observation_shape',
                                                     observation_shape)
    self._stack_size = check_int('stack_size', stack_size, 1)
    self._replay_capacity = check_int('replay_capacity', replay_capacity, 1,
                                      validation.MAX_REPLAY_CAPACITY)
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
    native = add_checks.native_byte_order
    self._observation_dtype = native(observation_dtype)
    self._terminal_dtype = native(terminal_dtype)
    self._action_shape = add_checks.check_shape('action_shape', action_shape)
    self._action_dtype = native(action_dtype)
    self._reward_shape = add_checks.check_shape('reward_shape', reward_shape)
    self._reward_dtype = native(reward_dtype)
    self._state_shape = self._observation_shape + (self._stack_size,)
    self._extra_storage_types = [ReplayElement(*add_checks.check_extra(e))
                                 for e in (extra_storage_types or [])]
    self._rng = validation.check_rng(rng)
    self._kernels = choice.choose(kernels)

    logging.info(
        'Creating a %s replay memory: observation_shape=%s (%s), '
        'stack_size=%d, replay_capacity=%d, batch_size=%d, update_horizon=%d, '
        'gamma=%f, terminal_dtype=%s, checkpoint_duration=%d, keep_every=%s.',
        self.__class__.__name__, self._observation_shape,
        np.dtype(observation_dtype).name, self._stack_size,
        self._replay_capacity, self._batch_size, self._update_horizon,
        self._gamma, np.dtype(terminal_dtype).name, self._checkpoint_duration,
        self._keep_every)

    self._storage = storage.CircularStorage(
        self.get_storage_signature(), self._replay_capacity,
        ['observation'] if compress_observations else ())
    self._checkpoint_format = memory_checkpoint.check_format(
        checkpoint_format, compress_observations)
    # gamma^0 .. gamma^(N-1), in float32 as Dopamine's.
    self._cumulative_discount_vector = np.array(
        [math.pow(self._gamma, j) for j in range(self._update_horizon)],
        dtype=np.float32)
    self._stack_offsets = np.arange(1 - self._stack_size, 1, dtype=np.int64)
    # The add count from which a batch can be sampled (sampling_range).
    self._sampleable_from = self._stack_size + self._update_horizon
    # The memory's entry in the native registry, or None where the library
    # cannot be built.
    self._native = native_memory_lib.create(self)
    # Guards the storage, for every public method and the native ops.
    self._lock = native_memory_lib.lock_of(self._native)
    # The native sampler, or None; False until decided (_native_sampler).
    self._sampler = False
    # Batch plans by batch size (see _batch_plan).
    self._batch_plans = batch_plan.PlanCache()
    # Memory for sampled batches, reused once the caller has dropped them.
    self._stack_buffers = storage.BufferPool()
    self._checkpoints = checkpoints.Checkpoints(self._lock)
    self._prepare_add()

  # ------------------------------------------------------------ signatures

  def _prepare_add(self) -> None:
    """Precomputes the per-argument checks and padding values of `add`."""
    self._add_specs, self._padding_values = add_checks.specs_and_padding(
        self.get_add_args_signature())
    # A subclass's override of Dopamine's `_check_add_types` hook, or None.
    overridden = (type(self)._check_add_types is not
                  OutOfGraphReplayBuffer._check_add_types)
    self._add_check_override = self._check_add_types if overridden else None

  def get_add_args_signature(self) -> List[ReplayElement]:
    """Returns the elements `add` takes, in order (list of ReplayElement)."""
    return self.get_storage_signature()

  def get_storage_signature(self) -> List[ReplayElement]:
    """Returns the elements stored per transition, in order: observation,
    action, reward, terminal, then the extra storage types."""
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
      next_state, next_action, next_reward, terminal, indices, extras.
    """
    batch = (self._batch_size if batch_size is None else batch_size,)
    state = (batch + self._state_shape, self._observation_dtype)
    action = (batch + self._action_shape, self._action_dtype)
    reward = (batch + self._reward_shape, self._reward_dtype)
    return [
        ReplayElement('state', *state), ReplayElement('action', *action),
        ReplayElement('reward', *reward), ReplayElement('next_state', *state),
        ReplayElement('next_action', *action),
        ReplayElement('next_reward', *reward),
        ReplayElement('terminal', batch, self._terminal_dtype),
        ReplayElement('indices', batch, np.int32),
    ] + [ReplayElement(e.name, batch + tuple(e.shape), e.type)
         for e in self._extra_storage_types]

  # ------------------------------------------------------------- counters

  @property
  def add_count(self) -> np.ndarray:
    """Transitions written so far, padding included (0-d int64 array).

    At most `validation.MAX_ADD_COUNT`: an `add` that would pass it raises
    OverflowError and writes nothing. Assignable, as Dopamine's attribute:
    an integer in [0, MAX_ADD_COUNT] or an array holding one; else
    ValueError, and nothing changes.
    """
    return np.array(self._storage.add_count, dtype=np.int64)

  @add_count.setter
  def add_count(self, value: Any) -> None:
    count = validation.check_add_count(value)
    with self._lock:
      self._storage.add_count = count

  @property
  def _store(self) -> Dict[str, np.ndarray]:
    """Dopamine's private dict of storage arrays, which its users read."""
    return self._storage.arrays

  # Read-only: the storage, episode ends (Dopamine's), the generator (None:
  # NumPy's), the registry entry (or None), the configuration.
  storage = property(operator.attrgetter('_storage'))
  native = property(operator.attrgetter('_native'))
  episode_end_indices = property(
      operator.attrgetter('_storage.episode_end_indices'))
  rng = property(operator.attrgetter('_rng'))
  replay_capacity = property(operator.attrgetter('_replay_capacity'))
  stack_size = property(operator.attrgetter('_stack_size'))
  update_horizon = property(operator.attrgetter('_update_horizon'))
  checkpoint_duration = property(operator.attrgetter('_checkpoint_duration'))
  keep_every = property(operator.attrgetter('_keep_every'))
  max_sample_attempts = property(operator.attrgetter('_max_sample_attempts'))
  # gamma^0 .. gamma^(n-1), float32: the weights of an n-step return.
  discounts = property(operator.attrgetter('_cumulative_discount_vector'))

  @property
  def invalid_range(self) -> np.ndarray:
    """The slots next to the cursor that cannot be sampled (Dopamine's:
    ``np.zeros(stack_size)`` before the first add)."""
    if self._storage.add_count == 0:
      return np.zeros(self._stack_size)
    return invalid_range(self.cursor(), self._replay_capacity,
                         self._stack_size, self._update_horizon)

  @property
  def checkpoint_format(self) -> str:
    """'dopamine' or 'chunks': the files `save` writes."""
    return self._checkpoint_format

  @property
  def nbytes(self) -> int:
    """Resident bytes (NumPy's name): `CircularStorage.resident_nbytes`,
    batch buffers, (prioritized) the sum tree; not the episode ends."""
    with self._lock:
      return self._storage.resident_nbytes + self._stack_buffers.held_bytes

  def is_empty(self) -> bool:
    """Returns whether nothing has been added."""
    return self._storage.add_count == 0

  def is_full(self) -> bool:
    """Returns whether every slot has been written at least once."""
    return self._storage.add_count >= self._replay_capacity

  def cursor(self) -> int:
    """Returns the slot the next transition will be written to."""
    return self._storage.cursor()

  # ------------------------------------------------------------------ add

  # Whether `add` takes a priority as its last argument; if not, it ignores
  # a None priority, as Dopamine does.
  _takes_priority = False

  def add(self, observation: Any, action: Any, reward: Any, terminal: Any,
          *args: Any, priority: Any = _OMITTED, episode_end: bool = False
         ) -> None:
    """Adds a transition.

    The first add of an episode first writes `stack_size - 1` all-zero
    padding transitions; the next observation is the one added next; a
    full memory overwrites its oldest transition. Every argument is checked
    before anything is written.

    Args:
      observation: array of shape observation_shape.
      action: the action (shape action_shape).
      reward: the reward (shape reward_shape).
      terminal: whether the transition ended the episode in a terminal state
        (the agent does not bootstrap past it).
      *args: the extra storage elements, in order (and, for prioritized
        memories, the priority last unless given by keyword).
      priority: the priority, for memories that take one (after the
        positional arguments, as in Dopamine); a memory that takes none
        ignores None and rejects any other value.
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
    with self._lock:
      if self._add_check_override is not None:
        self._add_check_override(*values)
      values = self._check_add_args(values)
      ends_episode = bool(episode_end) or bool(values[3])
      starts = self._storage.episode_start
      validation.check_room_to_add(self._storage.add_count,
                                   self._stack_size if starts else 1)
      if starts:
        for _ in range(self._stack_size - 1):
          self._write(self._padding_values, False)
      self._write(values, ends_episode)

  def _check_add_args(self, values: List[Any]) -> List[Any]:
    """`add`'s arguments checked and converted, ready to be written;
    ValueError: see `add`."""
    if len(values) != len(self._add_specs):
      self._check_args_length(*values)
    return add_checks.check_values(self._add_specs, values)

  def _check_args_length(self, *args: Any) -> None:
    """Dopamine's hook: 'Add expects N elements ...' (ValueError) unless N."""
    specs = self._add_specs
    if len(args) != len(specs):
      raise ValueError('Add expects {} elements ({}), received {}'.format(
          len(specs), ', '.join(s.name for s in specs), len(args)))

  def _check_add_types(self, *args: Any) -> None:
    """Dopamine's hook: checks the arguments of `add` without adding them.

    Runs `add`'s checks. A subclass may override it, as in Dopamine: `add`
    then calls the override first, then runs its own checks.
    """
    self._check_add_args(list(args))

  def _write(self, values: Sequence[Any], ends_episode: bool) -> None:
    """Writes `add`'s checked values (or the padding) at the cursor."""
    self._on_write(self._storage.cursor(), values)
    self._storage.write(values, ends_episode)

  def _on_write(self, slot: int, values: Sequence[Any]) -> None:
    """Hook of `add` (under `_lock`): `slot` gets checked `values` (padding
    too), next. The prioritized memory writes the slot's priority (its last
    value) to its sum tree."""

  # ---------------------------------------------------------------- reads

  def get_range(self, array: np.ndarray, start_index: int, end_index: int
               ) -> np.ndarray:
    """``array[start_index:end_index]``, wrapping around the end (arguments
    and errors: `sampling.slot_range`)."""
    return sampling.slot_range(array, start_index, end_index,
                               self._storage.add_count, self._replay_capacity)

  def get_observation_stack(self, index: Any) -> np.ndarray:
    """Returns the state ending at slot `index` (frames on the last axis).

    `index` is an int, or an integer array for a batch of states; the
    result has shape observation_shape + (stack_size,), batch shape first.

    Raises:
      dopamine_per.errors.ArgumentError: (a ValueError and an AssertionError,
        as Dopamine asserts) If an index is out of range or not written yet.
    """
    with self._lock:
      indices = sampling.check_stack_indices(index, self._storage.add_count,
                                             self._replay_capacity)
      ends = indices.reshape(-1)
      states = self._stack_buffers.empty((len(ends),) + self._state_shape,
                                         self._observation_dtype)
      self._kernels.stacks_ending_at(self._storage.arrays['observation'],
                                     ends, self._stack_size, states)
    return states.reshape(indices.shape + self._state_shape)

  def get_terminal_stack(self, index: Any) -> np.ndarray:
    """The `stack_size` terminal flags ending at `index` (arguments and
    errors: `get_observation_stack`)."""
    with self._lock:
      indices = sampling.check_stack_indices(index, self._storage.add_count,
                                             self._replay_capacity)
      return self._storage.arrays['terminal'][
          (indices[..., None] + self._stack_offsets) % self._replay_capacity]

  # ------------------------------------------------------------- sampling

  def _native_sampler(self) -> Optional[native_memory_lib.NativeMemory]:
    """The native memory sampling this one (or None: NumPy's), once."""
    if self._sampler is False:
      self._sampler = native_memory_lib.sampler_of(self, self._native,
                                                   self._kernels.compiled)
    return self._sampler

  def _valid_mask(self, indices: np.ndarray) -> np.ndarray:
    """Validity of a 1-D int64 array of slots (see is_valid_transition)."""
    sampler = self._native_sampler()
    if sampler is not None:
      return sampler.valid_mask(indices)
    store, count = self._storage, int(self._storage.counters[0])
    return self._kernels.valid_mask(
        indices, self._replay_capacity, count, self._update_horizon,
        self._stack_size, store.episode_end, store.arrays['terminal'])

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
    indices = np.asarray(index)
    if indices.dtype.kind not in 'iu':
      raise ValueError('index must be an integer, got {!r}'.format(index))
    with self._lock:
      mask = self._valid_mask(indices.reshape(-1).astype(np.int64))
    return bool(mask[0]) if indices.ndim == 0 else mask.reshape(indices.shape)

  def _sampling_range(self) -> Tuple[int, int]:
    """[low, high) of uniform draws (see `sampling.sampling_range`)."""
    return sampling.sampling_range(int(self._storage.counters[0]),
                                   self._replay_capacity, self._stack_size,
                                   self._update_horizon)

  def _draw(self, count: int) -> np.ndarray:
    """Draws `count` candidate slots, uniformly (the prioritized memory
    draws from its sum tree)."""
    low, high = self._sampling_range()
    if self._rng is None:
      draws = np.random.randint(low, high, size=count)
    else:
      draws = self._rng.integers(low, high, size=count)
    return draws.astype(np.int64) % self._replay_capacity

  def _redraw(self, count: int) -> np.ndarray:
    """Draws `count` replacements for invalid candidates (as `_draw`)."""
    return self._draw(count)

  def _sample_indices(self, batch_size: int) -> np.ndarray:
    """`batch_size` valid slots: drawn, and invalid ones redrawn in
    vectorized rounds, every invalid draw counting against
    max_sample_attempts (the policy of sampler.h's SampleIndices)."""
    if self._storage.counters[0] < self._sampleable_from:
      self._sampling_range()  # Raises: too few transitions were added.
    return self._redraw_invalid(self._draw(batch_size))

  def _redraw_invalid(self, candidates: np.ndarray) -> np.ndarray:
    """`candidates`, first draws, with the invalid ones redrawn."""
    valid = self._valid_mask(candidates)
    if 0 not in valid.tobytes():  # All valid (cheaper than all()).
      return candidates
    batch_size = len(candidates)
    pending = np.flatnonzero(~valid)
    failures = 0
    while len(pending):
      failures += len(pending)
      if failures >= self._max_sample_attempts:
        raise sampling.attempts_exhausted(self._max_sample_attempts,
                                          batch_size - len(pending),
                                          batch_size)
      candidates[pending] = self._redraw(len(pending))
      pending = pending[~self._valid_mask(candidates[pending])]
    return candidates

  def sample_index_batch(self, batch_size: int) -> np.ndarray:
    """Returns `batch_size` valid slots, drawn with replacement.

    Drawn uniformly here; the prioritized memory draws one slot from each of
    `batch_size` equal strata of the total priority. Draws that land on
    invalid slots are redrawn (see `_sample_indices`).

    Args:
      batch_size: int, the number of indices.

    Returns:
      np.ndarray of int64 with shape [batch_size].

    Raises:
      RuntimeError: If too few transitions have been added, or
        max_sample_attempts draws were invalid before the batch was complete.
      ValueError: If batch_size is not a positive int, or (prioritized)
        every priority is zero.
    """
    batch_size = validation.check_int('batch_size', batch_size, 1)
    with self._lock:
      return self._sample_indices(batch_size)

  def sample_transition_batch(self, batch_size: Optional[int] = None,
                              indices: Any = None, ship_frames: bool = False
                             ) -> Tuple[Any, ...]:
    """Returns a batch of transitions.

    Elements follow `get_transition_elements`. ``reward`` is the n-step
    return sum_j gamma^j r_{t+j}, cut after the first terminal; ``terminal``
    says whether it was cut; ``next_state`` is the state after the last step
    of the (cut) trajectory (meaningless for terminal transitions).
    Elements that this class does not know (added by a subclass) come from
    `_transition_element`.

    Args:
      batch_size: int, or None for the buffer's batch size (or the number of
        `indices` when given).
      indices: None to sample, or a sequence of valid slots.
      ship_frames: bool; if the frames are stored compressed, the batch's
        states stay the blocks they read (`shipped_frames.shipped_batch`:
        a ShippedFrames at ``state``, None at ``next_state``), nothing
        decoded; a memory of raw frames returns its usual batch.

    Returns:
      tuple of np.ndarray, one per transition element (see ship_frames).

    Raises:
      ValueError: If an index is not an integer, out of range or not a valid
        transition, or batch_size does not match len(indices) (then a
        dopamine_per.errors.ArgumentError, also an AssertionError, as
        Dopamine asserts).
      RuntimeError: See `sample_index_batch`.
    """
    if indices is None and batch_size is not None:
      batch_size = validation.check_int('batch_size', batch_size, 1)
    ship_frames = ship_frames and shipped_frames.compressed(self._storage)
    with self._lock:
      if indices is None:
        batch_size = self._batch_size if batch_size is None else batch_size
        batch = None if ship_frames else self._native_batch(batch_size)
        if batch is not None:
          return batch
        indices = self._sample_indices(batch_size)
      else:
        indices = sampling.check_sample_indices(indices, self._valid_mask,
                                                self._invalid_reason)
        batch_size = sampling.batch_size_of(indices, batch_size)
      if ship_frames:  # The states left compressed.
        return shipped_frames.shipped_batch(
            self, indices, self._kernels.trajectories,
            self._gather(indices, self._batch_plan(batch_size, False)))
      return self._gather(indices, self._batch_plan(batch_size))

  def _draw_generator(self, count: int) -> Tuple[Any, bool]:
    """What `_draw(count)` draws from, for `NativeMemory.sample`: its NumPy
    BitGenerator (see `sampling.bit_generator_of`), or None."""
    del count  # The prioritized memory's words depend on it.
    return sampling.bit_generator_of(self._rng)

  def _native_batch(self, batch_size: int
                   ) -> Optional[Tuple[np.ndarray, ...]]:
    """A batch the native sampler samples in one call (draws, redraws and
    fill: `NativeMemory.sample`), or None where it cannot."""
    plan = self._batch_plan(batch_size)
    if plan.codes is None:
      return None
    generator, masked = self._draw_generator(batch_size)
    if generator is None:
      return None
    arrays = self._stack_buffers.carved(plan, plan.nbytes, plan.carve)[0]
    indices, filled = self._sampler.sample(generator, masked, batch_size,
                                           plan.codes, arrays)
    if not filled:
      self._sampler.fill(self._redraw_invalid(indices), plan.codes, arrays)
    return arrays

  def _invalid_reason(self, index: int) -> str:
    """Why slot `index` is not a valid transition (for errors)."""
    return sampling.invalid_reason(
        index, self._storage.add_count, self._replay_capacity,
        self._stack_size, self._update_horizon, self._storage.episode_end)

  def _batch_plan(self, batch_size: int, states: bool = True
                 ) -> batch_plan.BatchPlan:
    """A batch's plan, without states unless `states` (`PlanCache`)."""
    plan = self._batch_plans.get((batch_size, states))
    return plan if plan is not None else self._batch_plans.make(
        batch_size, states, self.get_transition_elements(batch_size),
        list(self._storage.arrays), self._row_elements(),
        self._native_sampler())

  def _row_elements(self) -> batch_plan.RowElements:
    """Batch elements that are rows of a `_row_sources` array beyond the
    storage's (`batch_plan.storage_rows`): none here."""
    return {}

  def _row_sources(self) -> Dict[str, np.ndarray]:
    """The arrays `_row_elements` name (read under `_row_lock`)."""
    return self._storage.arrays

  def _row_lock(self) -> Any:
    """The lock the kernels hold (after `_lock`) while they copy rows of
    the `_row_sources` beyond the storage, or None."""
    return None

  def _gather(self, indices: np.ndarray, plan: batch_plan.BatchPlan
             ) -> Tuple[np.ndarray, ...]:
    """The batch at valid slots `indices`, laid out as `plan` says."""
    arrays, states, outputs, rows = self._stack_buffers.carved(
        plan, plan.nbytes, plan.carve)
    if plan.codes is not None:
      self._sampler.fill(indices, plan.codes, arrays)
      return arrays
    store = self._storage.arrays
    self._kernels.transition_batch(
        store['observation'], self._stack_size, store['terminal'],
        store['reward'], self._cumulative_discount_vector, indices, states,
        *outputs, self._row_sources(), rows, self._row_lock())
    if not plan.own:
      return arrays
    batch = list(arrays)
    for position, element in plan.own:
      batch[position] = self._transition_element(element, indices)
    return tuple(batch)

  def _create_batch_arrays(self, batch_size: int) -> Tuple[np.ndarray, ...]:
    """Dopamine's hook: uninitialized arrays of `batch_size`'s layout."""
    return tuple(np.empty(e.shape, dtype=e.type)
                 for e in self.get_transition_elements(batch_size))

  def _transition_element(self, element: ReplayElement, indices: np.ndarray
                         ) -> np.ndarray:
    """A subclass's own `element` of a batch at slots `indices`."""
    del indices
    return np.empty(element.shape, dtype=element.type)

  def as_dataset(self, batch_size: Optional[int] = None, prefetch: int = 1,
                 use_native_ops: bool = True) -> 'tf.data.Dataset':
    """Returns an endless `tf.data.Dataset` of sampled batches (eager TF2).

    Each element is a dict of the `get_transition_elements` tensors,
    sampled under the memory's lock by the native op or, with
    `use_native_ops` False (or where the ops are unavailable, with one
    warning), by `sample_transition_batch`; `prefetch` (int >= 0) batches
    are sampled ahead. Imports TensorFlow.
    """
    return wrapped_replay_buffer.tensorflow_side().dataset(
        self, batch_size, prefetch, use_native_ops)

  def native_memory(self) -> native_memory_lib.NativeMemory:
    """This memory's registry entry, its arrays bound for the ops (once).

    Raises:
      native_memory.UnsupportedMemoryError: If the ops cannot sample it.
      dopamine_per.native.build.NativeBuildError: If the library could not
        be built when the memory was made (no compiler, ...).
    """
    with self._lock:
      if self._native is None:
        native_memory_lib.raise_unavailable()
      if not self._native.bound:
        self._native.bind(self)
      return self._native

  def __copy__(self) -> None:
    """Refused: a copy would share the arrays, the lock and the ops."""
    raise TypeError('{} cannot be copied (a copy would share its arrays, '
                    'its lock and its native ops): make another and load a '
                    'checkpoint into it'.format(type(self).__name__))

  # ---------------------------------------------------------- checkpoints

  # Files a memory class adds to the checkpoint (see
  # `memory_checkpoint.CheckpointExtension`).
  checkpoint_extensions = ()

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

  def save(self, checkpoint_dir: str, iteration_number: int,
           background: bool = False
          ) -> Optional[concurrent.futures.Future]:
    """Writes checkpoint `iteration_number` in Dopamine's format.

    Replaced as a whole, then older checkpoints are pruned (files,
    guarantees and errors: `memory_checkpoint.save`). With `background`,
    returns a `concurrent.futures.Future` once the memory's state is taken,
    a thread writing it while the memory changes
    (`checkpoints.save_in_background`); its `result()` raises if that fails.

    Args:
      checkpoint_dir: str, an existing directory; if it does not exist, a
        warning is logged and nothing is written.
      iteration_number: int, the checkpoint's suffix.
      background: bool, whether to write it in the background.
    """
    return self._checkpoints.save(self, checkpoint_dir, iteration_number,
                                  background)

  def load(self, checkpoint_dir: str, suffix: Any) -> None:
    """Restores a checkpoint written by this class or by Dopamine.

    All-or-nothing, for Python and the native ops alike: on any error the
    memory is left as it was. What is read and the errors:
    `memory_checkpoint.load`.

    Args:
      checkpoint_dir: str, the directory.
      suffix: int or str, the checkpoint's iteration number.
    """
    self._checkpoints.load(self, checkpoint_dir, suffix, self._native)


@gin.configurable(
    denylist=['observation_shape', 'stack_size', 'update_horizon', 'gamma'])
class WrappedReplayBuffer(wrapped_replay_buffer.WrappedReplayBufferBase):
  """Graph-mode access to an `OutOfGraphReplayBuffer` (see
  `wrapped_replay_buffer.WrappedReplayBufferBase`); TensorFlow is imported
  when the first one is built."""

  _memory_class = OutOfGraphReplayBuffer
