# coding=utf-8
"""A prioritized replay memory sharded over Ray actors (Horgan et al., 2018).

`ShardedPrioritizedReplayBuffer` spreads `replay_capacity` slots over
`num_shards` Ray actors (`shard.ReplayShard`), each an
`OutOfGraphPrioritizedReplayBuffer` of ``replay_capacity // num_shards``
slots, fed by writers (`writer.ShardWriter`). The learner sees the single
memory's surface with global indices, and samples one distribution over all
shards: stratified targets over the sum of the shards' total priorities,
each routed to the shard whose range of mass holds it (Schaul et al., 2015,
appendix B.2.1, over the concatenation of the shards' trees). Design, wire
format and failure behaviour: docs/distributed.md.

The module imports Ray and the TF-free memory, never TensorFlow.
"""

import concurrent.futures
import functools
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import gin
import numpy as np
import ray

from dopamine_per.native import batch_queue
from dopamine_per.distributed import frame_shipping
from dopamine_per.distributed import locking
from dopamine_per.distributed import native_feed
from dopamine_per.distributed import placement
from dopamine_per.distributed import prefetch as prefetch_lib
from dopamine_per.distributed import shard as shard_lib
from dopamine_per.distributed import sharded_checkpoint
from dopamine_per.distributed import writer as writer_lib
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory.circular_replay_buffer import ReplayElement
from dopamine_per.replay_memory.memory import sampling
from dopamine_per.replay_memory.memory import validation

__all__ = ['ShardedPrioritizedReplayBuffer', 'route_targets']

# Priority updates (set_priority calls) a shard's queue holds before they are
# sent on their own; normally the next draw takes them well before.
_MAX_QUEUED_UPDATES = 1024


@functools.lru_cache(maxsize=None)
def _shard_actor_class() -> Any:
  """The shard's Ray actor class, made on first use (not at import)."""
  return ray.remote(shard_lib.ReplayShard)


def route_targets(targets: np.ndarray, totals: np.ndarray
                 ) -> Tuple[np.ndarray, np.ndarray]:
  """Maps global masses to (shard, mass within that shard's tree).

  Shard k owns [sum(totals[:k]), sum(totals[:k + 1])); a target at or past
  the grand total (rounding) goes to the last shard with positive total.

  Args:
    targets: float64 array of masses in [0, sum(totals)].
    totals: float64 array [num_shards] of the shards' total priorities, with
      at least one positive.

  Returns:
    (shards, local): int64 shard numbers and float64 masses, shaped like
    `targets`; ``local`` is in [0, totals[shard]] up to rounding.
  """
  cumulative = np.cumsum(totals)
  shards = np.searchsorted(cumulative, targets, side='right')
  last_positive = int(np.flatnonzero(totals > 0)[-1])
  shards = np.minimum(shards, last_positive)
  local = targets - (cumulative - totals)[shards]
  return shards.astype(np.int64), np.maximum(local, 0.0)


def _fill_shipped(shipped: frame_shipping.ShippedFrames,
                  positions: np.ndarray, states: np.ndarray,
                  next_states: np.ndarray) -> None:
  """Fills rows `positions` of a batch's states from a shard's frames:
  in place where the rows are consecutive (a shard's part of a batch
  usually is), else through a copy."""
  if len(positions) and np.array_equal(
      positions, np.arange(positions[0], positions[0] + len(positions))):
    rows = slice(int(positions[0]), int(positions[0]) + len(positions))
    frame_shipping.fill_states(shipped, states[rows], next_states[rows])
    return
  states[positions], next_states[positions] = (
      frame_shipping.unpacked_states(shipped))


@gin.configurable
class ShardedPrioritizedReplayBuffer(object):
  """The single prioritized memory's learner surface over Ray shards.

  Indices (taken and returned) are global: ``shard * shard_capacity + slot``.
  Transitions are added through `writer(stream_id)` (or `add`, stream 0).
  `set_priority` checks its batch and queues it: the queued updates travel
  with the next call to their shard that samples, or on their own once a
  shard has `_MAX_QUEUED_UPDATES` of them or before any other read. Every
  read also first flushes stream 0's writer; Ray runs one caller's calls to
  an actor in order, so a read sees both. The public methods hold one lock
  (`set_priority` only a second one, for the updates queued and in
  flight), so threads (TensorFlow's, with staging) may share the memory.

  With ``prefetch=n > 0``, a background thread (`prefetch.BatchPrefetcher`)
  keeps default-size batches sampled ahead, drawn `batches_per_call` per
  remote call to each shard, and `sample_transition_batch()` returns the
  oldest at once: it was drawn before the priorities set since
  (docs/distributed.md#fetch-ahead). Calls with another batch size, or with
  `indices`, sample there and then.

  Attributes:
    num_shards: int, the number of shards.
    shard_capacity: int, slots per shard (replay_capacity // num_shards; the
      remainder is not allocated).
    replay_capacity: int, num_shards * shard_capacity, the global slots.
  """

  def __init__(self,
               num_shards: int,
               replay_capacity: int,
               batch_size: int,
               ray_address: Optional[str] = None,
               num_cpus_per_shard: float = 1.0,
               flush_every: int = writer_lib.DEFAULT_FLUSH_EVERY,
               start_timeout_s: float = 120.0,
               prefetch: int = 0,
               batches_per_call: int = 1,
               **memory_kwargs: Any):
    """Starts the shard actors, each with an empty memory.

    Args:
      num_shards: int >= 1, the number of shard actors.
      replay_capacity: int, global slots; each shard gets
        replay_capacity // num_shards.
      batch_size: int, the default batch size.
      ray_address: str or None; used only if Ray is not initialized in this
        process yet: ``ray.init(address=ray_address)`` (None starts a local
        Ray with this machine's CPUs).
      num_cpus_per_shard: float >= 0, the CPUs Ray reserves for each shard
        (on one node). Shards the nodes alive now could never hold are
        refused at once (`placement.check_placeable`). To run more shards
        than cores, reserve a fraction (0.5) or 0.
      flush_every: int >= 1, transitions a writer buffers per remote call.
      start_timeout_s: float, how long to wait for the shards to start
        (for CPUs that other actors hold, say).
      prefetch: int >= 0, default-size batches sampled ahead in a background
        thread, rounded up to whole draws of `batches_per_call` (0: none;
        every batch is sampled when asked for).
      batches_per_call: int >= 1, default-size batches the background thread
        draws per remote call to each shard (with `prefetch` only; it keeps
        ceil(prefetch / batches_per_call) such draws ready besides the one
        being handed out).
      **memory_kwargs: the single memory's other arguments
        (`OutOfGraphPrioritizedReplayBuffer`: observation_shape,
        stack_size, update_horizon, gamma, max_sample_attempts, ...), given
        to every shard. ``rng`` (a seed or numpy Generator) also seeds the
        learner's draws (None: fresh entropy, not Python's ``random``).

    Raises:
      ValueError: If an argument is malformed, a shard would be smaller
        than update_horizon + stack_size, or the cluster's nodes could never
        place the shards (`placement.check_placeable`); checked before any
        actor starts.
      shard.ShardError: If a shard actor fails to start.
      RuntimeError: If the shards do not start within start_timeout_s (the
        shard actors are then killed).
    """
    self.num_shards = validation.check_int('num_shards', num_shards, 1)
    replay_capacity = validation.check_int('replay_capacity',
                                           replay_capacity, 1)
    self._batch_size = validation.check_int('batch_size', batch_size, 1)
    self._flush_every = validation.check_int('flush_every', flush_every, 1)
    prefetch = validation.check_int('prefetch', prefetch, 0)
    self._batches_per_call = validation.check_int('batches_per_call',
                                                  batches_per_call, 1)
    num_cpus_per_shard = validation.check_real(
        'num_cpus_per_shard', num_cpus_per_shard, 0.0, float(2 ** 31))
    self.shard_capacity = replay_capacity // self.num_shards
    if self.shard_capacity < 1:
      raise ValueError('replay_capacity ({}) must be at least num_shards '
                       '({})'.format(replay_capacity, self.num_shards))
    self.replay_capacity = self.shard_capacity * self.num_shards
    if int(self.replay_capacity) >= 2 ** 31:
      raise ValueError('global indices are int32 in batches: replay_capacity '
                       'must be < 2**31, got {}'.format(replay_capacity))
    # A gin file may give TensorFlow dtypes (gym_lib's constants are): the
    # shards take NumPy's, and never import TensorFlow.
    for name in ('observation_dtype', 'action_dtype', 'reward_dtype'):
      if name in memory_kwargs:
        memory_kwargs[name] = getattr(memory_kwargs[name], 'as_numpy_dtype',
                                      memory_kwargs[name])
    # One shard's memory, built here first: its arguments are checked before
    # any actor starts, and it gives the batch layout.
    template = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
        replay_capacity=self.shard_capacity, batch_size=self._batch_size,
        **memory_kwargs)
    self._elements = template.get_transition_elements(1)
    del template
    self._max_sample_attempts = int(
        memory_kwargs.get('max_sample_attempts', 1000))
    rng = memory_kwargs.get('rng')
    self._rng = (rng if isinstance(rng, np.random.Generator) else
                 np.random.default_rng(rng))
    if not ray.is_initialized():
      ray.init(address=ray_address)
    placement.check_placeable(self.num_shards, num_cpus_per_shard,
                              placement.cluster_node_cpus())
    actor = _shard_actor_class().options(num_cpus=num_cpus_per_shard)
    self._handles = [
        actor.remote(k, self.shard_capacity, self._batch_size, memory_kwargs)
        for k in range(self.num_shards)]
    self._closed = False
    self._lock = threading.RLock()
    # Guards the priority updates queued ({shard: [(slots, priorities)]})
    # and in flight ({shard: Ray reference}) alone, so that `set_priority`
    # need not wait for a draw in progress. Taken after _lock.
    self._priority_lock = threading.RLock()
    self._queued_priorities = {}
    self._pending_priorities = {}
    # Each shard's (total, ready) as its last answer gave it (None: unknown).
    self._masses = None
    self._checkpointer = sharded_checkpoint.ShardedCheckpointer(
        self.num_shards, self.shard_capacity, self._call_each)
    self._writer0 = self.writer(0)
    self._prefetcher = None
    self._feeder = None
    self._prefetch_depth = -(-prefetch // self._batches_per_call)
    if prefetch:
      self._prefetcher = prefetch_lib.BatchPrefetcher(
          self._sample_ahead, self._prefetch_depth,
          name='sharded_replay_prefetch')
    self._wait_for_shards(start_timeout_s, num_cpus_per_shard)

  def _wait_for_shards(self, timeout_s: float, num_cpus: float) -> None:
    """Waits until every shard answers; kills them all if one does not."""
    refs = [handle.add_count.remote() for handle in self._handles]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    try:
      if len(ready) < len(refs):
        late = [k for k, ref in enumerate(refs) if ref not in ready]
        raise RuntimeError(
            'replay shards {} did not start within {} s: the Ray cluster may '
            'lack the CPUs they reserve ({} each, num_cpus_per_shard; '
            'available: {})'.format(late, timeout_s, num_cpus,
                                    ray.available_resources().get('CPU', 0)))
      for k, ref in enumerate(refs):
        writer_lib.get_from_shard(k, ref)
    except Exception:
      self.close()
      raise

  # --------------------------------------------------------- remote calls

  def _check_open(self) -> None:
    if self._closed:
      raise RuntimeError('this ShardedPrioritizedReplayBuffer is closed')

  def _call_each(self, method: str, args_by_shard: Dict[int, Tuple[Any, ...]]
                 ) -> Tuple[Dict[int, Any], Optional[Exception]]:
    """Calls `method` on several shards at once; waits for all of them.

    Returns:
      ({shard: result} of the shards that answered, the first error or
      None): after a failure, the caller can undo what the others did.
    """
    self._check_open()
    refs = {k: getattr(self._handles[k], method).remote(*args)
            for k, args in args_by_shard.items()}
    results, first_error = {}, None
    for k, ref in refs.items():
      try:
        results[k] = writer_lib.get_from_shard(k, ref)
      except Exception as error:  # pylint: disable=broad-except
        first_error = first_error or error
    return results, first_error

  def _call(self, method: str, args_by_shard: Dict[int, Tuple[Any, ...]]
           ) -> Dict[int, Any]:
    """Calls `method` on several shards at once; returns {shard: result}."""
    results, error = self._call_each(method, args_by_shard)
    if error is not None:
      raise error
    return results

  def _call_all(self, method: str) -> List[Any]:
    """Settles, then returns every shard's `method()`, in shard order."""
    self._settle()
    results = self._call(method, {k: () for k in range(self.num_shards)})
    return [results[k] for k in range(self.num_shards)]

  def _settle(self) -> None:
    """Flushes stream 0 and waits for earlier priority updates (any error)."""
    self._check_open()
    self._writer0.flush()
    self._wait_for_priorities()

  @locking.synchronized('_priority_lock')
  def _wait_for_priorities(self) -> None:
    """Sends the queued priority updates and waits for all in flight."""
    self._take_native_priorities()
    for k in list(self._queued_priorities):
      self._send_priorities(k)
    pending, self._pending_priorities = self._pending_priorities, {}
    for k, ref in pending.items():
      writer_lib.get_from_shard(k, ref)

  @locking.synchronized('_priority_lock')
  def _take_queued(self, shard: int
                  ) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Empties a shard's queue: (slots, priorities) in order, or Nones."""
    self._take_native_priorities()
    queued = self._queued_priorities.pop(shard, None)
    if not queued:
      return None, None
    return (np.concatenate([slots for slots, _ in queued]),
            np.concatenate([priorities for _, priorities in queued]))

  @locking.synchronized('_priority_lock')
  def _send_priorities(self, shard: int) -> None:
    """Sends a shard's queued updates (after its previous update)."""
    if shard in self._pending_priorities:
      writer_lib.get_from_shard(shard, self._pending_priorities.pop(shard))
    slots, priorities = self._take_queued(shard)
    if slots is not None:
      self._pending_priorities[shard] = (
          self._handles[shard].set_priority.remote(slots, priorities))

  def _split(self, indices: np.ndarray) -> Dict[int, np.ndarray]:
    """Groups global indices by shard: {shard: positions in `indices`}."""
    shards = indices // self.shard_capacity
    return {int(k): np.flatnonzero(shards == k) for k in np.unique(shards)}

  # ------------------------------------------------------------- writing

  @locking.synchronized('_lock')
  def writer(self, stream_id: int) -> writer_lib.ShardWriter:
    """Returns a picklable writer for stream `stream_id`.

    Args:
      stream_id: int >= 0; the stream writes to shard
        stream_id % num_shards.

    Returns:
      writer.ShardWriter, whose `add` takes the single memory's `add`
      arguments.
    """
    self._check_open()
    stream_id = validation.check_int('stream_id', stream_id, 0)
    shard = stream_id % self.num_shards
    return writer_lib.ShardWriter(stream_id, shard, self._handles[shard],
                                  self._flush_every)

  @locking.synchronized('_lock')
  def add(self, observation: Any, action: Any, reward: Any, terminal: Any,
          *args: Any, **kwargs: Any) -> None:
    """The single memory's `add`, through stream 0 (buffered; see writer).

    The transition reaches the memory when its episode ends; errors the
    shard raises surface at a later add or read.
    """
    self._check_open()
    self._writer0.add(observation, action, reward, terminal, *args, **kwargs)

  # ------------------------------------------------------------ counters

  @property
  @locking.synchronized('_lock')
  def add_count(self) -> np.ndarray:
    """Transitions written to all shards, padding included (0-d int64)."""
    return np.array(sum(self.shard_add_counts()), dtype=np.int64)

  @locking.synchronized('_lock')
  def shard_add_counts(self) -> List[int]:
    """Returns each shard's add_count, in shard order."""
    return [int(count) for count in self._call_all('add_count')]

  @property
  def shard_handles(self) -> List[Any]:
    """The shards' Ray actor handles, in shard order (monitoring, tests).

    Calling them directly bypasses this class's checks.
    """
    return list(self._handles)

  def is_empty(self) -> bool:
    """Returns whether no shard holds a transition."""
    return int(self.add_count) == 0

  @locking.synchronized('_lock')
  def total_priority(self) -> float:
    """Returns the sum of all shards' priorities."""
    return float(sum(total for total, _ in self._call_all('mass')))

  def get_transition_elements(self, batch_size: Optional[int] = None
                             ) -> List[ReplayElement]:
    """Returns the layout of `sample_transition_batch`'s result.

    Args:
      batch_size: int, or None for the default batch size.

    Returns:
      list of ReplayElement, as the single memory's.
    """
    batch_size = self._batch_size if batch_size is None else batch_size
    return [ReplayElement(e.name, (batch_size,) + tuple(e.shape[1:]), e.type)
            for e in self._elements]

  # ------------------------------------------------------------- sampling

  def _sampleable_totals(self, fresh: bool) -> np.ndarray:
    """The shards' masses to route a draw over; shards too young own none.

    Args:
      fresh: bool, whether to ask every shard for its mass rather than use
        the last draw's answers, when those let a draw proceed.

    Raises:
      RuntimeError: If no shard holds enough transitions to sample.
      ValueError: If the shards that do hold enough have total priority 0.
    """
    def routable():
      return np.array([total if ready else 0.0
                       for total, ready in self._masses])
    if not fresh and self._masses is not None:
      totals = routable()
      if totals.sum() > 0.0:
        return totals
    masses = self._call_with_updates('mass', range(self.num_shards),
                                     lambda k: ())
    self._masses = [masses[k] for k in range(self.num_shards)]
    if not any(ready for _, ready in self._masses):
      raise RuntimeError(
          'Cannot sample a batch: no shard holds stack size + '
          'update_horizon transitions yet.')
    totals = routable()
    if not totals.sum() > 0.0:
      raise ValueError('Cannot sample: every priority is zero in the shards '
                       'that hold enough transitions.')
    return totals

  def _call_with_updates(self, method: str, shards: Any,
                         args_of: Callable[[int], Tuple[Any, ...]]
                        ) -> Dict[int, Any]:
    """Calls ``method(slots, priorities, *args_of(k))`` on each shard k.

    (slots, priorities) are the shard's queued priority updates, taken and
    sent holding the priority lock, so that no update `set_priority` sends
    meanwhile overtakes them. Returns {shard: result}.
    """
    self._check_open()
    with self._priority_lock:
      refs = {k: getattr(self._handles[k], method).remote(
          *self._take_queued(k), *args_of(k)) for k in shards}
    return {k: writer_lib.get_from_shard(k, ref) for k, ref in refs.items()}

  def _draw(self, batch_size: int, gather: bool, batches: int = 1,
            fresh: bool = True
           ) -> Tuple[np.ndarray, List[Tuple[np.ndarray, Tuple[Any, ...]]]]:
    """Samples global indices in proportion to priority over all shards.

    Each batch is stratified over the grand total; each shard finds its
    targets' slots in one call. Invalid draws are replaced by independent
    draws over the grand total, as the single memory does.

    Args:
      batch_size: int, entries per batch.
      gather: bool, whether the shards return the transitions.
      batches: int, batches drawn together (each stratified on its own).
      fresh: bool, whether to route over masses asked for now rather than
        those of the last draw's answers (see `_sampleable_totals`).

    Returns:
      (indices, pieces): int64 global indices [batches * batch_size], batch
      after batch; and, when `gather`, (positions, shard batch) pairs
      covering them.
    """
    self._check_open()
    self._writer0.flush()
    totals = self._sampleable_totals(fresh)
    size = batches * batch_size
    strata = np.tile(np.arange(batch_size), batches)
    targets = (strata + self._rng.random(size)) * (totals.sum() / batch_size)
    indices = np.zeros(size, dtype=np.int64)
    pieces = []
    pending = np.arange(size)
    failures = 0
    while True:
      shards, local = route_targets(targets[pending], totals)
      groups = {int(k): np.flatnonzero(shards == k) for k in np.unique(shards)}
      # The first round calls every shard: each takes its queued updates
      # and reports its mass.
      fractions = local / totals[shards]
      results = self._call_with_updates(
          'draw', groups if failures else range(self.num_shards),
          lambda k: (fractions[groups.get(k, [])], gather))
      for k, result in results.items():
        self._masses[k] = result[3]
      still_invalid = []
      for k, where in groups.items():
        slots, valid, batch, _ = results[k]
        positions = pending[where]
        indices[positions] = k * self.shard_capacity + slots
        still_invalid.append(positions[~valid])
        if batch is not None and valid.any():
          pieces.append((positions[valid], batch))
      pending = np.sort(np.concatenate(still_invalid))
      if not len(pending):
        return indices, pieces
      failures += len(pending)
      if failures >= self._max_sample_attempts * batches:
        raise sampling.attempts_exhausted(self._max_sample_attempts,
                                          size - len(pending), size)
      totals = self._sampleable_totals(fresh=False)
      targets[pending] = self._rng.random(len(pending)) * totals.sum()

  @locking.synchronized('_lock')
  def sample_index_batch(self, batch_size: int) -> np.ndarray:
    """Returns `batch_size` valid global indices, drawn by priority.

    Args:
      batch_size: int, the number of indices.

    Returns:
      np.ndarray of int64 with shape [batch_size].

    Raises:
      RuntimeError: If no shard holds enough transitions, or
        max_sample_attempts draws were invalid.
      ValueError: If batch_size is not a positive int, or every priority is
        zero.
      shard.ShardError: If a shard is dead.
    """
    batch_size = validation.check_int('batch_size', batch_size, 1)
    return self._draw(batch_size, gather=False)[0]

  def sample_transition_batch(self, batch_size: Optional[int] = None,
                              indices: Any = None) -> Tuple[np.ndarray, ...]:
    """Returns a batch of transitions, as the single memory's.

    With `prefetch`, a call without `indices` of the default batch size
    returns a batch sampled ahead, raising what sampling it raised.

    Args:
      batch_size: int, or None for the default batch size (or the number of
        `indices` when given).
      indices: None to sample in proportion to priority, or a 1-D sequence
        of valid global indices.

    Returns:
      tuple of np.ndarray, one per `get_transition_elements(batch_size)`,
      in the sampled (or given) order; ``indices`` holds global indices and
      ``sampling_probabilities`` the raw priorities.

    Raises:
      ValueError: If an index is not an integer, out of range or not a valid
        transition (the message names the shard), or batch_size does not
        match len(indices) (an errors.ArgumentError).
      RuntimeError, shard.ShardError: See `sample_index_batch`;
        RuntimeError also if the memory is closed.
    """
    if (self._prefetcher is not None and indices is None and
        (batch_size is None or validation.check_int(
            'batch_size', batch_size, 1) == self._batch_size)):
      return self._prefetcher.get()
    return self._sample_now(batch_size, indices)

  @locking.synchronized('_lock')
  def _sample_ahead(self) -> List[Tuple[np.ndarray, ...]]:
    """Returns `batches_per_call` default-size batches (for the prefetcher)."""
    batch_size, batches = self._batch_size, self._batches_per_call
    indices, pieces = self._draw(batch_size, True, batches, fresh=False)
    drawn = self._assemble(batch_size * batches, indices, pieces)
    return [tuple(array[b * batch_size:(b + 1) * batch_size]
                  for array in drawn) for b in range(batches)]

  @locking.synchronized('_lock')
  def _sample_now(self, batch_size: Optional[int], indices: Any
                 ) -> Tuple[np.ndarray, ...]:
    """`sample_transition_batch` without prefetching."""
    if indices is None:
      batch_size = (self._batch_size if batch_size is None else
                    validation.check_int('batch_size', batch_size, 1))
      indices, pieces = self._draw(batch_size, gather=True)
    else:
      array = np.asarray(indices)
      if array.ndim != 1:
        raise ValueError('indices must be a 1-D sequence of ints, got shape '
                         '{}'.format(array.shape))
      indices = validation.check_indices(array, self.replay_capacity,
                                         'indices').astype(np.int64)
      batch_size = sampling.batch_size_of(indices, batch_size)
      self._settle()
      groups = self._split(indices)
      results = self._call('gather', {
          k: (indices[where] - k * self.shard_capacity,)
          for k, where in groups.items()})
      pieces = [(where, results[k]) for k, where in groups.items()]
    return self._assemble(batch_size, indices, pieces)

  def _assemble(self, batch_size: int, indices: np.ndarray,
                pieces: List[Tuple[np.ndarray, Tuple[Any, ...]]]
               ) -> Tuple[np.ndarray, ...]:
    """Puts the shards' batches back in the batch's order, states filled."""
    out, shipped = native_feed.place_pieces(
        self.get_transition_elements(batch_size), indices, pieces)
    for frames, positions in shipped:
      _fill_shipped(frames, positions, *self._state_arrays(out))
    return tuple(out)

  @locking.synchronized('_lock')
  def _draw_ready(self, batches: int, fresh: bool
                 ) -> List[native_feed.Ready]:
    """`batches` default-size batches for the native queue (its feeder)."""
    batch_size = self._batch_size
    indices, pieces = self._draw(batch_size, True, batches, fresh=fresh)
    return native_feed.ready_batches(
        self.get_transition_elements(batch_size * batches), batch_size,
        batches, indices, pieces)

  def native_batch_queue(self) -> batch_queue.BatchQueue:
    """The native queue the learner's dequeue op samples from.

    Made, with its feeding thread (`native_feed.NativeFeeder`), on the
    first call; the thread samples once an op waits on the queue. With
    `prefetch`, it then keeps ceil(prefetch / batches_per_call) draws of
    `batches_per_call` default-size batches queued, as the fetch-ahead;
    without, it draws one batch per op, over masses asked for then. The
    priority updates `native_ops.queue_priorities` leaves in the queue are
    taken, in order with `set_priority`'s, before each draw or read. See
    docs/distributed.md#the-native-batch-queue.

    Raises:
      dopamine_per.native.build.NativeBuildError: If the core library
        cannot be built.
      RuntimeError: If the memory is closed.
    """
    with self._lock:
      self._check_open()
      if self._feeder is None:
        ahead = self._prefetch_depth > 0
        queue = batch_queue.BatchQueue(
            max(1, self._prefetch_depth) * self._batches_per_call)
        self._feeder = native_feed.NativeFeeder(
            functools.partial(self._draw_ready,
                              self._batches_per_call if ahead else 1,
                              not ahead), queue, ahead)
      self._feeder.start()
      return self._feeder.queue

  def _state_arrays(self, out: List[np.ndarray]
                   ) -> Tuple[np.ndarray, np.ndarray]:
    """The state and next state arrays of a batch's arrays `out`."""
    names = [e.name for e in self._elements]
    return out[names.index('state')], out[names.index('next_state')]

  # ----------------------------------------------------------- priorities

  @locking.synchronized('_priority_lock')
  def set_priority(self, indices: Any, priorities: Any) -> None:
    """Sets the priorities of a batch of global indices.

    The whole batch is checked here, before any shard is written: a bad
    batch changes nothing on any shard. With repeated indices the last
    priority wins. The batch is queued: the shards apply it, in order,
    before anything else this process asks of them (it travels with the
    next draw). It does not wait for a draw in progress in another thread
    (the prefetcher's, or TensorFlow's staging), which does not see it.

    Args:
      indices: integer array of global indices in [0, replay_capacity).
      priorities: array-like of the same shape (or a scalar); each 0 or in
        float32's positive range (see the single memory's `set_priority`).

    Raises:
      ValueError: If the shapes differ or a priority is not one;
        errors.InvalidIndexError (an IndexError and ValueError) if an
        index is out of range; errors.InvalidIndexTypeError (a
        TypeError and ValueError) if the indices are not integers.
      shard.ShardError: If a shard is dead (at this or a later call).
    """
    self._check_open()
    indices = validation.check_index_array(indices, self.replay_capacity)
    if np.ndim(priorities) and np.shape(priorities) != indices.shape:
      raise ValueError(
          'priorities of shape {} do not match indices of shape {}.'.format(
              np.shape(priorities), indices.shape))
    priorities = validation.check_priorities(
        priorities, indices.shape, 'priorities', np.float32).ravel()
    self._take_native_priorities()  # Queued before this call.
    self._queue_priorities(indices.ravel().astype(np.int64), priorities)

  @locking.synchronized('_priority_lock')
  def _queue_priorities(self, indices: np.ndarray,
                        priorities: np.ndarray) -> None:
    """Queues checked updates (global indices) by shard."""
    for k, where in self._split(indices).items():
      queued = self._queued_priorities.setdefault(k, [])
      queued.append((indices[where] - k * self.shard_capacity,
                     priorities[where]))
      if len(queued) >= _MAX_QUEUED_UPDATES:
        self._send_priorities(k)

  @locking.synchronized('_priority_lock')
  def _take_native_priorities(self) -> None:
    """Queues the updates the native priority op left in the batch queue
    (`native_ops.queue_priorities`), in their order."""
    if self._feeder is not None:
      indices, priorities = self._feeder.queue.take_priorities()
      if len(indices):
        self._queue_priorities(indices, priorities)

  @locking.synchronized('_lock')
  def get_priority(self, indices: Any) -> np.ndarray:
    """Returns the priorities of a batch of global indices.

    Args:
      indices: integer array of global indices in [0, replay_capacity).

    Returns:
      np.ndarray of float32 shaped like `indices` (0 for unused slots).

    Raises:
      AssertionError: (also a ValueError) If `indices` is a scalar.
      errors.InvalidIndexError: If an index is out of range.
      errors.InvalidIndexTypeError: If the indices are not integers.
      shard.ShardError: If a shard is dead.
    """
    indices = validation.check_index_array(indices, self.replay_capacity)
    flat = indices.ravel().astype(np.int64)
    self._settle()
    groups = self._split(flat)
    results = self._call('get_priority', {
        k: (flat[where] - k * self.shard_capacity,)
        for k, where in groups.items()})
    out = np.zeros(flat.shape, dtype=np.float32)
    for k, where in groups.items():
      out[where] = results[k]
    return out.reshape(indices.shape)

  # ---------------------------------------------------------- checkpoints

  @locking.synchronized('_lock')
  def save(self, checkpoint_dir: str, iteration_number: int,
           background: bool = False) -> Optional[concurrent.futures.Future]:
    """Saves every shard as checkpoint `iteration_number`, all or nothing.

    Shard k's files go to ``checkpoint_dir/shard_{k}``, with a record of
    the shards beside them (`sharded_checkpoint.ShardedCheckpointer.save`).
    In a cluster, `checkpoint_dir` must be storage that this process and
    every shard's machine see; if it does not exist, a warning is logged
    and nothing is written, as the single memory. Always in the
    foreground: with `background`, returns a future that is done already.
    """
    self._settle()
    self._checkpointer.save(checkpoint_dir, iteration_number)
    if not background:
      return None
    done = concurrent.futures.Future()
    done.set_result(None)
    return done

  @locking.synchronized('_lock')
  def load(self, checkpoint_dir: str, suffix: Any) -> None:
    """Restores every shard from checkpoint `suffix`, all or none.

    A checkpoint of another number of shards or shard capacity is refused
    (an `atomic_files.CheckpointError`) before any shard is called.
    """
    self._settle()
    self._checkpointer.load(checkpoint_dir, suffix)
    self._masses = None
    if self._prefetcher is not None:
      self._prefetcher.discard()  # Batches of the memory before the load.
    if self._feeder is not None:
      self._feeder.discard()

  def close(self) -> None:
    """Stops prefetching, flushes stream 0, kills the shards (idempotent)."""
    # Before taking the lock: their threads may be waiting for it.
    if self._prefetcher is not None:
      self._prefetcher.close()
    if self._feeder is not None:
      self._feeder.close()
    self._close_shards()

  @locking.synchronized('_lock')
  def _close_shards(self) -> None:
    if self._closed:
      return
    try:
      self._writer0.flush()
    finally:
      self._closed = True
      for handle in self._handles:
        ray.kill(handle)
