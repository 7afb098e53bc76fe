# coding=utf-8
"""Dopamine JAX's `ReplayBuffer` on dopamine_per's native core (issue 34).

The same constructor, methods and batches as
`dopamine.jax.replay_memory.replay_buffer.ReplayBuffer`: elements keyed by
`add_count`, the oldest evicted past `max_capacity`, sampled through the
sampling distribution. With Dopamine's `TransitionAccumulator` (ours), each
step's frame is stored once and elements as arrays of their fields
(`transition_store`), states stacked at sample time by the native sampler;
`compress=True` keeps the frames in LZ4 blocks instead of snappy-packing
each element's two states. Any other accumulator's elements are stored as
it yields them (packed if `compress`), as Dopamine stores them.
"""

import collections
import collections.abc
from concurrent import futures
import os
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

import gin
import numpy as np

from dopamine_per.jax.replay_memory import accumulator as accumulators
from dopamine_per.file_io import atomic_files
from dopamine_per.jax.replay_memory import dopamine_import
from dopamine_per.jax.replay_memory import elements
from dopamine_per.jax.replay_memory import frame_ring
from dopamine_per.jax.replay_memory import replay_checkpoint
from dopamine_per.jax.replay_memory import samplers
from dopamine_per.jax.replay_memory import transition_store

__all__ = ['ReplayBuffer']

ReplayItemID = elements.ReplayItemID
# The accumulator whose steps the store takes directly (a subclass that
# overrides `accumulate` is asked for elements instead).
_SPANS = accumulators.TransitionAccumulator


def _takes_spans(accumulator: Any) -> bool:
  kind = type(accumulator)
  return (issubclass(kind, _SPANS) and
          kind.accumulate is _SPANS.accumulate)


class _StoredElements(collections.abc.Mapping):
  """Read-only key -> element view of a memory's stored elements (what
  Dopamine's `_memory` dict holds), oldest first."""

  def __init__(self, memory: 'ReplayBuffer') -> None:
    self._memory = memory

  def __getitem__(self, key: Any) -> elements.ReplayElement:
    return self._memory.element(key)

  def __iter__(self) -> Iterator[int]:
    return iter(self._memory.stored_keys())

  def __len__(self) -> int:
    return len(self._memory.stored_keys())


@gin.configurable
class ReplayBuffer(object):
  """A FIFO memory of replay elements, sampled by its sampling
  distribution.

  Attributes:
    add_count: int, how many elements were ever stored (the next key).
  """

  def __init__(self, transition_accumulator: Any,
               sampling_distribution: samplers.SamplingDistribution, *,
               batch_size: int, max_capacity: int,
               checkpoint_duration: int = 4, compress: bool = True):
    if checkpoint_duration < 1:
      raise ValueError(
          f'Invalid checkpoint_duration: {checkpoint_duration}')
    if not isinstance(max_capacity, (int, np.integer)) or max_capacity < 1:
      raise ValueError(f'Invalid max_capacity: {max_capacity!r}, must be a '
                       'positive int.')
    self.add_count = 0
    self._max_capacity = int(max_capacity)
    self._compress = compress
    self._batch_size = batch_size
    self._checkpoint_duration = checkpoint_duration
    self._transition_accumulator = transition_accumulator
    self._sampling_distribution = sampling_distribution
    self._lock = threading.RLock()
    self._store: Optional[transition_store.TransitionStore] = None
    # The last checkpoint saved or loaded: (its folder, where its frame
    # parts are), and the background save still writing.
    self._saved: Tuple[Optional[str], Any] = (None, {})
    self._saver: Optional[futures.ThreadPoolExecutor] = None
    self._pending: Optional[futures.Future] = None
    self._elements: Optional[collections.OrderedDict] = None
    if _takes_spans(transition_accumulator):
      self._store = transition_store.TransitionStore(
          self._max_capacity, transition_accumulator.stack_size,
          transition_accumulator.update_horizon, compress)
    else:
      self._elements = collections.OrderedDict()

  # ------------------------------------------------------------- stored

  @property
  def _memory(self) -> collections.abc.Mapping:
    """The stored elements by key, oldest first (read-only with our
    accumulator: each element is stacked when read)."""
    if self._elements is not None:
      return self._elements
    return _StoredElements(self)

  def stored_keys(self) -> range:
    """The keys held, oldest first."""
    if self._elements is not None:
      return list(self._elements.keys())
    held = min(self.add_count, self._max_capacity)
    return range(self.add_count - held, self.add_count)

  def element(self, key: int) -> elements.ReplayElement:
    """The element stored under `key`; KeyError if none is."""
    with self._lock:
      if self._elements is not None:
        return self._elements[key]
      if key not in self.stored_keys():
        raise KeyError(key)
      return self._store.element(int(key) % self._max_capacity)

  @property
  def nbytes(self) -> int:
    """The bytes the stored elements hold (frames, fields; not the
    sampler's)."""
    return self._store.nbytes if self._store is not None else 0

  # ---------------------------------------------------------------- add

  def add(self, transition: elements.TransitionElement,
          **kwargs: Any) -> None:
    """Adds one step; stores the elements it completes (each given to the
    sampling distribution with `kwargs`, e.g. `priority=`), evicting the
    oldest past `max_capacity`."""
    with self._lock:
      if self._store is None:
        for element in self._transition_accumulator.accumulate(transition):
          if self._compress:
            element = element.pack()
          self._keep(element, kwargs)
        return
      self._add_step(transition, kwargs)

  def _add_step(self, transition: elements.TransitionElement,
                kwargs: Any) -> None:
    store, steps = self._store, self._transition_accumulator
    frame = store.check_step(transition)
    store.write_frame(steps.steps, frame, self._oldest_read())
    for span in steps.accumulate_spans(transition):
      reward = store.check_span(span)
      store.put(self.add_count % self._max_capacity, span, reward)
      self._keep(None, kwargs)

  def _oldest_read(self) -> int:
    """The oldest step whose frame a held element or one to come reads."""
    steps = self._transition_accumulator
    oldest = steps.steps - steps.held_steps
    if self.add_count:
      key = self.add_count - min(self.add_count, self._max_capacity)
      oldest = min(oldest, self._store.oldest_read(key % self._max_capacity))
    return oldest

  def _keep(self, element: Any, kwargs: Any) -> None:
    """Gives the next key to the sampler (and `element` to the generic
    store), then evicts the oldest past the capacity."""
    key = ReplayItemID(self.add_count)
    if self._elements is not None:
      self._elements[key] = element
    self._sampling_distribution.add(key, **kwargs)
    self.add_count += 1
    if self.add_count > self._max_capacity:
      oldest = self.add_count - self._max_capacity - 1
      if self._elements is not None:
        oldest, _ = self._elements.popitem(last=False)
      self._sampling_distribution.remove(ReplayItemID(oldest))

  # ------------------------------------------------------------- sample

  def sample(self, size: Optional[int] = None, *,
             with_sample_metadata: bool = False) -> Any:
    """A batch of `size` elements (default `batch_size`), stacked, and with
    `with_sample_metadata` the sampler's metadata (keys, probabilities).

    Raises:
      ValueError: If nothing was stored, or `size` < 1.
      KeyError: If the sampler gives a key not held.
    """
    if self.add_count < 1:
      raise ValueError('No samples in replay buffer!')
    if size is None:
      size = self._batch_size
    if size < 1:
      raise ValueError(f'Invalid size: {size}, size must be >= 1.')
    with self._lock:
      metadata = self._sampling_distribution.sample(size)
      batch = self._gather(np.asarray(metadata.keys))
    return (batch, metadata) if with_sample_metadata else batch

  def _gather(self, keys: np.ndarray) -> Any:
    if self._elements is not None:
      import jax  # pylint: disable=g-import-not-at-top
      picked = [self._elements[int(key)] for key in keys]
      if self._compress:
        picked = [element.unpack() for element in picked]
      return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *picked)
    keys = keys.astype(np.int64)
    held = min(self.add_count, self._max_capacity)
    stale = (keys < self.add_count - held) | (keys >= self.add_count)
    if stale.any():
      raise KeyError(int(keys[stale][0]))
    return self._store.batch(keys % self._max_capacity)

  def update(self, keys: Any, **kwargs: Any) -> None:
    """Passes `keys` and `kwargs` (e.g. `priorities=`) to the sampler."""
    with self._lock:
      self._sampling_distribution.update(keys, **kwargs)

  def clear(self) -> None:
    """Forgets every element, the episode so far and the sampler's keys."""
    with self._lock:
      self.add_count = 0
      if self._elements is not None:
        self._elements.clear()
      self._transition_accumulator.clear()
      self._sampling_distribution.clear()

  # -------------------------------------------------------- checkpoints

  def _snapshot(self, known: Any = ()) -> Tuple[Dict[str, Any], List[Any]]:
    """The memory's state, copied (plain data and arrays), and its frames'
    parts (those in `known` without data)."""
    state = {
        'add_count': self.add_count,
        'max_capacity': self._max_capacity,
        'transition_accumulator':
            self._transition_accumulator.to_state_dict(),
        'sampling_distribution': self._sampling_distribution.to_state_dict(),
    }
    parts = []
    if self._store is not None:
      state['stack_size'] = self._store.stack_size
      state['memory'], parts = self._store.state(
          self._oldest_read(), self._transition_accumulator.steps - 1, known)
    else:
      state['memory'] = {'keys': list(self._elements.keys()),
                         'values': [_fields(element)
                                    for element in self._elements.values()]}
    return state, parts

  def _install(self, state: Dict[str, Any], parts: List[Any]) -> None:
    """Takes a state `_snapshot` gave (its parts with data); nothing
    changes if it does not fit.

    Raises:
      atomic_files.CorruptCheckpointError: If it does not fit this memory.
    """
    steps, sampler = self._transition_accumulator, self._sampling_distribution
    before = (steps.to_state_dict(), sampler.to_state_dict())
    try:
      if int(state['max_capacity']) != self._max_capacity:
        raise ValueError('saved with max_capacity={}, this memory has '
                         '{}'.format(state['max_capacity'],
                                     self._max_capacity))
      stack = int(state.get('stack_size', 0))
      if self._store is not None and stack != self._store.stack_size:
        raise ValueError('saved with stack_size={}, this memory stacks {} '
                         'frames'.format(stack, self._store.stack_size))
      add_count = int(state['add_count'])
      memory = state['memory']
      steps.from_state_dict(state['transition_accumulator'])
      sampler.from_state_dict(state['sampling_distribution'])
      if self._store is not None:
        self._store.restore(memory, parts)
      else:
        self._elements = collections.OrderedDict(
            (int(key), _element(fields, self._compress))
            for key, fields in zip(memory['keys'], memory['values']))
    except (KeyError, ValueError, TypeError, AttributeError) as e:
      steps.from_state_dict(before[0])
      sampler.from_state_dict(before[1])
      raise atomic_files.CorruptCheckpointError(
          'the replay checkpoint does not fit this memory: {}'.format(
              e)) from e
    self.add_count = add_count

  def to_state_dict(self) -> Dict[str, Any]:
    """The memory's state as plain data and arrays (its frames under
    'frame_parts': [LZ4 block?, first step, last step, bytes] each)."""
    with self._lock:
      state, parts = self._snapshot()
    state['frame_parts'] = [[key.compressed, key.first, key.last,
                             bytes(data)] for key, data in parts]
    return state

  def from_state_dict(self, state_dict: Dict[str, Any]) -> None:
    """Takes what `to_state_dict` gave."""
    parts = [frame_ring.FramePart(
        frame_ring.PartKey(bool(compressed), int(first), int(last)), data)
             for compressed, first, last, data in state_dict.get(
                 'frame_parts', [])]
    with self._lock:
      self._install(state_dict, parts)

  def save(self, checkpoint_dir: str, iteration_number: int, *,
           background: bool = False) -> Optional[futures.Future]:
    """Writes the memory to `checkpoint_dir/<iteration_number>/replay/`
    (`replay_checkpoint`: its frames in packs shared with the checkpoints
    before, only the parts they lack written), then deletes all but the
    newest `checkpoint_duration` iterations' checkpoints.

    Args:
      checkpoint_dir: the run's checkpoint folder.
      iteration_number: the iteration.
      background: return once the memory's state is copied (the element
        arrays, the sampler, and the frames not saved before: with
        compressed frames, the new blocks' bytes), leaving the files to a
        thread; adds, samples and updates go on meanwhile.

    Returns:
      With `background`, a `concurrent.futures.Future` whose `result()`
      waits for the checkpoint and raises what its writing raised; else
      None, the checkpoint written.
    """
    self.wait_for_save()
    directory = os.fspath(checkpoint_dir)
    known = self._saved[1] if self._saved[0] == directory else {}
    with self._lock:
      state, parts = self._snapshot(known)

    def write() -> None:
      index = replay_checkpoint.save(directory, iteration_number, state,
                                     parts, known)
      self._saved = (directory, index)
      replay_checkpoint.prune(directory, self._checkpoint_duration)

    if not background:
      write()
      return None
    if self._saver is None:
      self._saver = futures.ThreadPoolExecutor(
          1, thread_name_prefix='replay_save')
    self._pending = self._saver.submit(write)
    return self._pending

  def wait_for_save(self) -> None:
    """Waits for a background save still writing (its error is raised by
    its Future, not here)."""
    pending = self._pending
    if pending is not None:
      futures.wait([pending])

  def load(self, checkpoint_dir: str, iteration_number: int, *,
           from_dopamine: bool = False) -> None:
    """Restores what `save` wrote for `iteration_number`.

    Args:
      checkpoint_dir: the folder `save` was given.
      iteration_number: the iteration saved.
      from_dopamine: read a checkpoint Dopamine JAX's `ReplayBuffer.save`
        wrote instead (`dopamine_import`: its pickles are never loaded).

    Raises:
      FileNotFoundError: If there is no such checkpoint (what Dopamine's
        agents catch; an `atomic_files.CheckpointNotFoundError`).
      atomic_files.CorruptCheckpointError: If it is damaged or does not
        fit this memory (nothing changed).
    """
    self.wait_for_save()
    directory, index = os.fspath(checkpoint_dir), {}
    if not from_dopamine:
      state, parts, index = replay_checkpoint.load(directory,
                                                   iteration_number)
    else:
      state, parts = self._from_dopamine(directory, iteration_number)
    with self._lock:
      self._install(state, parts)
      self._saved = (directory, index)

  def _from_dopamine(self, directory: str, iteration_number: int
                     ) -> Tuple[Dict[str, Any], List[Any]]:
    dopamine = dopamine_import.read(directory, iteration_number)
    try:
      if self._store is not None:
        return dopamine_import.convert(
            dopamine, self._max_capacity,
            self._transition_accumulator.stack_size)
      return dopamine_import.convert_elements(dopamine,
                                              self._max_capacity), []
    except (KeyError, ValueError, TypeError, IndexError) as e:
      raise atomic_files.CorruptCheckpointError(
          'the Dopamine checkpoint of iteration {} in {} does not fit this '
          'memory: {}'.format(iteration_number, directory, e)) from e


_ELEMENT_KINDS = {'replay_element': elements.ReplayElement,
                  'transition': elements.TransitionElement}


def _fields(element: Any) -> Dict[str, Any]:
  """An element of another accumulator as plain data (unpacked)."""
  if isinstance(element, elements.ReplayElement):
    if element.is_compressed:
      element = element.unpack()
    return {'kind': 'replay_element',
            'fields': [getattr(element, name) for name in
                       ('state', 'action', 'reward', 'next_state',
                        'is_terminal', 'episode_end')]}
  if isinstance(element, elements.TransitionElement):
    return {'kind': 'transition', 'fields': list(element)}
  raise TypeError('cannot save a stored {} (only ReplayElement and '
                  'TransitionElement)'.format(type(element).__name__))


def _element(fields: Dict[str, Any], compress: bool) -> Any:
  element = _ELEMENT_KINDS[fields['kind']](*fields['fields'])
  if compress and isinstance(element, elements.ReplayElement):
    element = element.pack()
  return element
