# coding=utf-8
"""Which slots a circular replay memory can sample, and why not.

The vectorized validity test is the kernels' `valid_mask`; around it, for
the memory's methods: the slots the cursor blocks, the range uniform draws
come from, checks of the slots a caller gives (with an error that says why
one is invalid), and the error of an exhausted sample. Arguments
`add_count` (transitions written so far), `replay_capacity` (slots),
`stack_size` (frames per state) and `update_horizon` (the N of N-step
returns) are the memory's. What differs from Dopamine's sampling:
docs/compat.md#sampling.
"""

from typing import Any, Callable, Optional, Tuple

import numpy as np

from dopamine_per import errors

__all__ = ['attempts_exhausted', 'batch_size_of', 'bit_generator_of',
           'check_sample_indices',
           'check_stack_indices', 'invalid_range', 'invalid_reason',
           'modulo_range', 'sampling_range', 'slot_range']

# Tells whether each slot of a 1-D int64 array is valid.
ValidMask = Callable[[np.ndarray], np.ndarray]


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


def sampling_range(add_count: int, replay_capacity: int, stack_size: int,
                   update_horizon: int) -> Tuple[int, int]:
  """Returns [low, high) of uniform draws of slots, before the modulo.

  Returns:
    (int, int): every valid slot is some draw in [low, high) modulo the
    capacity.

  Raises:
    RuntimeError: If too few transitions have been added.
  """
  cursor = add_count % replay_capacity
  if add_count >= replay_capacity:
    return (cursor - replay_capacity + stack_size - 1,
            cursor - update_horizon)
  low, high = stack_size - 1, cursor - update_horizon
  if high <= low:
    raise RuntimeError(
        'Cannot sample a batch with fewer than stack size ({}) + '
        'update_horizon ({}) transitions.'.format(stack_size, update_horizon))
  return low, high


def attempts_exhausted(max_sample_attempts: int, num_valid: int,
                       batch_size: int) -> RuntimeError:
  """The error for a batch still incomplete after max_sample_attempts draws.

  Dopamine's message, shared by the single and the sharded memories.
  """
  return RuntimeError(
      'Max sample attempts: Tried {} times but only sampled {} valid '
      'indices. Batch size is {}'.format(max_sample_attempts, num_valid,
                                         batch_size))


def bit_generator_of(rng: Optional[np.random.Generator]) -> Tuple[Any, bool]:
  """The NumPy BitGenerator a uniform memory's draws come from (for its
  native sampler), and whether NumPy draws from it as the legacy
  RandomState: `rng`'s (`Generator.integers`), else NumPy's global one
  (`np.random.randint`)."""
  if rng is not None:
    return rng.bit_generator, False
  return np.random.get_bit_generator(), True


def invalid_reason(index: int, add_count: int, replay_capacity: int,
                   stack_size: int, update_horizon: int,
                   episode_end: np.ndarray) -> str:
  """Explains why slot `index` is not a valid transition (for errors).

  Args:
    index: int, an invalid slot.
    episode_end: bool array, whether each slot ends an episode.

  Returns:
    str, to follow 'is not a valid transition: '.
  """
  cursor = add_count % replay_capacity
  if not 0 <= index < replay_capacity:
    return 'it is outside [0, {})'.format(replay_capacity)
  if add_count < replay_capacity:
    if index < stack_size - 1:
      return 'it holds padding of the first episode'
    if index >= cursor - update_horizon:
      return ('its {}-step trajectory and next state are not all written '
              'yet (cursor at {})'.format(update_horizon, cursor))
  elif index in set(invalid_range(cursor, replay_capacity, stack_size,
                                  update_horizon).tolist()):
    return ('it is within {} slots before or {} at/after the cursor ({})'
            .format(update_horizon, stack_size, cursor))
  for slot in modulo_range(index - stack_size + 1, stack_size - 1,
                           replay_capacity):
    if episode_end[slot]:
      return ('its frame stack crosses the end of an episode (slot {})'
              .format(slot))
  return ('its {}-step trajectory crosses the end of an episode that was '
          'not terminal'.format(update_horizon))


def check_sample_indices(indices: Any, valid_mask: ValidMask,
                         reason: Callable[[int], str]) -> np.ndarray:
  """Checks the slots a caller asks to sample.

  Args:
    indices: a 1-D sequence of ints.
    valid_mask: the memory's validity test.
    reason: callable explaining why a slot is invalid (`invalid_reason`).

  Returns:
    int64 np.ndarray of the indices.

  Raises:
    ValueError: If the indices are not a 1-D sequence of integers, or one is
      not a valid transition (the message says why).
  """
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
  valid = valid_mask(array)
  if not valid.all():
    position = int(np.argmin(valid))
    index = int(array[position])
    raise ValueError(
        'indices[{}] = {} is not a valid transition: {}.'.format(
            position, index, reason(index)))
  return array


def check_stack_indices(index: Any, add_count: int, replay_capacity: int
                       ) -> np.ndarray:
  """Checks the slots whose frame or terminal stacks a caller asks for.

  Args:
    index: an int or an integer array.

  Returns:
    int64 np.ndarray shaped like `index`.

  Raises:
    dopamine_per.errors.ArgumentError: (a ValueError and an AssertionError,
      as Dopamine asserts) If an index is not an integer, out of range or
      not written yet.
  """
  indices = np.asarray(index)
  if indices.dtype.kind not in 'iu':
    raise errors.ArgumentError(
        'index must be an integer, got {!r}'.format(index))
  if np.any((indices < 0) | (indices >= replay_capacity)):
    raise errors.ArgumentError('index must be in [0, {}), got {!r}'.format(
        replay_capacity, index))
  if add_count < replay_capacity and np.any(indices >= add_count):
    raise errors.ArgumentError('Index {!r} has not been added.'.format(index))
  return indices.astype(np.int64)


def slot_range(array: np.ndarray, start_index: int, end_index: int,
               add_count: int, replay_capacity: int) -> np.ndarray:
  """`get_range` of a memory with these counters.

  Args:
    array: np.ndarray with the capacity as first dimension.
    start_index: int, first slot (may be negative: it wraps).
    end_index: int, exclusive end slot (may exceed the capacity: it wraps).

  Returns:
    ``array[start_index:end_index]``, wrapped around the end: an array of
    shape [end_index - start_index, ...].

  Raises:
    dopamine_per.errors.ArgumentError: (a ValueError and an AssertionError,
      as Dopamine asserts) If the range is empty or malformed, or reaches
      slots not written yet.
  """
  if end_index <= start_index:
    raise errors.ArgumentError('end_index must be larger than start_index')
  if end_index < 0 or start_index >= replay_capacity:
    raise errors.ArgumentError('Range [{}, {}) is outside the buffer.'.format(
        start_index, end_index))
  if add_count < replay_capacity and end_index > add_count:
    raise errors.ArgumentError(
        'Index {} has not been added.'.format(start_index))
  if 0 <= start_index and end_index <= replay_capacity:
    return array[start_index:end_index]
  return array[modulo_range(start_index, end_index - start_index,
                            replay_capacity)]


def batch_size_of(indices: np.ndarray, batch_size: Optional[int]) -> int:
  """The batch size of a sample of given `indices`: theirs, or checked.

  Raises:
    errors.ArgumentError: If batch_size is given and differs from
      len(indices).
  """
  if batch_size is None:
    return len(indices)
  if batch_size != len(indices):
    raise errors.ArgumentError(
        'batch_size is {} but {} indices were given.'.format(
            batch_size, len(indices)))
  return batch_size
