# coding=utf-8
"""Fetches replay batches ahead, in a background thread (Horgan et al., 2018).

A sharded memory's batch costs remote calls; `BatchPrefetcher` samples
lists of batches in a background thread so that the learner's `get()`
usually returns at once (`replay.ShardedPrioritizedReplayBuffer(prefetch=)`).
A prefetched batch has the priorities of its draw time, as Ape-X's learner
accepts. Standard library only (no Ray, no TensorFlow).
"""

import collections
import queue
import threading
from typing import Any, Callable, Optional

from absl import logging

from dopamine_per.replay_memory.memory import validation

__all__ = ['BatchPrefetcher']

# Seconds a blocked `get`, the background thread's `put`, and `close` wait
# between checks of whether the prefetcher was closed.
_POLL_S = 0.05
_CLOSE_TIMEOUT_S = 60.0


class BatchPrefetcher(object):
  """Keeps up to `depth` lists of batches of `sample()` ready, from a thread.

  The thread starts at the first `get()` (a memory may be empty until
  then) and then samples until `depth` lists wait (sampled or being
  sampled), and again whenever `get()` starts on one. `get()` returns the
  batches of a list one by one, in order, then those of the next list. If
  `sample()` raises, the thread stops and the next `get()` raises that
  exception (the batches sampled before it are returned first); the `get()`
  after that starts a new thread, so an error such as "not enough
  transitions yet" lasts only as long as its cause. `discard()` drops every
  batch sampled before it was called (after a memory's `load`, say). Thread
  safe: any number of threads may call `get()`.

  Attributes:
    depth: int, the most lists of batches kept ready.
    batches_sampled: int, the batches `sample()` has returned so far.
  """

  def __init__(self, sample: Callable[[], Any], depth: int,
               name: str = 'replay_prefetch'):
    """Creates a prefetcher; no thread starts before the first `get()`.

    Args:
      sample: callable() returning a non-empty list of batches; called from
        the background thread only, one call at a time. It must be thread
        safe with respect to the caller's other uses of the memory it
        samples.
      depth: int >= 1, the most lists kept ready.
      name: str, the background thread's name.

    Raises:
      ValueError: If depth is not a positive int.
    """
    self.depth = validation.check_int('depth', depth, 1)
    self.batches_sampled = 0
    self._sample = sample
    self._name = name
    self._queue = queue.Queue()
    # One slot per list the thread may sample ahead: it takes one before
    # sampling, a caller gives it back on taking the list off the queue.
    self._slots = threading.Semaphore(self.depth)
    self._lock = threading.Lock()
    # Held by a `get()` throughout: the batches of the list being handed out
    # (`_current`, of generation `_current_generation`) go out in order.
    self._get_lock = threading.Lock()
    self._current = collections.deque()
    self._current_generation = 0
    self._stop = threading.Event()
    self._thread = None
    self._generation = 0
    self._queued_batches = 0

  @property
  def ready(self) -> int:
    """The number of batches waiting (approximate while the thread runs)."""
    current = (len(self._current)
               if self._current_generation == self._generation else 0)
    return self._queued_batches + current

  def _start_if_stopped(self) -> None:
    """Starts the thread unless one runs or a result still waits."""
    with self._lock:
      if self._stop.is_set():
        raise RuntimeError('this BatchPrefetcher is closed')
      if ((self._thread is None or not self._thread.is_alive()) and
          self._queue.empty()):
        self._thread = threading.Thread(target=self._run, name=self._name,
                                        daemon=True)
        self._thread.start()

  def _run(self) -> None:
    """The thread: samples and queues batches until closed or failed."""
    while not self._stop.is_set():
      if not self._slots.acquire(timeout=_POLL_S):
        continue
      generation = self._generation
      try:
        item = list(self._sample())
        self.batches_sampled += len(item)
        with self._lock:
          self._queued_batches += len(item)
      except Exception as error:  # pylint: disable=broad-except
        item = error
      self._queue.put((generation, item))
      if isinstance(item, Exception):
        return

  def _take(self, timeout_s: Optional[float]) -> Any:
    """Takes (generation, item) off the queue (None: no wait); frees a slot."""
    entry = self._queue.get(timeout_s is not None, timeout_s)
    self._slots.release()
    if not isinstance(entry[1], Exception):
      with self._lock:
        self._queued_batches -= len(entry[1])
    return entry

  def get(self) -> Any:
    """Returns the oldest ready batch, waiting for one if none is ready.

    Returns:
      The next batch of the lists `sample()` returned.

    Raises:
      Whatever `sample()` raised for this batch (see the class docstring).
      RuntimeError: If the prefetcher is closed (also while waiting).
    """
    with self._get_lock:
      while True:
        with self._lock:
          if self._current and self._current_generation == self._generation:
            return self._current.popleft()
        self._start_if_stopped()
        try:
          generation, item = self._take(_POLL_S)
        except queue.Empty:
          continue
        if self._stop.is_set():
          raise RuntimeError('this BatchPrefetcher is closed')
        if isinstance(item, Exception):
          if generation == self._generation:
            raise item
          continue
        with self._lock:  # A list sampled before `discard()` goes unused.
          self._current = collections.deque(item)
          self._current_generation = generation

  def discard(self) -> None:
    """Drops the batches sampled (or being sampled) before this call."""
    with self._lock:
      self._generation += 1
      self._current = collections.deque()
    while True:
      try:
        self._take(None)
      except queue.Empty:
        return

  def close(self) -> None:
    """Stops the thread and drops the ready batches. Idempotent.

    Waits up to `_CLOSE_TIMEOUT_S` for a `sample()` call in progress to
    return; a thread still running then is left to end by itself (it is a
    daemon thread) and a warning is logged.
    """
    with self._lock:
      self._stop.set()
      thread, self._thread = self._thread, None
    if thread is not None:
      thread.join(_CLOSE_TIMEOUT_S)
      if thread.is_alive():
        logging.warning('%s: a sample call was still running %s s after '
                        'close()', self._name, _CLOSE_TIMEOUT_S)
    self.discard()
