# coding=utf-8
"""Writers: how actors add transitions to a sharded prioritized memory.

A `ShardWriter` belongs to one stream of transitions (one actor's episodes)
and one shard. It sends the transitions given to `add` to the shard in one
remote call every `flush_every` transitions, in order; the shard adds a
stream's transitions when their episode ends (`shard.ReplayShard.add_batch`),
so streams sharing a shard never interleave inside an episode. At most one
call is in flight: the next one first waits for it, so an add the shard
refused raises (at the writer's next send or flush) instead of vanishing. A
writer pickles (into a Ray task or actor) without buffered transitions.
"""

from typing import Any, Dict, List, Tuple

import ray

from dopamine_per.distributed import shard as shard_lib
from dopamine_per.replay_memory.memory import validation

__all__ = ['ShardWriter', 'DEFAULT_FLUSH_EVERY', 'get_from_shard']

# Transitions sent per remote call, which has a fixed cost besides its bytes.
DEFAULT_FLUSH_EVERY = 64


def get_from_shard(shard: int, ref: Any) -> Any:
  """`ray.get` of a call to shard `shard`; a dead shard raises ShardError."""
  try:
    return ray.get(ref)
  except ray.exceptions.RayActorError as error:
    raise shard_lib.ShardError(shard, error) from None


class ShardWriter(object):
  """Adds one stream's transitions to its shard, in batches.

  Attributes:
    stream_id: int, the stream's number.
    shard: int, the shard it writes to (stream_id % num_shards).
  """

  def __init__(self, stream_id: int, shard: int, shard_handle: Any,
               flush_every: int = DEFAULT_FLUSH_EVERY):
    """Creates a writer to `shard_handle`, shard `shard`'s Ray actor.

    Args:
      stream_id: int, the stream's number.
      shard: int, the shard's number.
      shard_handle: the shard's Ray actor handle.
      flush_every: int >= 1, transitions buffered before they are sent.
    """
    self.stream_id = stream_id
    self.shard = shard
    self._handle = shard_handle
    self._flush_every = validation.check_int('flush_every', flush_every, 1)
    self._buffer: List[Tuple[Tuple[Any, ...], Dict[str, Any]]] = []
    self._in_flight = None

  def add(self, observation: Any, action: Any, reward: Any, terminal: Any,
          *args: Any, **kwargs: Any) -> None:
    """Buffers a transition: the single memory's `add` arguments.

    Raises:
      ValueError, RuntimeError: When this add fills the buffer and sends it,
        an error of the previous batch (see `flush`).
    """
    self._buffer.append(((observation, action, reward, terminal) + args,
                         kwargs))
    if len(self._buffer) >= self._flush_every:
      self._send()

  def _send(self) -> None:
    """Sends the buffer without waiting for it, after the previous call."""
    self.wait()
    if self._buffer:
      transitions, self._buffer = self._buffer, []
      self._in_flight = self._handle.add_batch.remote(self.stream_id,
                                                       transitions)

  def wait(self) -> None:
    """Waits for the call in flight, if any.

    Raises:
      ValueError: If the shard refused a transition of that batch (the
        message names it; the episodes it finished were dropped).
      shard.ShardError: (a RuntimeError) If the shard's process died.
    """
    if self._in_flight is not None:
      in_flight, self._in_flight = self._in_flight, None
      get_from_shard(self.shard, in_flight)

  def flush(self) -> None:
    """Sends the buffered transitions and waits until the shard has them.

    The shard adds them to its memory once their episode ends. Raises as
    `wait`.
    """
    self._send()
    self.wait()

  def discard_unfinished(self) -> int:
    """Drops this stream's unfinished episode, here and on the shard.

    A writer whose actor Ray restarted mid-episode calls it first, so its
    next episode is not joined to the interrupted one.

    Returns:
      int, how many transitions the shard dropped. Raises as `wait`.
    """
    self._buffer = []
    self.wait()
    return get_from_shard(
        self.shard, self._handle.discard_staged.remote(self.stream_id))

  def __getstate__(self) -> Dict[str, Any]:
    if self._buffer or self._in_flight is not None:
      raise ValueError(
          'writer of stream {} has {} buffered transitions (or a call in '
          'flight): flush() it before pickling it'.format(
              self.stream_id, len(self._buffer)))
    return dict(self.__dict__)

