# coding=utf-8
"""The out-of-graph circular replay memory, vectorized.

A drop-in replacement for ``dopamine.tf.replay_memory.circular_replay_buffer``
(Dopamine 4.1.2): same constructor, methods, transition layout and on-disk
checkpoint format. Transitions live in a circular buffer, one frame per slot;
frame stacks and n-step returns are assembled at sample time (Mnih et al.,
2015; n-step returns as in Hessel et al., 2018).

What differs from Dopamine is how, not what:

* Sampling is vectorized. Validity of a whole candidate batch is one set of
  NumPy operations, invalid candidates are redrawn in rounds, and a batch of
  transitions (frame stacks, n-step returns cut at the first terminal, next
  states) is gathered with fancy indexing, with no Python loop per
  transition.
* ``add`` is lean (a few microseconds) and checks every argument's shape and
  castability before anything is written.
* Storage is ``np.zeros`` (untouched pages cost nothing), so a million-slot
  Atari buffer is constructed in milliseconds.
* Checkpoint files are written atomically and read safely (see
  `checkpoint_io`), and ``load`` is all-or-nothing.

Deliberate deviations from Dopamine are listed in docs/compat.md.
"""

import collections
import contextlib
import functools
import math
import mmap
import numbers
import operator
import re
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from absl import logging
import gin
import numpy as np
import tensorflow as tf
from tensorflow.python.ops import data_flow_ops  # pylint: disable=g-direct-tensorflow-import

from dopamine_per import errors
from dopamine_per.replay_memory import checkpoint_io
from dopamine_per.replay_memory import frame_stacks
from dopamine_per.replay_memory import numpy_function
from dopamine_per.replay_memory import sum_tree_kernels
from dopamine_per.replay_memory import transition_kernels

__all__ = [
    'ReplayElement',
    'STORE_FILENAME_PREFIX',
    'DOPAMINE_PER_STATE_NAME',
    'modulo_range',
    'invalid_range',
    'OutOfGraphReplayBuffer',
    'WrappedReplayBuffer',
    'latest_checkpoint_iteration',
    'synchronized',
]

# Describes one stored or returned element: its name, its shape (per
# transition for storage and add arguments, with the batch dimension for
# sampled batches) and its NumPy type.
ReplayElement = collections.namedtuple('ReplayElement',
                                       ['name', 'shape', 'type'])

# Prefix of the checkpoint names of storage arrays; '$' cannot start an
# attribute name, so these never collide with other checkpointed attributes.
STORE_FILENAME_PREFIX = '$store$_'

# Checkpoint name of the state Dopamine does not save but we need (whether
# the next add starts an episode, the generator state). Dopamine ignores the
# file; without it we derive the values from the data.
DOPAMINE_PER_STATE_NAME = 'dopamine_per_state'

_STATE_FORMAT_VERSION = 1

# Transition elements a training step feeds its networks first; with staging
# they do not wait for the next batch to be staged (see create_sampling_ops).
_NETWORK_INPUTS = ('state', 'next_state')

# Result of checking whether values of one dtype may be stored in another:
# always, if every value is in the target's range (integers into integers),
# if every value converts exactly (floats or complex numbers into integers,
# complex numbers into floats), if no finite value becomes infinite (into a
# float or complex dtype whose range is smaller), or never.
(_CAST_OK, _CAST_IF_IN_RANGE, _CAST_IF_EXACT, _CAST_IF_FINITE,
 _CAST_REFUSED) = range(5)

# Batch layouts a memory keeps (see _batch_layout). Training samples one or
# two batch sizes; a sweep over many sizes must not keep one per size.
_MAX_BATCH_LAYOUTS = 16


def modulo_range(start: int, length: int, modulo: int) -> np.ndarray:
  """Returns ``start, start + 1, ..., start + length - 1`` modulo `modulo`.

  Args:
    start: int, the first index (may be negative or past `modulo`).
    length: int, how many indices.
    modulo: int, the buffer size.

  Returns:
    np.ndarray of int64 with shape [length] (Dopamine yields the same ints
    one by one).
  """
  return (start + np.arange(length, dtype=np.int64)) % modulo


def invalid_range(cursor: int, replay_capacity: int, stack_size: int,
                  update_horizon: int) -> np.ndarray:
  """Returns the slots that cannot be sampled because of the cursor.

  With N = update_horizon, K = stack_size and the cursor at c, these are the
  N + K slots c - N, ..., c + K - 1 (modulo the capacity): the N before the
  cursor have no complete N-step trajectory and next state yet, and the K at
  and after it have frame stacks that would mix the newest and the oldest
  data.

  Args:
    cursor: int, the slot the next transition will be written to.
    replay_capacity: int, the number of slots.
    stack_size: int, frames per state.
    update_horizon: int, the N of N-step returns.

  Returns:
    np.ndarray of int64 with shape [stack_size + update_horizon].

  Raises:
    dopamine_per.errors.ArgumentError: (a ValueError and an AssertionError,
      as Dopamine asserts) If cursor is not in [0, replay_capacity).
  """
  if not 0 <= cursor < replay_capacity:
    raise errors.ArgumentError('cursor must be in [0, {}), got {}'.format(
        replay_capacity, cursor))
  return modulo_range(cursor - update_horizon, stack_size + update_horizon,
                      replay_capacity)


def latest_checkpoint_iteration(checkpoint_dir: str) -> Optional[int]:
  """Returns the newest complete checkpoint written by `save`, or None.

  A checkpoint is complete once its `dopamine_per_state` file exists: `save`
  writes that file last and deletes it first, so a save or a clean-up cut
  short (a crash, SIGKILL) leaves the previous checkpoint as the newest.

  Args:
    checkpoint_dir: str, the directory given to `save`.

  Returns:
    int, the iteration number to give `load`, or None if there is none.
  """
  pattern = re.compile(r'^{}_ckpt\.(\d+)\.gz$'.format(
      re.escape(DOPAMINE_PER_STATE_NAME)))
  iterations = [int(match.group(1))
                for match in map(pattern.match,
                                 checkpoint_io.list_directory(checkpoint_dir))
                if match]
  return max(iterations) if iterations else None


def synchronized(*lock_names: str) -> Callable[[Callable[..., Any]],
                                               Callable[..., Any]]:
  """Runs a memory method holding the memory's locks of the given names.

  TensorFlow may run the sampling and priority ops of one memory on several
  threads at once (always so with staging), and the agent adds transitions
  meanwhile; the locks (reentrant, always taken in the order given) make
  each call atomic. The circular memory has one lock, `_lock`, for its
  storage; the prioritized memory adds `_priority_lock` for its sum tree, so
  that priority updates need not wait for frames being gathered.

  Args:
    *lock_names: names of `threading.RLock` attributes of the memory.

  Returns:
    A method decorator.
  """
  def decorator(method):
    if len(lock_names) == 1:
      name, = lock_names

      @functools.wraps(method)
      def locked(self, *args, **kwargs):
        with getattr(self, name):
          return method(self, *args, **kwargs)
    elif len(lock_names) == 2:
      first, second = lock_names

      @functools.wraps(method)
      def locked(self, *args, **kwargs):
        with getattr(self, first), getattr(self, second):
          return method(self, *args, **kwargs)
    else:
      @functools.wraps(method)
      def locked(self, *args, **kwargs):
        with contextlib.ExitStack() as stack:
          for name in lock_names:
            stack.enter_context(getattr(self, name))
          return method(self, *args, **kwargs)
    return locked
  return decorator


# Arrays of at least this many bytes get their memory backed in chunks of
# _POPULATE_BYTES ahead of the cursor (see _populate_from).
_LAZY_MIN_BYTES = 64 << 20
_POPULATE_BYTES = 8 << 20
_MADV_POPULATE_WRITE = getattr(mmap, 'MADV_POPULATE_WRITE', 23)


def _lazy_zeros(shape: Tuple[int, ...], dtype: Any
               ) -> Tuple[np.ndarray, Optional[mmap.mmap]]:
  """Returns a zeroed array and, for large ones, the mapping behind it.

  Large arrays live in an anonymous private mapping: nothing is resident
  until written (as with np.zeros), and the owner can populate chunks ahead
  of use with madvise.
  """
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape)) * dtype.itemsize
  if (nbytes < _LAZY_MIN_BYTES or dtype.hasobject or
      not hasattr(mmap, 'MAP_ANONYMOUS')):
    return np.zeros(shape, dtype=dtype), None
  mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
  return np.frombuffer(mapping, dtype=dtype).reshape(shape), mapping


def _check_int(name: str, value: Any, minimum: int) -> int:
  if type(value) is int and value >= minimum:  # pylint: disable=unidiomatic-typecheck
    return value  # The common case, without the slow ABC check.
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise ValueError('{} must be an int, got {!r}'.format(name, value))
  if value < minimum:
    raise ValueError('{} must be >= {}, got {}'.format(name, minimum, value))
  return int(value)


def _check_shape(name: str, shape: Any) -> Tuple[int, ...]:
  try:
    dims = tuple(operator.index(d) for d in shape)
  except TypeError:
    raise ValueError('{} must be a tuple of ints, got {!r}'.format(
        name, shape)) from None
  if any(d < 0 for d in dims):
    raise ValueError('{} must be a tuple of ints >= 0, got {!r}'.format(
        name, shape))
  return dims


def _overflow_limit(dtype: np.dtype) -> float:
  """The smallest magnitude that a float or complex `dtype` stores as inf.

  Its largest finite value plus half a unit in the last place: rounding to
  nearest (ties to even: the largest value's last bit is 1) goes up from
  there. inf for float64 and wider.
  """
  largest = _largest_magnitude(dtype)
  if largest == math.inf:  # Wider than float64: no Python float overflows.
    return math.inf
  info = np.finfo(dtype)
  return largest + 2.0 ** (int(info.maxexp) - int(info.nmant) - 2)


def _largest_magnitude(dtype: np.dtype) -> float:
  """The largest finite magnitude an integer, float or complex dtype holds."""
  if dtype.kind in 'iu':
    info = np.iinfo(dtype)
    return float(max(-int(info.min), int(info.max)))
  with np.errstate(over='ignore'):
    return float(np.finfo(dtype).max)


def _cast_category(source: np.dtype, target: np.dtype) -> int:
  """How values of dtype `source` may be stored in an array of `target`."""
  if target.kind == 'O' or np.can_cast(source, target, casting='safe'):
    return _CAST_OK
  if source.kind in 'iu' and target.kind in 'iub':
    return _CAST_IF_IN_RANGE
  if (source.kind in 'iuf' and target.kind in 'fc' or
      source.kind == 'c' and target.kind == 'c'):
    # Rounding, as for Python numbers; overflow only into a smaller range.
    if _largest_magnitude(source) < _overflow_limit(target):
      return _CAST_OK
    return _CAST_IF_FINITE
  if source.kind in 'fc' and target.kind in 'iubf':
    return _CAST_IF_EXACT
  return _CAST_REFUSED


def _first_inexact(values: np.ndarray, target: np.dtype,
                   low: Optional[int], high: Optional[int]) -> Optional[Any]:
  """Returns a value of `values` that `target` cannot hold exactly, or None.

  Args:
    values: a float or complex array (or NumPy scalar).
    target: the storage dtype (integer, bool or float).
    low: int, the smallest value of an integer or bool target (else None).
    high: int, the largest value of an integer or bool target (else None).
  """
  values = np.asarray(values)
  if values.dtype.kind == 'c':
    imaginary = values.imag != 0
    if imaginary.any():
      return values[imaginary].flat[0].item()
    values = values.real
  if target.kind == 'f':
    return None  # A real value, rounded as any float is.
  # high + 1 is a power of two, so exact as a float (high may not be).
  exact = np.isfinite(values)
  exact &= values >= float(low)
  exact &= values < float(high + 1)
  exact &= values == np.trunc(values)
  if exact.all():
    return None
  return values[~exact].flat[0].item()


def _first_overflow(values: Any, target: np.dtype, limit: float
                   ) -> Optional[Any]:
  """Returns a finite value that `target` would store as inf, or None.

  Args:
    values: a NumPy array or scalar (integer, float or, into a complex
      target, complex).
    target: the storage dtype (float or complex).
    limit: float, `_overflow_limit(target)`.
  """
  if values.ndim == 0 and values.dtype.kind != 'c' and limit < math.inf:
    if -limit < values < limit:  # A scalar: one comparison (NaN fails it).
      return None
  else:
    try:
      # The cast itself flags overflow: no reduction over the values.
      with np.errstate(over='raise'):
        values.astype(target)
      return None
    except FloatingPointError:
      pass
  values = np.asarray(values)
  with np.errstate(over='ignore'):
    overflow = np.isinf(values.astype(target)) & np.isfinite(values)
  if not overflow.any():
    return None
  return values[overflow].flat[0].item()


def _stores_as_inf(value: Any, target: np.dtype) -> bool:
  """Whether storing the number `value` in `target` fails or gives inf.

  Exactly what the write would do: a Python int beyond float64's range
  raises OverflowError there; one beyond float32's becomes inf.
  """
  scratch = np.zeros((), dtype=target)
  try:
    with np.errstate(over='ignore'):
      scratch[()] = value
  except OverflowError:
    return True
  return bool(np.isinf(scratch))


def _overflow_error(name: str, value: Any, source: Any, target: np.dtype
                   ) -> ValueError:
  """The error for a finite value of `add`'s argument that becomes inf."""
  return ValueError(
      'add(): argument {!r} holds {} ({}), which overflows {} (largest '
      'finite value {}).'.format(name, errors.describe(value), source, target,
                                 np.finfo(target).max))


class _AddSpec(object):
  """Precomputed checks for one argument of `add`."""

  __slots__ = ('name', 'shape', 'dtype', 'low', 'high', 'limit', 'int_limit',
               'casts')

  def __init__(self, element: ReplayElement):
    self.name = element.name
    self.shape = tuple(element.shape)
    self.dtype = np.dtype(element.type)
    if self.dtype.kind in 'iu':
      info = np.iinfo(self.dtype)
      self.low, self.high = int(info.min), int(info.max)
    elif self.dtype.kind == 'b':
      self.low, self.high = 0, 1
    else:
      self.low = self.high = None
    self.limit = self.int_limit = None
    if self.dtype.kind in 'fc':
      # Magnitudes from which a float becomes inf in this dtype, and below
      # which any Python int is stored finitely (a power of two, checked
      # with an int comparison; past it `_stores_as_inf` decides).
      self.limit = _overflow_limit(self.dtype)
      self.int_limit = 1 << (math.frexp(min(self.limit,
                                            sys.float_info.max))[1] - 1)
    self.casts = {}  # source dtype -> cast category


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
      padding included.
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
      gamma: float, the discount factor.
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
        than update_horizon + stack_size. A non-tuple observation_shape
        raises dopamine_per.errors.ArgumentError, also an AssertionError (as
        Dopamine asserts).
    """
    if not isinstance(observation_shape, (tuple, list)):
      raise errors.ArgumentError(
          'observation_shape must be a tuple, got {!r}'.format(
              observation_shape))
    self._observation_shape = _check_shape('observation_shape',
                                           observation_shape)
    self._stack_size = _check_int('stack_size', stack_size, 1)
    self._replay_capacity = _check_int('replay_capacity', replay_capacity, 1)
    self._batch_size = _check_int('batch_size', batch_size, 1)
    self._update_horizon = _check_int('update_horizon', update_horizon, 1)
    self._max_sample_attempts = _check_int('max_sample_attempts',
                                           max_sample_attempts, 0)
    self._checkpoint_duration = _check_int('checkpoint_duration',
                                           checkpoint_duration, 1)
    self._keep_every = (None if keep_every is None else
                        _check_int('keep_every', keep_every, 1))
    if self._replay_capacity < self._update_horizon + self._stack_size:
      raise ValueError('There is not enough capacity to cover '
                       'update_horizon and stack_size.')
    self._gamma = float(gamma)
    self._observation_dtype = observation_dtype
    self._terminal_dtype = terminal_dtype
    self._action_shape = _check_shape('action_shape', action_shape)
    self._action_dtype = action_dtype
    self._reward_shape = _check_shape('reward_shape', reward_shape)
    self._reward_dtype = reward_dtype
    self._state_shape = self._observation_shape + (self._stack_size,)
    self._extra_storage_types = [
        ReplayElement(e.name, _check_shape(e.name + ' shape', e.shape), e.type)
        for e in (extra_storage_types or [])]
    if isinstance(rng, bool):
      raise ValueError('rng must be None, a seed or a Generator, got bool')
    self._rng = None if rng is None else np.random.default_rng(rng)

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
    # get_transition_elements(batch_size) by batch size, for sampling; at
    # most _MAX_BATCH_LAYOUTS, the oldest dropped first.
    self._batch_layouts = {}
    # Memory for sampled states, reused once the caller has dropped them.
    self._stack_buffers = frame_stacks.BufferPool()
    # The compiled loops (or NumPy's) for sampling, chosen once, as the sum
    # tree's are (the DOPAMINE_PER_SUM_TREE_KERNELS environment variable).
    self._kernels = sum_tree_kernels.get_kernels().name
    self._prepare_add()

  # ------------------------------------------------------------ signatures

  def _create_storage(self) -> None:
    """Allocates one zeroed array per stored element (lazily backed)."""
    names = [e.name for e in self.get_storage_signature()]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
      raise ValueError('Duplicate storage element names: {}'.format(
          duplicates))
    self._store = {}
    self._mappings = []  # (mmap, bytes per slot) of arrays to populate.
    for element in self.get_storage_signature():
      array, mapping = _lazy_zeros(
          (self._replay_capacity,) + tuple(element.shape), element.type)
      self._store[element.name] = array
      if mapping is not None:
        self._mappings.append((mapping, array.strides[0]))
    self._populated = 0  # Slots below this are populated.

  def _prepare_add(self) -> None:
    """Precomputes the per-argument checks and padding values of `add`."""
    signature = self.get_add_args_signature()
    self._add_specs = [_AddSpec(e) for e in signature]
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

    Assignable, as Dopamine's attribute (tests set it to move the cursor):
    a nonnegative integer, or an integer array holding one.
    """
    return np.array(self._add_count, dtype=np.int64)

  @add_count.setter
  def add_count(self, value: Any) -> None:
    array = np.asarray(value)
    if (array.size != 1 or array.dtype.kind not in 'iu' or
        not 0 <= int(array.reshape(())) <= np.iinfo(np.int64).max):
      raise ValueError('add_count must be an integer in [0, 2**63), got '
                       '{}'.format(errors.describe(value)))
    with self._lock:
      self._add_count = int(array.reshape(()))

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

  @synchronized('_lock')
  def add(self, observation: Any, action: Any, reward: Any, terminal: Any,
          *args: Any, priority: Any = None, episode_end: bool = False
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
        memories, the priority last).
      priority: the priority, for memories that store one; the plain memory
        has no priority element and rejects it.
      episode_end: whether this is the episode's last transition without
        being terminal (e.g. a time limit). The memory will not build n-step
        returns or frame stacks across it.

    Raises:
      ValueError: If the number of arguments is wrong, or an argument has the
        wrong shape or cannot be stored in its element's dtype (the message
        names the argument, the value or shape given and the one expected).
    """
    values = [observation, action, reward, terminal, *args]
    if priority is not None:
      values.append(priority)  # As Dopamine: after the positional ones.
    self._add_values(values, episode_end)

  def _add_values(self, values: List[Any], episode_end: Any) -> None:
    """Checks the arguments of `add`, then writes them (see `add`)."""
    if self._add_check_override is not None:
      self._add_check_override(*values)
    values = self._check_add_args(values)
    self._add_checked(values, bool(episode_end) or bool(values[3]))

  def _check_add_args(self, values: List[Any]) -> List[Any]:
    """Checks (and where needed converts) the arguments of `add`.

    Args:
      values: list of the arguments, in `get_add_args_signature` order.

    Returns:
      list of values, in `get_add_args_signature` order, ready to be written.

    Raises:
      ValueError: see `add`.
    """
    specs = self._add_specs
    if len(values) != len(specs):
      self._check_args_length(*values)
    for position, spec in enumerate(specs):
      value = values[position]
      checked = self._check_add_value(spec, value)
      if checked is not value:
        values[position] = checked
    return values

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

  def _check_add_value(self, spec: _AddSpec, value: Any) -> Any:
    """Checks one argument of `add` against its element; returns it."""
    value_type = type(value)
    if value_type is np.ndarray or isinstance(value, np.generic):
      if value.shape != spec.shape:
        raise ValueError(
            'add(): argument {!r} has shape {}, expected {}.'.format(
                spec.name, value.shape, spec.shape))
      dtype = value.dtype
      if dtype is not spec.dtype and dtype != spec.dtype:
        return self._check_array_cast(spec, value)
      return value
    if value_type is int or value_type is float or value_type is bool:
      if spec.shape:
        raise ValueError(
            'add(): argument {!r} is the scalar {}, expected shape {}.'.format(
                spec.name, errors.describe(value), spec.shape))
      self._check_scalar_cast(spec, value)
      return value
    try:
      array = np.asarray(value)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError('add(): argument {!r} = {} is not array-like: {}'
                       .format(spec.name, errors.describe(value), e)) from e
    if array.dtype.hasobject and spec.dtype.kind != 'O':
      raise ValueError(
          'add(): argument {!r} = {} is not numeric (expected {} of shape {}).'
          .format(spec.name, errors.describe(value), spec.dtype, spec.shape))
    return self._check_add_value(spec, array)

  def _check_array_cast(self, spec: _AddSpec, value: Any) -> Any:
    """Checks that `value` (of another dtype) fits `spec`; returns it.

    A complex value with no imaginary part is returned as its real part, so
    that storing it does not warn.

    Raises:
      ValueError: If a value would lose information in `spec`'s dtype.
    """
    category = spec.casts.get(value.dtype)
    if category is None:
      category = spec.casts[value.dtype] = _cast_category(value.dtype,
                                                          spec.dtype)
    if category == _CAST_OK:
      return value
    if category == _CAST_IF_EXACT:
      bad = _first_inexact(value, spec.dtype, spec.low, spec.high)
      if bad is not None:
        raise ValueError(
            'add(): argument {!r} holds {} (dtype {}), which cannot be stored '
            'as {} without losing information.'.format(
                spec.name, errors.describe(bad), value.dtype, spec.dtype))
      if value.dtype.kind == 'c':
        value = value.real
      if spec.limit is None:
        return value
      category = _CAST_IF_FINITE  # A real part may still overflow a float.
    if category == _CAST_IF_FINITE:
      bad = _first_overflow(value, spec.dtype, spec.limit)
      if bad is None:
        return value
      raise _overflow_error(spec.name, bad, value.dtype, spec.dtype)
    if category == _CAST_IF_IN_RANGE:
      if value.size == 0:
        return value
      low, high = int(np.min(value)), int(np.max(value))
      if spec.low <= low and high <= spec.high:
        return value
      raise ValueError(
          'add(): argument {!r} holds {} (dtype {}), out of range for {} '
          '[{}, {}].'.format(spec.name, low if low < spec.low else high,
                             value.dtype, spec.dtype, spec.low, spec.high))
    raise ValueError(
        'add(): argument {!r} has dtype {}, which cannot be stored as {} '
        'without losing information{}.'.format(
            spec.name, value.dtype, spec.dtype,
            '' if value.shape else ' (value {})'.format(errors.describe(value))))

  def _check_scalar_cast(self, spec: _AddSpec, value: Any) -> None:
    kind = spec.dtype.kind
    if kind == 'O' or type(value) is bool:
      return
    if type(value) is int:
      if kind in 'fc':
        if (-spec.int_limit < value < spec.int_limit or
            not _stores_as_inf(value, spec.dtype)):
          return
        raise _overflow_error(spec.name, value, 'int', spec.dtype)
      if kind in 'iub':
        if spec.low <= value <= spec.high:
          return
        raise ValueError(
            'add(): argument {!r} = {} is out of range for {} [{}, {}].'.format(
                spec.name, value, spec.dtype, spec.low, spec.high))
    elif kind in 'fc':  # A Python float.
      if -spec.limit < value < spec.limit or not math.isfinite(value):
        return  # NaN and inf are stored as given.
      raise _overflow_error(spec.name, value, 'float', spec.dtype)
    elif (kind in 'iub' and math.isfinite(value) and value.is_integer() and
          spec.low <= value <= spec.high):
      return  # A float with an exact integer value, e.g. terminal=1.0.
    raise ValueError(
        'add(): argument {!r} = {} ({}) cannot be stored as {} without losing '
        'information.'.format(spec.name, errors.describe(value),
                              type(value).__name__, spec.dtype))

  def _add_checked(self, values: List[Any], ends_episode: bool) -> None:
    """Writes checked values, padding first at an episode start."""
    if self._next_experience_is_episode_start:
      for _ in range(self._stack_size - 1):
        self._write(self._padding_values, False)
      self._next_experience_is_episode_start = False
    self._write(values, ends_episode)
    if ends_episode:
      self._next_experience_is_episode_start = True

  def _write(self, values: Sequence[Any], ends_episode: bool) -> None:
    """Writes one transition at the cursor and advances it.

    Args:
      values: the storage elements' values, in storage signature order.
      ends_episode: whether the slot holds the last transition of an episode.
    """
    cursor = self._add_count % self._replay_capacity
    if cursor >= self._populated and self._mappings:
      self._populate_from(cursor)
    for array, value in zip(self._store_arrays, values):
      array[cursor] = value
    self._episode_end[cursor] = ends_episode
    if ends_episode:
      self.episode_end_indices.add(cursor)
    else:
      self.episode_end_indices.discard(cursor)
    self._add_count += 1

  def _populate_from(self, cursor: int) -> None:
    """Backs the next slots of the large arrays with memory, in one call.

    The first write to a fresh page faults, and on virtual machines a fault
    can cost several microseconds: an Atari frame spans two pages.
    MADV_POPULATE_WRITE (Linux 5.14+) backs a whole chunk at once, about ten
    times cheaper per page. Elsewhere the pages fault in as usual.
    """
    end = min(self._replay_capacity,
              cursor + max(1, _POPULATE_BYTES // max(
                  stride for _, stride in self._mappings)))
    try:
      for mapping, stride in self._mappings:
        start = cursor * stride // mmap.PAGESIZE * mmap.PAGESIZE
        stop = min(len(mapping), -(-end * stride // mmap.PAGESIZE) *
                   mmap.PAGESIZE)
        mapping.madvise(_MADV_POPULATE_WRITE, start, stop - start)
    except (OSError, ValueError):
      self._mappings = []  # Not supported here: let pages fault in.
    self._populated = end

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
    if end_index <= start_index:
      raise errors.ArgumentError('end_index must be larger than start_index')
    if end_index < 0 or start_index >= self._replay_capacity:
      raise errors.ArgumentError('Range [{}, {}) is outside the buffer.'.format(
          start_index, end_index))
    if not self.is_full() and end_index > self.cursor():
      raise errors.ArgumentError(
          'Index {} has not been added.'.format(start_index))
    if 0 <= start_index and end_index <= self._replay_capacity:
      return array[start_index:end_index]
    return array[modulo_range(start_index, end_index - start_index,
                              self._replay_capacity)]

  def _check_stack_indices(self, index: Any) -> np.ndarray:
    indices = np.asarray(index)
    if indices.dtype.kind not in 'iu':
      raise errors.ArgumentError(
          'index must be an integer, got {!r}'.format(index))
    if np.any((indices < 0) | (indices >= self._replay_capacity)):
      raise errors.ArgumentError('index must be in [0, {}), got {!r}'.format(
          self._replay_capacity, index))
    if not self.is_full() and np.any(indices >= self.cursor()):
      raise errors.ArgumentError('Index {!r} has not been added.'.format(index))
    return indices.astype(np.int64)

  def _stacks(self, array: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Gathers ``array`` at the `stack_size` slots ending at each index.

    Returns:
      np.ndarray of shape indices.shape + [stack_size] + array.shape[1:].
    """
    windows = (indices[..., None] + self._stack_offsets) % self._replay_capacity
    return array[windows]

  def _state_stacks(self, indices: np.ndarray) -> np.ndarray:
    """Returns the states ending at a 1-D array of slots, frames last.

    Returns:
      C-contiguous np.ndarray of shape [len(indices)] + observation_shape +
      [stack_size].
    """
    return frame_stacks.gather_stacks_ending_at(
        self._store['observation'], indices, self._stack_size,
        kernels=self._kernels, pool=self._stack_buffers)

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
    indices = self._check_stack_indices(index)
    states = self._state_stacks(indices.reshape(-1))
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
    return self._stacks(self._store['terminal'],
                        self._check_stack_indices(index))

  # ------------------------------------------------------------- validity

  def _valid_mask(self, indices: np.ndarray) -> np.ndarray:
    """Vectorized validity of a 1-D int64 array of slots (see is_valid...)."""
    return self._valid_mask_loop(
        indices, self._replay_capacity, self._add_count,
        self._update_horizon, self._stack_size, self._episode_end,
        self._store['terminal'])

  def _invalid_reason(self, index: int) -> str:
    """Explains why slot `index` is not a valid transition (for errors)."""
    capacity = self._replay_capacity
    cursor = self.cursor()
    if not 0 <= index < capacity:
      return 'it is outside [0, {})'.format(capacity)
    if not self.is_full():
      if index < self._stack_size - 1:
        return 'it holds padding of the first episode'
      if index >= cursor - self._update_horizon:
        return ('its {}-step trajectory and next state are not all written '
                'yet (cursor at {})'.format(self._update_horizon, cursor))
    elif index in set(self.invalid_range.tolist()):
      return ('it is within {} slots before or {} at/after the cursor ({})'
              .format(self._update_horizon, self._stack_size, cursor))
    for slot in modulo_range(index - self._stack_size + 1,
                             self._stack_size - 1, capacity):
      if self._episode_end[slot]:
        return ('its frame stack crosses the end of an episode (slot {})'
                .format(slot))
    return ('its {}-step trajectory crosses the end of an episode that was '
            'not terminal'.format(self._update_horizon))

  def is_valid_transition(self, index: Any) -> Any:
    """Returns whether slot `index` holds a transition that can be sampled.

    A slot is valid if its n-step trajectory and next state have been
    written and do not straddle the cursor, its frame stack does not reach
    back into a previous episode, and no episode ends without a terminal
    inside its trajectory before the return is cut (see docs/compat.md).

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
    mask = self._valid_mask(indices.reshape(-1).astype(np.int64))
    if indices.ndim == 0:
      return bool(mask[0])
    return mask.reshape(indices.shape)

  # ------------------------------------------------------------- sampling

  def _check_batch_size(self, batch_size: Any) -> int:
    return _check_int('batch_size', batch_size, 1)

  def _sampling_range(self) -> Tuple[int, int]:
    """Returns [min_id, max_id) of the uniform draws, before the modulo.

    Raises:
      RuntimeError: If too few transitions have been added.
    """
    cursor = self.cursor()
    if self.is_full():
      return (cursor - self._replay_capacity + self._stack_size - 1,
              cursor - self._update_horizon)
    low, high = self._stack_size - 1, cursor - self._update_horizon
    if high <= low:
      raise RuntimeError(
          'Cannot sample a batch with fewer than stack size ({}) + '
          'update_horizon ({}) transitions.'.format(self._stack_size,
                                                    self._update_horizon))
    return low, high

  def _redraw_invalid(self, candidates: np.ndarray,
                      draw: Callable[[int], np.ndarray]) -> np.ndarray:
    """Replaces invalid candidates with fresh draws, in vectorized rounds.

    Every draw that lands on an invalid slot (the initial ones included)
    counts as a failed attempt.

    Args:
      candidates: int64 array, the initial draws.
      draw: callable returning that many new candidates.

    Returns:
      The candidates, all valid.

    Raises:
      RuntimeError: If max_sample_attempts draws failed before the batch was
        complete.
    """
    candidates = np.asarray(candidates, dtype=np.int64)
    valid = self._valid_mask(candidates)
    # The common case, in one check (count_nonzero: a third of all()'s cost).
    if np.count_nonzero(valid) == len(valid):
      return candidates
    pending = np.flatnonzero(~valid)
    failures = 0
    while True:
      if not len(pending):
        return candidates
      failures += len(pending)
      if failures >= self._max_sample_attempts:
        raise RuntimeError(
            'Max sample attempts: Tried {} times but only sampled {} valid '
            'indices. Batch size is {}'.format(
                self._max_sample_attempts, len(candidates) - len(pending),
                len(candidates)))
      candidates[pending] = draw(len(pending))
      pending = pending[~self._valid_mask(candidates[pending])]

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
    return self._redraw_invalid(self._draw_uniform(batch_size),
                                self._draw_uniform)

  def _check_explicit_indices(self, indices: Any) -> np.ndarray:
    """Validates indices given to sample_transition_batch."""
    array = np.asarray(indices)
    if array.ndim != 1:
      raise ValueError('indices must be a 1-D sequence of ints, got shape {}'
                       .format(array.shape))
    if array.size == 0:
      return array.astype(np.int64)
    if array.dtype.kind not in 'iu':
      raise ValueError('indices must be integers, got dtype {}: {!r}'.format(
          array.dtype, array[0]))
    array = array.astype(np.int64)
    valid = self._valid_mask(array)
    if not valid.all():
      position = int(np.argmin(valid))
      index = int(array[position])
      raise ValueError(
          'indices[{}] = {} is not a valid transition: {}.'.format(
              position, index, self._invalid_reason(index)))
    return array

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
    if indices is None:
      if batch_size is None:
        batch_size = self._batch_size
      indices = self.sample_index_batch(batch_size)
    else:
      indices = self._check_explicit_indices(indices)
      if batch_size is None:
        batch_size = len(indices)
      elif batch_size != len(indices):
        raise errors.ArgumentError(
            'batch_size is {} but {} indices were given.'.format(
                batch_size, len(indices)))
    elements, names = self._batch_layout(batch_size)
    values = self._gather_transitions(indices, names)
    batch = []
    for element in elements:
      value = values.get(element.name)
      if value is None:
        value = self._transition_element(element, indices)
      batch.append(value)
    return tuple(batch)

  def _create_batch_arrays(self, batch_size: int) -> Tuple[np.ndarray, ...]:
    """Dopamine's hook: uninitialized arrays shaped like a batch.

    Args:
      batch_size: int, or None for the memory's batch size.

    Returns:
      tuple of np.ndarray, one per `get_transition_elements(batch_size)`.
    """
    return tuple(np.empty(element.shape, dtype=element.type)
                 for element in self.get_transition_elements(batch_size))

  def _batch_layout(self, batch_size: int
                   ) -> Tuple[List[ReplayElement], frozenset]:
    """The transition elements of a batch and their names (cached)."""
    layout = self._batch_layouts.get(batch_size)
    if layout is None:
      if len(self._batch_layouts) >= _MAX_BATCH_LAYOUTS:
        del self._batch_layouts[next(iter(self._batch_layouts))]
      elements = self.get_transition_elements(batch_size)
      layout = self._batch_layouts[batch_size] = (
          elements, frozenset(e.name for e in elements))
    return layout

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

  def _gather_transitions(self, indices: np.ndarray, names: frozenset
                         ) -> Dict[str, np.ndarray]:
    """Computes the known transition elements for a batch of valid slots."""
    store = self._store
    out = {}
    if 'state' in names or 'next_state' in names:
      # One gather, states first: the Atari kernel builds each state with
      # its next state, which shares frames with it.
      next_indices, is_terminal, returns, stacks = (
          self._transitions_and_states(indices, self._stack_buffers))
      out['state'] = stacks[:len(indices)]
      out['next_state'] = stacks[len(indices):]
    else:
      next_indices, is_terminal, returns = transition_kernels.trajectories(
          indices, self._replay_capacity, store['terminal'], store['reward'],
          self._cumulative_discount_vector, kernels=self._kernels)
    if 'reward' in names:
      out['reward'] = returns
    if 'next_action' in names:
      out['next_action'] = store['action'][next_indices]
    if 'next_reward' in names:
      out['next_reward'] = store['reward'][next_indices]
    if 'terminal' in names:
      out['terminal'] = is_terminal.astype(self._terminal_dtype)
    if 'indices' in names:
      out['indices'] = indices.astype(np.int32)
    for name in names:
      if name not in out and name in store:
        out[name] = store[name][indices]
    return out

  def as_dataset(self, batch_size: Optional[int] = None,
                 prefetch: int = 1) -> tf.data.Dataset:
    """Returns an endless `tf.data.Dataset` of sampled batches (eager TF2).

    Each element is a dict mapping the names of `get_transition_elements`
    to tensors of their shapes and dtypes, sampled by
    `sample_transition_batch` on tf.data's threads (under the memory's
    lock, so `add` and priority updates may run meanwhile). `prefetch`
    batches are sampled ahead, overlapping with a `tf.function` training
    step, as staging does in graph mode.

    Args:
      batch_size: int, or None for the memory's batch size.
      prefetch: int >= 0, batches sampled ahead.

    Returns:
      tf.data.Dataset.
    """
    batch_size = (self._batch_size if batch_size is None else
                  self._check_batch_size(batch_size))
    elements = self.get_transition_elements(batch_size)
    names = [element.name for element in elements]

    def batches():
      while True:
        yield dict(zip(names, self.sample_transition_batch(batch_size)))

    signature = {element.name: tf.TensorSpec(element.shape, element.type,
                                             name=element.name)
                 for element in elements}
    dataset = tf.data.Dataset.from_generator(batches,
                                             output_signature=signature)
    return dataset.prefetch(prefetch) if prefetch else dataset

  # ---------------------------------------------------------- checkpoints

  def _checkpoint_layout(self) -> List[Tuple[str, str]]:
    """Returns the (name, format) of the files of this class's own state.

    Formats: 'npy' (gzip'd np.save), 'pickle' (gzip'd plain-data pickle) and
    'sum_tree' (gzip'd pickle of a Dopamine SumTree). Other public
    attributes get files too (see `_attribute_files`).
    """
    layout = [(STORE_FILENAME_PREFIX + e.name, 'npy')
              for e in self.get_storage_signature()]
    layout += [('add_count', 'npy'), ('invalid_range', 'npy'),
               ('episode_end_indices', 'pickle')]
    return layout

  def _checkpoint_value(self, name: str) -> Any:
    """Returns what checkpoint file `name` holds."""
    if name.startswith(STORE_FILENAME_PREFIX):
      return self._store[name[len(STORE_FILENAME_PREFIX):]]
    if name == 'add_count':
      return self.add_count
    if name == 'invalid_range':
      return self.invalid_range
    if name == 'episode_end_indices':
      return set(int(i) for i in self.episode_end_indices)
    if not name.startswith('_') and name in vars(self):
      return vars(self)[name]
    raise KeyError(name)

  def _attribute_files(self) -> List[Tuple[str, str]]:
    """Returns (name, format) for the public attributes `_checkpoint_layout`
    does not name (e.g. a subclass's counters and arrays), sorted by name.

    As in Dopamine, every public attribute is checkpointed: NumPy arrays as
    'npy' files, anything else as a 'pickle'.
    """
    own = {name for name, _ in self._checkpoint_layout()}
    return [(name, 'npy' if type(value) is np.ndarray else 'pickle')
            for name, value in sorted(vars(self).items())
            if not name.startswith('_') and name not in own]

  def _checkpoint_files(self) -> List[Tuple[str, str]]:
    """Returns (name, format) of every file of a checkpoint but the state."""
    return self._checkpoint_layout() + self._attribute_files()

  def _check_checkpointable(self, files: Sequence[Tuple[str, str]]) -> None:
    """Checks that every public attribute can be saved and safely loaded.

    Raises:
      TypeError: If an attribute holds something other than plain data
        (`checkpoint_io.non_plain_data`): loading it would have to run code.
      ValueError: If an attribute's name cannot be a checkpoint file's.
    """
    own = {name for name, _ in self._checkpoint_layout()}
    for name, _ in files:
      if name in own:
        continue
      if not name.isidentifier() or name == DOPAMINE_PER_STATE_NAME:
        raise ValueError(
            'save(): the attribute {!r} of {} cannot be checkpointed under '
            'its name; rename it (or make it private with a leading '
            "underscore).".format(name, type(self).__name__))
      problem = checkpoint_io.non_plain_data(vars(self)[name])
      if problem is not None:
        raise TypeError(
            'save(): the public attribute {!r} of {} holds {}; checkpoints '
            'hold plain data only (numbers, strings, bytes, None, NumPy '
            'arrays, and lists, tuples, dicts and sets of those), so that '
            'loading never runs code. Make it private (a leading '
            'underscore) or store plain data. Nothing was written.'.format(
                name, type(self).__name__, problem))

  def _return_checkpointable_elements(self) -> Dict[str, Any]:
    """Returns {file name: value} of what `save` writes, as Dopamine's hook.

    Overriding it does not change what `save` writes (see docs/compat.md).
    """
    return {name: self._checkpoint_value(name)
            for name, _ in self._checkpoint_files()}

  def _generate_filename(self, checkpoint_dir: str, name: str,
                         suffix: Any) -> str:
    """Returns the path of checkpoint file `name` (Dopamine's hook)."""
    return checkpoint_io.checkpoint_filename(checkpoint_dir, name, suffix)

  def _extra_state(self) -> Dict[str, Any]:
    """Returns the state Dopamine's format has no file for."""
    return {
        'format_version': _STATE_FORMAT_VERSION,
        'next_experience_is_episode_start':
            bool(self._next_experience_is_episode_start),
        'rng_state': (None if self._rng is None else
                      self._rng.bit_generator.state),
    }

  @synchronized('_lock')
  def save(self, checkpoint_dir: str, iteration_number: int) -> None:
    """Writes the memory to `checkpoint_dir` in Dopamine's format.

    One gzip file per attribute, ``{name}_ckpt.{iteration_number}.gz``, each
    written atomically: the storage arrays, the counters, and, as in
    Dopamine, every other public attribute (a subclass's arrays, counters,
    strings ...), plus a ``dopamine_per_state`` file for what Dopamine does
    not save. Then the files of iteration
    ``iteration_number - checkpoint_duration`` are deleted, unless it is a
    multiple of keep_every (Dopamine stops after the first file when it
    spares an iteration; this writes them all), and so are temporary files
    that earlier saves of this memory's files left when killed mid-write.

    Args:
      checkpoint_dir: str, an existing directory. If it does not exist a
        warning is logged and nothing is written (as Dopamine, which is
        silent).
      iteration_number: int, the checkpoint's suffix.

    Raises:
      TypeError: If a public attribute holds something other than plain data
        (see `checkpoint_io.non_plain_data`); nothing is written then.
      ValueError: If a public attribute's name cannot name a file.
    """
    iteration_number = operator.index(iteration_number)
    if not checkpoint_io.exists(checkpoint_dir):
      logging.warning('Checkpoint directory %s does not exist: replay buffer '
                      'not saved.', checkpoint_dir)
      return
    savers = {'npy': checkpoint_io.save_npy_gz,
              'sum_tree': checkpoint_io.save_dopamine_sum_tree_gz,
              'pickle': checkpoint_io.save_pickle_gz}
    files = self._checkpoint_files()
    self._check_checkpointable(files)
    digests = {}
    for name, file_format in files:
      filename = checkpoint_io.checkpoint_filename(checkpoint_dir, name,
                                                   iteration_number)
      digests[name] = tuple(savers[file_format](
          filename, self._checkpoint_value(name)))
    # Written last: its presence marks a complete dopamine_per checkpoint,
    # and it records every other file's size and checksum.
    state = self._extra_state()
    state['files'] = digests
    checkpoint_io.save_pickle_gz(
        checkpoint_io.checkpoint_filename(
            checkpoint_dir, DOPAMINE_PER_STATE_NAME, iteration_number), state)
    self._collect_garbage(checkpoint_dir, iteration_number)
    self._remove_temporaries(checkpoint_dir, files)

  def _remove_temporaries(self, checkpoint_dir: str,
                          files: Sequence[Tuple[str, str]]) -> None:
    """Deletes what killed saves left: temporaries of this memory's files.

    `checkpoint_io.atomic_write` writes each file to a temporary one first;
    a SIGKILL leaves it behind. Only temporaries of a checkpoint file of
    this memory (any iteration) are deleted, nothing else.
    """
    names = [DOPAMINE_PER_STATE_NAME] + [name for name, _ in files]
    pattern = re.compile(r'^(?:{})_ckpt\.\d+\.gz$'.format(
        '|'.join(re.escape(name) for name in names)))
    for path in checkpoint_io.remove_temporaries(
        checkpoint_dir, lambda target: pattern.match(target) is not None):
      logging.info('Deleted %s, left by an interrupted save.', path)

  def _collect_garbage(self, checkpoint_dir: str, iteration_number: int
                      ) -> None:
    stale = iteration_number - self._checkpoint_duration
    if stale < 0:
      return
    if self._keep_every is not None and stale % self._keep_every == 0:
      return
    # The state file first: a checkpoint that has one has all its files,
    # even if this deletion is interrupted.
    names = [name for name, _ in self._checkpoint_files()]
    for name in [DOPAMINE_PER_STATE_NAME] + names:
      checkpoint_io.remove_if_exists(
          checkpoint_io.checkpoint_filename(checkpoint_dir, name, stale))

  @synchronized('_lock')
  def load(self, checkpoint_dir: str, suffix: Any) -> None:
    """Restores the memory from a checkpoint written by this class or Dopamine.

    All-or-nothing: every file is checked to exist, then read and validated
    against this memory's configuration into temporaries, and only then
    assigned. On any error the memory is left exactly as it was. Public
    attributes (see `save`) are restored from their files: those of the
    attributes this memory has when `load` is called, as in Dopamine.

    Args:
      checkpoint_dir: str, the directory.
      suffix: int or str, the checkpoint's iteration number.

    Raises:
      tf.errors.NotFoundError: If an expected file is missing (a missing
        episode_end_indices file, from old checkpoints, is tolerated: episode
        ends are then taken from the terminal flags).
      checkpoint_io.CheckpointError: (a ValueError) If a file is corrupt,
        unsafe, not a regular file, larger than this memory can need, or
        does not match this memory's configuration; whatever the underlying
        error, naming the file where it is known.
    """
    missing_episode_ends = False
    for name, _ in self._checkpoint_files():
      filename = checkpoint_io.checkpoint_filename(checkpoint_dir, name,
                                                   suffix)
      if checkpoint_io.exists(filename):
        continue
      if name == 'episode_end_indices':
        logging.warning('Unable to find episode_end_indices. This is '
                        'expected for old checkpoints.')
        missing_episode_ends = True
        continue
      raise tf.errors.NotFoundError(None, None,
                                    'Missing file: {}'.format(filename))
    with checkpoint_io.refusing('checkpoint {} in {}'.format(
        suffix, checkpoint_dir)):
      pending = self._read_checkpoint(checkpoint_dir, suffix,
                                      missing_episode_ends)
    self._commit_checkpoint(pending)

  # Bounds of what each checkpoint file may hold, derived from this memory's
  # configuration, so that a damaged or hostile file is refused after a
  # bounded amount of reading (see checkpoint_io).

  def _attribute_max_bytes(self) -> int:
    """The most bytes a public attribute's file may decompress to.

    Generous but finite: 64 MiB more than all storage arrays together.
    """
    return (1 << 26) + sum(array.nbytes for array in self._store.values())

  def _npy_max_bytes(self, name: str) -> int:
    """The most bytes the array of checkpoint file `name` may take."""
    if name == 'add_count':
      return 16  # One integer of at most 16 bytes.
    if name == 'invalid_range':
      # Room for other configurations' ranges, for a clearer error.
      return 8 * (self._stack_size + self._update_horizon) + (1 << 16)
    return self._attribute_max_bytes()

  def _pickle_limits(self, name: str) -> checkpoint_io.PickleLimits:
    """The bounds of the pickle in checkpoint file `name`."""
    if name == 'episode_end_indices':
      # At most one int per slot, 5 to 13 bytes each in any protocol.
      capacity = self._replay_capacity
      return checkpoint_io.PickleLimits(
          max_bytes=32 * capacity + (1 << 16), max_elements=capacity + 16,
          max_depth=4)
    if name == DOPAMINE_PER_STATE_NAME:
      # A few flags, a generator state, a (size, sha256) per file.
      files = len(self._checkpoint_files())
      return checkpoint_io.PickleLimits(
          max_bytes=(1 << 20) + 1024 * files,
          max_elements=(1 << 14) + 8 * files, max_depth=16)
    max_bytes = self._attribute_max_bytes()
    return checkpoint_io.PickleLimits(
        max_bytes=max_bytes, max_elements=max_bytes // 8,
        max_depth=checkpoint_io.DEFAULT_PICKLE_LIMITS.max_depth)

  def _read_checkpoint(self, checkpoint_dir: str, suffix: Any,
                       missing_episode_ends: bool) -> Dict[str, Any]:
    """Reads and validates a checkpoint into a dict; changes nothing.

    Raises:
      checkpoint_io.CheckpointError: On any corrupt or mismatched file.
    """
    def filename(name):
      return checkpoint_io.checkpoint_filename(checkpoint_dir, name, suffix)

    extra = self._read_extra_state(filename(DOPAMINE_PER_STATE_NAME))
    digests = {} if extra is None else extra['files']

    def digest_of(name):
      digest = digests.get(name)
      return None if digest is None else checkpoint_io.FileDigest(*digest)

    capacity = self._replay_capacity
    pending = {'store': {}, 'digest_of': digest_of}
    for element in self.get_storage_signature():
      name = STORE_FILENAME_PREFIX + element.name
      with checkpoint_io.refusing(filename(name)):
        pending['store'][element.name] = checkpoint_io.load_npy_gz(
            filename(name), shape=(capacity,) + tuple(element.shape),
            dtype=element.type, expected=digest_of(name))
    add_count = self._read_add_count(filename('add_count'),
                                     digest_of('add_count'))
    pending['add_count'] = add_count
    cursor = add_count % capacity
    self._check_invalid_range(filename('invalid_range'),
                              digest_of('invalid_range'), add_count)

    written = capacity if add_count >= capacity else cursor
    if missing_episode_ends:
      terminal = pending['store']['terminal'][:written]
      episode_ends = set(np.flatnonzero(terminal).tolist())
    else:
      episode_ends = self._read_episode_ends(
          filename('episode_end_indices'), digest_of('episode_end_indices'),
          written)
    pending['episode_end_indices'] = episode_ends
    pending['attributes'] = {
        name: self._read_attribute(name, filename(name), file_format,
                                   digest_of(name))
        for name, file_format in self._attribute_files()}

    path = filename(DOPAMINE_PER_STATE_NAME)
    if extra is not None:
      pending['episode_start'] = extra['next_experience_is_episode_start']
    else:
      # Dopamine does not save this: the next add starts an episode if the
      # last written transition ended one.
      logging.info('%s not found (a Dopamine checkpoint?): deriving the '
                   'episode-start flag from the data.', path)
      pending['episode_start'] = (
          add_count == 0 or (cursor - 1) % capacity in episode_ends)
    pending['rng_state'] = None
    rng_state = None if extra is None else extra.get('rng_state')
    if rng_state is not None and self._rng is not None:
      # Any error (TypeError, KeyError, OverflowError for a number out of
      # the generator's range ...) refuses the state file.
      with checkpoint_io.refusing(path + ' (generator state)'):
        type(self._rng.bit_generator)().state = rng_state
      pending['rng_state'] = rng_state
    return pending

  def _read_add_count(self, path: str,
                      expected: Optional[checkpoint_io.FileDigest]) -> int:
    """Reads the add_count file: an integer in [0, 2**63).

    Raises:
      checkpoint_io.CheckpointError: If the file is corrupt or the value is
        not such an integer (a uint64 of 2**63 or more, say, would break
        `add_count` and `save`).
    """
    with checkpoint_io.refusing(path):
      add_count = checkpoint_io.load_npy_gz(
          path, expected=expected, max_bytes=self._npy_max_bytes('add_count'))
      value = (int(add_count.reshape(())) if add_count.size == 1 and
               add_count.dtype.kind in 'iu' else None)
      if (add_count.shape not in ((), (1,)) or value is None or
          not 0 <= value <= np.iinfo(np.int64).max):
        raise checkpoint_io.CorruptCheckpointError(
            '{}: add_count must be an integer scalar in [0, 2**63), got {}'
            .format(path, errors.describe(
                add_count if value is None else value)))
    return value

  def _check_invalid_range(self, path: str,
                           expected: Optional[checkpoint_io.FileDigest],
                           add_count: int) -> None:
    """Reads the invalid_range file; it must match add_count.

    Raises:
      checkpoint_io.CheckpointError: If the file is corrupt or does not
        match `add_count` and this memory's configuration.
    """
    with checkpoint_io.refusing(path):
      loaded_range = checkpoint_io.load_npy_gz(
          path, expected=expected,
          max_bytes=self._npy_max_bytes('invalid_range'))
      if add_count == 0:
        return  # Dopamine saves zeros of some length before the first add.
      wanted = invalid_range(add_count % self._replay_capacity,
                             self._replay_capacity, self._stack_size,
                             self._update_horizon)
      if (loaded_range.shape != wanted.shape or
          not np.array_equal(loaded_range, wanted)):
        raise checkpoint_io.CorruptCheckpointError(
            '{}: invalid_range {} does not match add_count {} with '
            'stack_size {} and update_horizon {}: a checkpoint of a '
            'differently configured buffer?'.format(
                path, loaded_range.tolist(), add_count, self._stack_size,
                self._update_horizon))

  def _read_episode_ends(self, path: str,
                         expected: Optional[checkpoint_io.FileDigest],
                         written: int) -> set:
    """Reads the episode_end_indices file: a set of written slots.

    Raises:
      checkpoint_io.CheckpointError: If the file is corrupt, too large, or
        holds anything but ints in [0, written).
    """
    with checkpoint_io.refusing(path):
      loaded = checkpoint_io.load_pickle_gz(
          path, expected=expected,
          limits=self._pickle_limits('episode_end_indices'))
      if not isinstance(loaded, (set, frozenset, list, tuple)):
        raise checkpoint_io.CorruptCheckpointError(
            '{}: episode_end_indices must be a set of ints, got {}'.format(
                path, type(loaded).__name__))
      episode_ends = set()
      for index in loaded:
        if (isinstance(index, (bool, np.bool_)) or
            not isinstance(index, (numbers.Integral, np.integer)) or
            not 0 <= index < written):
          raise checkpoint_io.CorruptCheckpointError(
              '{}: episode end index {} is not a written slot in [0, {})'
              .format(path, errors.describe(index), written))
        episode_ends.add(int(index))
    return episode_ends

  def _read_attribute(self, name: str, path: str, file_format: str,
                      expected: Optional[checkpoint_io.FileDigest]) -> Any:
    """Reads the checkpoint file of public attribute `name` (plain data).

    Raises:
      checkpoint_io.CheckpointError: If the file is corrupt, unsafe or
        larger than `_attribute_max_bytes`.
    """
    with checkpoint_io.refusing(path):
      if file_format == 'npy':
        return checkpoint_io.load_npy_gz(
            path, expected=expected, max_bytes=self._npy_max_bytes(name))
      value = checkpoint_io.load_pickle_gz(
          path, expected=expected, limits=self._pickle_limits(name))
      problem = checkpoint_io.non_plain_data(value)
      if problem is not None:
        raise checkpoint_io.CorruptCheckpointError(
            '{}: an attribute must be plain data, found {}.'.format(
                path, problem))
    return value

  def _read_extra_state(self, path: str) -> Optional[Dict[str, Any]]:
    """Reads and checks the dopamine_per state file; None if there is none.

    Its structure is checked before any of it is used: `files` must map
    exactly this memory's checkpoint file names (`_checkpoint_files`) to
    (size, sha256) tuples, so it can name no other file.

    Raises:
      checkpoint_io.CheckpointError: If the file is corrupt or malformed.
    """
    if not checkpoint_io.exists(path):
      return None
    with checkpoint_io.refusing(path):
      extra = checkpoint_io.load_pickle_gz(
          path, limits=self._pickle_limits(DOPAMINE_PER_STATE_NAME))
      problem = self._extra_state_problem(extra)
      if problem is not None:
        raise checkpoint_io.CorruptCheckpointError(
            '{}: not a dopamine_per state: {}'.format(path, problem))
    return extra

  def _extra_state_problem(self, extra: Any) -> Optional[str]:
    """What is wrong with a loaded dopamine_per state, or None."""
    if type(extra) is not dict:  # pylint: disable=unidiomatic-typecheck
      return 'a {}, not a dict'.format(type(extra).__name__)
    version = extra.get('format_version', _STATE_FORMAT_VERSION)
    if type(version) is not int or version != _STATE_FORMAT_VERSION:  # pylint: disable=unidiomatic-typecheck
      return 'format_version {} (this version reads {})'.format(
          errors.describe(version), _STATE_FORMAT_VERSION)
    if not isinstance(extra.get('next_experience_is_episode_start'), bool):
      return 'next_experience_is_episode_start is {}, not a bool'.format(
          errors.describe(extra.get('next_experience_is_episode_start')))
    if not isinstance(extra.get('rng_state'), (dict, type(None))):
      return 'rng_state is a {}, not a dict'.format(
          type(extra['rng_state']).__name__)
    files = extra.get('files')
    if type(files) is not dict:  # pylint: disable=unidiomatic-typecheck
      return 'files is {}, not a dict'.format(errors.describe(files))
    own = {name for name, _ in self._checkpoint_files()}
    if set(files) != own:
      strange = sorted(errors.describe(name, 40)
                       for name in set(files) - own)
      missing = sorted(own - set(files))
      return ('files names {} and lacks {}; it must name exactly this '
              "memory's checkpoint files".format(strange[:5], missing[:5]))
    for name, digest in files.items():
      if not (type(digest) is tuple and len(digest) == 2 and  # pylint: disable=unidiomatic-typecheck
              type(digest[0]) is int and digest[0] >= 0 and  # pylint: disable=unidiomatic-typecheck
              type(digest[1]) is str and  # pylint: disable=unidiomatic-typecheck
              re.fullmatch('[0-9a-f]{64}', digest[1])):
        return 'the digest of {} is {}, not (size, sha256)'.format(
            name, errors.describe(digest))
    return None

  def _commit_checkpoint(self, pending: Dict[str, Any]) -> None:
    """Installs a validated checkpoint. Cannot fail."""
    for name, array in pending['store'].items():
      self._store[name] = array
    self._mappings = []  # The loaded arrays are fully backed.
    self._refresh_store_arrays()
    self._add_count = pending['add_count']
    self.episode_end_indices = pending['episode_end_indices']
    self._episode_end[:] = False
    self._episode_end[list(self.episode_end_indices)] = True
    self._next_experience_is_episode_start = pending['episode_start']
    if pending['rng_state'] is not None:
      self._rng.bit_generator.state = pending['rng_state']
    for name, value in pending['attributes'].items():
      setattr(self, name, value)


@gin.configurable(
    denylist=['observation_shape', 'stack_size', 'update_horizon', 'gamma'])
class WrappedReplayBuffer(object):
  """Graph-mode access to an `OutOfGraphReplayBuffer`.

  Every `session.run` that needs a tensor of `transition` (or the legacy
  attributes `states`, `actions`, ...) samples a fresh batch through a
  `tf.numpy_function`. With `use_staging=True` each run returns the batch
  staged by the previous run and stages the next one, sampled while the
  graph trains on the current one (see `create_sampling_ops`).

  Attributes:
    memory: the out-of-graph replay memory; `add`, `save` and `load` go to it.
    batch_size: int, the number of transitions per sampled batch.
    transition: collections.OrderedDict of name -> tf.Tensor, in
      `memory.get_transition_elements()` order, with static shapes.
  """

  def __init__(self,
               observation_shape: Tuple[int, ...],
               stack_size: int,
               use_staging: bool = False,
               replay_capacity: int = 1000000,
               batch_size: int = 32,
               update_horizon: int = 1,
               gamma: float = 0.99,
               wrapped_memory: Optional[OutOfGraphReplayBuffer] = None,
               max_sample_attempts: int = 1000,
               extra_storage_types: Optional[Sequence[ReplayElement]] = None,
               observation_dtype=np.uint8,
               terminal_dtype=np.uint8,
               action_shape: Tuple[int, ...] = (),
               action_dtype=np.int32,
               reward_shape: Tuple[int, ...] = (),
               reward_dtype=np.float32,
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
      wrapped_memory: an out-of-graph memory to use instead of a new
        `OutOfGraphReplayBuffer`.
      max_sample_attempts: int, failed draws allowed per batch.
      extra_storage_types: list of ReplayElement, extra per-transition data.
      observation_dtype: np.dtype of observations.
      terminal_dtype: np.dtype of terminal flags.
      action_shape: tuple of ints, the shape of one action.
      action_dtype: np.dtype of actions.
      reward_shape: tuple of ints, the shape of one reward.
      reward_dtype: np.dtype of rewards.
      **memory_kwargs: further keyword arguments for the memory's constructor
        (e.g. `checkpoint_duration`, `keep_every`, `rng`).

    Raises:
      ValueError: If update_horizon is not positive, gamma is outside [0, 1],
        or the capacity does not exceed the update horizon.
    """
    if replay_capacity < update_horizon + 1:
      raise ValueError(
          'Update horizon ({}) should be significantly smaller '
          'than replay capacity ({}).'.format(update_horizon, replay_capacity))
    if not update_horizon >= 1:
      raise ValueError('Update horizon must be positive.')
    if not 0.0 <= gamma <= 1.0:
      raise ValueError('Discount factor (gamma) must be in [0, 1].')
    self.batch_size = batch_size
    if wrapped_memory is None:
      wrapped_memory = self._memory_class()(
          observation_shape, stack_size, replay_capacity, batch_size,
          update_horizon=update_horizon, gamma=gamma,
          max_sample_attempts=max_sample_attempts,
          extra_storage_types=extra_storage_types,
          observation_dtype=observation_dtype, terminal_dtype=terminal_dtype,
          action_shape=action_shape, action_dtype=action_dtype,
          reward_shape=reward_shape, reward_dtype=reward_dtype,
          **memory_kwargs)
    self.memory = wrapped_memory
    self.create_sampling_ops(use_staging)

  @staticmethod
  def _memory_class():
    return OutOfGraphReplayBuffer

  def add(self, observation, action, reward, terminal, *args, **kwargs):
    """Adds a transition to the memory (see `OutOfGraphReplayBuffer.add`)."""
    self.memory.add(observation, action, reward, terminal, *args, **kwargs)

  def create_sampling_ops(self, use_staging: bool) -> None:
    """Builds the sampling ops and fills `transition` and legacy attributes.

    Without staging, the transition tensors are the outputs of one
    `tf.numpy_function` that samples a batch.

    With staging, a `StagingArea` in the session holds the next batch. A run
    takes the staged batch (or samples one, when none is staged: the first
    run) and then samples the next one into the area. That sampling runs on
    another of TensorFlow's inter-op threads while the graph trains: the
    `state` and `next_state` tensors come straight from the area, and the
    other elements (actions, rewards, indices, ...) are released once the
    next batch is staged. A training step reads them only after its
    networks have run on the states, so the sampling overlaps with that work
    and a step costs about max(sample, train). A run that reads nothing but
    the states stages nothing; the next run then samples its own batch.

    Args:
      use_staging: bool, prefetch the next batch while the graph trains.
    """
    elements = self.memory.get_transition_elements()
    with tf.name_scope('sample_replay'), tf.device('/cpu:*'):
      if use_staging:
        tensors = self._staged_sampling_ops(elements)
      else:
        self._staging_area = None
        tensors = self._sampling_op(elements, 'replay_sample_py_func')
    self.unpack_transition(tensors, elements)

  def _sampling_op(self, elements: Sequence[ReplayElement], name: str
                  ) -> List[tf.Tensor]:
    """A py_func op sampling one batch, its outputs' static shapes set."""
    tensors = numpy_function.numpy_function(
        self.memory.sample_transition_batch, [], [e.type for e in elements],
        name=name)
    for tensor, element in zip(tensors, elements):
      tensor.set_shape(element.shape)
    return tensors

  def _staged_sampling_ops(self, elements: Sequence[ReplayElement]
                          ) -> List[tf.Tensor]:
    """The transition tensors with staging (see `create_sampling_ops`)."""
    area = data_flow_ops.StagingArea(
        [tf.as_dtype(e.type) for e in elements],
        shapes=[e.shape for e in elements])
    self._staging_area = area
    batch = tf.cond(area.size() > 0, area.get,
                    lambda: self._sampling_op(elements,
                                              'replay_sample_py_func'))
    batch = batch if isinstance(batch, (list, tuple)) else [batch]
    with tf.control_dependencies(batch):  # The area holds one batch at most.
      stage = area.put(self._sampling_op(elements, 'replay_stage_py_func'),
                       name='stage_next_batch')
    tensors = []
    for tensor, element in zip(batch, elements):
      if element.name not in _NETWORK_INPUTS:
        with tf.control_dependencies([stage]):
          tensor = tf.identity(tensor, name=element.name)
      tensors.append(tensor)
    return tensors

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

  def save(self, checkpoint_dir: str, iteration_number: int) -> None:
    """Saves the memory (see `OutOfGraphReplayBuffer.save`)."""
    self.memory.save(checkpoint_dir, iteration_number)

  def load(self, checkpoint_dir: str, suffix) -> None:
    """Loads the memory (see `OutOfGraphReplayBuffer.load`).

    With staging, a batch staged before the load (one per session at most)
    lives in the session, out of the memory's reach: the next run returns
    it, and the run after samples the loaded contents. Dopamine's runners
    load before training, when nothing is staged.
    """
    self.memory.load(checkpoint_dir, suffix)
