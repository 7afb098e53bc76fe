# coding=utf-8
"""A memory's saves and loads in turn, and saves written in the background.

`Checkpoints` serializes a memory's saves and loads; `save_in_background`
takes a save's snapshot (`memory_checkpoint.take_snapshot`) and returns,
leaving the writing, the commit and the clean-up to a thread. The files and
their guarantees are `memory_checkpoint`'s (docs/reliability.md).
"""

import concurrent.futures
import operator
import threading
from typing import Any, Optional

from dopamine_per.replay_memory.checkpoint import memory_checkpoint

__all__ = ['Checkpoints', 'save_in_background']


class Checkpoints(object):
  """A memory's saves and loads, one at a time, in the foreground or not.

  Each waits for the background save still running first (its error is
  that save's future's), then takes the memory's lock.
  """

  def __init__(self, lock: Any):
    """Args: lock: the memory's storage lock (re-entrant)."""
    self._lock = lock
    self._order = threading.Lock()
    self._saving: Optional[concurrent.futures.Future] = None

  def save(self, memory: Any, checkpoint_dir: str, iteration_number: int,
           background: bool) -> Optional[concurrent.futures.Future]:
    """`memory_checkpoint.save`, or with `background`,
    `save_in_background`.

    A background save returns once its snapshot is taken (a copy of all
    but the storage, which is copied out as it is written, the slots
    overwritten meanwhile kept first): adds, samples and priority updates
    go on while a thread writes the checkpoint.
    """
    with self._order:
      self._wait()
      with self._lock:
        if not background:
          memory_checkpoint.save(memory, checkpoint_dir, iteration_number)
          return None
        self._saving = save_in_background(memory, self._lock, checkpoint_dir,
                                          iteration_number)
        return self._saving

  def load(self, memory: Any, checkpoint_dir: str, suffix: Any,
           native: Any) -> None:
    """`memory_checkpoint.load`, binding the memory's `native` memory
    (a `NativeMemory` or None) again if it is bound."""
    with self._order:
      self._wait()
      with self._lock:
        bound = native is not None and native.bound
        memory_checkpoint.load(memory, checkpoint_dir, suffix,
                               bind=native.bind if bound else None)

  def _wait(self) -> None:
    if self._saving is not None:
      concurrent.futures.wait([self._saving])
      self._saving = None


def save_in_background(memory: Any, lock: Any, checkpoint_dir: str,
                       iteration_number: int) -> concurrent.futures.Future:
  """`memory_checkpoint.save`, but only its snapshot before it returns; a
  thread does the rest while the memory changes.

  The checkpoint holds the memory as it was when this was called, with
  the guarantees of `memory_checkpoint.save`. The caller holds `lock`, the
  lock the memory writes its storage under, and starts no other save or
  load of the memory before the future is done.

  Args:
    memory: an `OutOfGraphReplayBuffer`.
    lock: the memory's storage lock (re-entrant).
    checkpoint_dir: str, an existing directory (else a warning is logged,
      nothing is written and the future is done already).
    iteration_number: int, the checkpoint's suffix.

  Returns:
    A `concurrent.futures.Future` whose `result()` is None once checkpoint
    N is complete, or raises what `memory_checkpoint.save` would have
    raised after its snapshot.

  Raises:
    TypeError, ValueError: As `memory_checkpoint.save`, with nothing
      written.
  """
  iteration_number = operator.index(iteration_number)
  future = concurrent.futures.Future()
  future.set_running_or_notify_cancel()
  if not memory_checkpoint.directory_exists(checkpoint_dir):
    future.set_result(None)
    return future
  snapshot = memory_checkpoint.take_snapshot(memory, lock)

  def write() -> None:
    try:
      try:
        record = memory_checkpoint.stage(snapshot, checkpoint_dir,
                                         iteration_number)
      finally:
        snapshot.release()
      memory_checkpoint.finish_save(memory, checkpoint_dir, iteration_number,
                                    record, snapshot.names)
    except BaseException as e:  # pylint: disable=broad-except
      future.set_exception(e)
    else:
      future.set_result(None)

  # Not a daemon: an interpreter exiting normally finishes the save first.
  thread = threading.Thread(target=write, name='dopamine_per-save-{}'.format(
      iteration_number))
  try:
    thread.start()
  except BaseException:
    snapshot.release()  # Nothing will read it out.
    raise
  return future
