# coding=utf-8
"""Feeds a sharded memory's batches into the learner's native queue.

The learner's TensorFlow graph takes a sharded memory's batches with the
native op ``DopaminePerDequeueBatch`` (`native_ops.dequeue`), off a
`batch_queue.BatchQueue`, instead of a `tf.numpy_function`. `NativeFeeder`
is the thread that fills that queue: it samples from the shards (the
memory's draw, as the fetch-ahead's) and pushes each batch: its arrays,
and for the states of rows whose shard shipped compressed blocks
(`ShippedFrames`), those blocks and rows, which the op decodes. How it
behaves: docs/distributed.md#the-native-batch-queue.

`place_pieces` puts the shards' answers in a batch's order, for this and
for `replay`'s Python path. No TensorFlow, no Ray.
"""

import threading
from typing import Any, Callable, List, Optional, Sequence, Tuple

from absl import logging
import numpy as np

from dopamine_per.native import batch_queue
from dopamine_per.replay_memory.memory import shipped_frames

__all__ = ['NativeFeeder', 'Ready', 'place_pieces', 'ready_batches']

# Seconds the thread waits between checks of whether it was closed.
_POLL_S = 0.05
_CLOSE_TIMEOUT_S = 60.0

# A batch for the queue: its arrays (None for states shipped as blocks) and
# (ShippedFrames, rows in the batch, which of the frames' stacks) parts.
Ready = Tuple[List[Optional[np.ndarray]],
              List[Tuple[Any, np.ndarray, np.ndarray]]]
# The shards' answers: (positions in the batch, shard batch) pairs.
Pieces = Sequence[Tuple[np.ndarray, Tuple[Any, ...]]]


def place_pieces(elements: Sequence[Any], indices: np.ndarray,
                 pieces: Pieces
                ) -> Tuple[List[np.ndarray], List[Tuple[Any, np.ndarray]]]:
  """Puts the shards' batches in the batch's order.

  Args:
    elements: the layout of the whole batch (ReplayElements).
    indices: int64, the batch's global indices.
    pieces: the shards' (positions, batch) answers.

  Returns:
    (arrays, shipped): one array per element, filled but for states that
    shards shipped as blocks, and those (ShippedFrames, positions) pairs.
  """
  out = [np.empty(e.shape, dtype=e.type) for e in elements]
  shipped = []
  for positions, batch in pieces:
    for array, values in zip(out, batch):
      if isinstance(values, shipped_frames.ShippedFrames):
        shipped.append((values, positions))
      elif values is not None:  # None: a next state shipped with it.
        array[positions] = values
  for array, element in zip(out, elements):
    if element.name == 'indices':
      array[:] = indices
  return out, shipped


def ready_batches(elements: Sequence[Any], batch_size: int, batches: int,
                  indices: np.ndarray, pieces: Pieces) -> List[Ready]:
  """Splits a draw of `batches` batches into the queue's batches.

  Args:
    elements: the layout of all `batches` * `batch_size` rows.
    batch_size: int, rows per batch.
    batches: int, batches drawn together.
    indices, pieces: the draw (see `place_pieces`).

  Returns:
    list of Ready, one per batch, in order.
  """
  out, shipped = place_pieces(elements, indices, pieces)
  if shipped:
    out = [None if e.name in ('state', 'next_state') else array
           for array, e in zip(out, elements)]
  ready = []
  for b in range(batches):
    low, high = b * batch_size, (b + 1) * batch_size
    parts = []
    for frames, positions in shipped:
      which = np.flatnonzero((positions >= low) & (positions < high))
      if len(which):
        parts.append((frames, positions[which] - low, which))
    ready.append(([None if array is None else array[low:high]
                   for array in out], parts))
  return ready


def _status_code(error: Exception) -> int:
  """The TensorFlow error a sampling error becomes in the op."""
  if isinstance(error, (ValueError, TypeError)):
    return batch_queue.INVALID_ARGUMENT
  if isinstance(error, RuntimeError):
    return batch_queue.FAILED_PRECONDITION
  return batch_queue.UNKNOWN


class NativeFeeder(object):
  """A thread sampling batches into a `batch_queue.BatchQueue`.

  It samples once an op waits on the empty queue, and then, with `ahead`,
  keeps the queue full (pushes wait for room); without, it samples one
  draw per op that finds the queue empty. A sampling error is queued in
  the batch's place (the op that takes it raises it: ValueError as
  InvalidArgument, RuntimeError as FailedPrecondition, anything else as
  Unknown, the message naming the Python type), and the thread then waits
  for an op again, so that an error lasts only as long as its cause.

  Attributes:
    queue: the BatchQueue.
    batches_pushed: int, the batches queued so far (dropped ones too).
  """

  def __init__(self, sample: Callable[[], List[Ready]],
               queue: batch_queue.BatchQueue, ahead: bool,
               name: str = 'sharded_replay_native_feed'):
    """Creates a feeder; `start` starts its thread.

    Args:
      sample: callable() returning a non-empty list of Ready batches;
        called from the thread only.
      queue: the BatchQueue to fill.
      ahead: bool, whether to keep the queue full rather than sample on
        demand.
      name: str, the thread's name.
    """
    self.queue = queue
    self.batches_pushed = 0
    self._sample = sample
    self._ahead = ahead
    self._name = name
    self._stop = threading.Event()
    self._lock = threading.Lock()
    self._thread = None

  def start(self) -> None:
    """Starts the thread unless it runs (idempotent)."""
    with self._lock:
      if self._stop.is_set():
        raise RuntimeError('this NativeFeeder is closed')
      if self._thread is None:
        self._thread = threading.Thread(target=self._run, name=self._name,
                                        daemon=True)
        self._thread.start()

  def _run(self) -> None:
    """The thread: waits for demand, samples, pushes, until closed."""
    on_demand = True
    while not self._stop.is_set():
      if on_demand and not self.queue.wait_wanted(_POLL_S):
        continue
      generation = self.queue.generation
      try:
        ready = self._copy(self._sample())
      except Exception as error:  # pylint: disable=broad-except
        self.queue.push_error(_status_code(error), '{}: {}'.format(
            type(error).__name__, error), generation)
        on_demand = True
        continue
      on_demand = not self._ahead
      for batch in ready:
        while self.queue.push(batch, generation, _POLL_S) is False:
          if self._stop.is_set():
            return
        self.batches_pushed += 1

  @staticmethod
  def _copy(batches: List[Ready]) -> List[batch_queue.ReadyBatch]:
    """Ready batches copied into native memory, each shard's shipped blocks
    once (the batches of one draw share them)."""
    blocks = {}
    copied = []
    for arrays, parts in batches:
      rows = []
      for frames, positions, which in parts:
        if id(frames) not in blocks:
          blocks[id(frames)] = batch_queue.Blocks(frames)
        rows.append((blocks[id(frames)], positions, frames.ends[which],
                     frames.next_ends[which]))
      copied.append(batch_queue.ReadyBatch(arrays, rows))
    return copied

  def discard(self) -> None:
    """Drops the queued batches and those being sampled (after a load)."""
    self.queue.clear()

  def close(self) -> None:
    """Closes the queue (waiting ops fail) and stops the thread. Idempotent.

    Waits up to `_CLOSE_TIMEOUT_S` for a draw in progress.
    """
    with self._lock:
      self._stop.set()
      thread, self._thread = self._thread, None
    self.queue.close()
    if thread is not None:
      thread.join(_CLOSE_TIMEOUT_S)
      if thread.is_alive():
        logging.warning('%s: a draw was still running %s s after close()',
                        self._name, _CLOSE_TIMEOUT_S)
