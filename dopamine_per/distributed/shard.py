# coding=utf-8
"""One shard of a sharded prioritized memory: what its Ray actor runs.

`ReplayShard` holds an `OutOfGraphPrioritizedReplayBuffer` of
`shard_capacity` slots and serves the learner's and writers' calls, each on
a whole batch, including its part of a sharded checkpoint in phases (stage,
commit, prune; read, swap) so that all shards save and load all or nothing.
It imports NumPy and the TF-free memory only: a shard process never loads
TensorFlow. Design: docs/distributed.md.
"""

import contextlib
import os
import sys
from typing import (Any, Dict, Iterator, List, Optional, Sequence, Tuple,
                    Type)

import numpy as np

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import transaction
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from dopamine_per.replay_memory.memory import sampling

__all__ = ['ReplayShard', 'ShardError', 'shard_directory']

# One transition as a writer sends it: `add`'s positional and keyword
# arguments.
Transition = Tuple[Tuple[Any, ...], Dict[str, Any]]


class ShardError(RuntimeError):
  """A shard's process died (or could not start): the memory cannot go on.

  Attributes:
    shard: int, the shard's number.
  """

  def __init__(self, shard: int, cause: Any):
    super().__init__(
        'replay shard {} is dead (its Ray actor died or could not start); '
        'the sharded memory cannot sample, add or checkpoint until it is '
        'rebuilt (e.g. from the last checkpoint). Cause: {}'.format(
            shard, cause))
    self.shard = shard
    self._cause = str(cause)

  def __reduce__(self) -> Tuple[Any, Tuple[int, str]]:
    # Raised in an Ape-X actor, it reaches the learner pickled.
    return type(self), (self.shard, self._cause)


def shard_directory(checkpoint_dir: str, shard: int) -> str:
  """Returns ``checkpoint_dir/shard_{shard}``, where shard `shard` saves."""
  return os.path.join(checkpoint_dir, 'shard_{}'.format(shard))


def _ends_episode(transition: Transition) -> bool:
  """Whether a transition ends its episode, as the memory's `add` decides."""
  args, kwargs = transition
  try:
    return bool(kwargs.get('episode_end', False)) or bool(np.any(args[3]))
  except Exception:  # pylint: disable=broad-except
    return True  # A malformed flag: `add_batch` checks and refuses it now.


class ReplayShard(object):
  """A prioritized memory of `shard_capacity` slots, called in batches.

  Attributes:
    shard: int, this shard's number.
    memory: OutOfGraphPrioritizedReplayBuffer, the shard's transitions.
  """

  def __init__(self, shard: int, shard_capacity: int, batch_size: int,
               memory_kwargs: Dict[str, Any]):
    """Creates the shard's empty memory.

    Args:
      shard: int, this shard's number.
      shard_capacity: int, the memory's replay_capacity.
      batch_size: int, the memory's default batch size.
      memory_kwargs: dict, the memory's other constructor arguments.
    """
    self.shard = shard
    self._capacity = shard_capacity
    self._batch_size = batch_size
    self._memory_kwargs = dict(memory_kwargs)
    self._stack_size = int(memory_kwargs.get('stack_size', 1))
    self._update_horizon = int(memory_kwargs.get('update_horizon', 1))
    self.memory = self._new_memory()
    # Checks transitions before they reach `memory` (see `add_batch`).
    self._scratch = self._new_memory(self._stack_size + self._update_horizon)
    # Per stream, the transitions of its unfinished episode.
    self._staged: Dict[int, List[Transition]] = {}
    self._loaded = None  # A memory `prepare_load` read, until committed.

  def _new_memory(self, capacity: Optional[int] = None) -> Any:
    """Returns an empty memory of `capacity` (None: the shard's) slots."""
    return prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
        replay_capacity=self._capacity if capacity is None else capacity,
        batch_size=self._batch_size, **self._memory_kwargs)

  @contextlib.contextmanager
  def _naming_shard(self, catch: Type[Exception] = Exception
                   ) -> Iterator[None]:
    """Re-raises an error of type `catch`, same type, with the shard named.

    TensorFlow's errors (tf.errors.NotFoundError from `load`) take
    (node_def, op, message).
    """
    try:
      yield
    except catch as error:  # pylint: disable=broad-except
      message = 'shard {}: {}'.format(self.shard, error)
      for args in ((message,), (None, None, message)):
        try:
          named = type(error)(*args)
        except Exception:  # pylint: disable=broad-except
          continue
        raise named from None
      raise

  # ------------------------------------------------------------------ add

  def add_batch(self, stream_id: int, transitions: Sequence[Transition]
               ) -> int:
    """Stages a stream's transitions; adds its complete episodes, in order.

    Streams sharing this shard must not interleave inside an episode (n-step
    returns and frame stacks come from consecutive slots), so a stream's
    transitions wait here until their episode ends. Each first goes to a
    scratch memory, so a refused one leaves no half-written episode behind.

    Args:
      stream_id: int, the writer's stream.
      transitions: sequence of (args, kwargs) of the memory's `add`.

    Returns:
      int, the shard's add_count afterwards.

    Raises:
      ValueError: If a finished episode holds a transition the memory
        refuses: nothing of this call's finished episodes is added, they are
        dropped, and the message names the stream and the transition.
    """
    staged = self._staged.setdefault(stream_id, [])
    first_new = len(staged)
    staged.extend(transitions)
    ends = [position for position in range(first_new, len(staged))
            if _ends_episode(staged[position])]
    if not ends:
      return int(self.memory.add_count)
    last_end = ends[-1]
    ready = staged[:last_end + 1]
    self._staged[stream_id] = staged[last_end + 1:]
    for position, (args, kwargs) in enumerate(ready):
      try:
        self._scratch.add(*args, **kwargs)
      except ValueError as error:
        raise ValueError(
            'shard {}: stream {}: transition {} of its {} finished '
            'transitions was refused, so none of them was added: {}'.format(
                self.shard, stream_id, position, len(ready), error)) from None
    for args, kwargs in ready:
      self.memory.add(*args, **kwargs)
    return int(self.memory.add_count)

  def discard_staged(self, stream_id: int) -> int:
    """Drops a stream's unfinished episode; returns how many it held.

    For a writer that starts over mid-episode (an actor Ray restarted).
    """
    return len(self._staged.pop(stream_id, []))

  # ------------------------------------------------------------- counters

  def mass(self, slots: Optional[np.ndarray] = None,
           priorities: Optional[np.ndarray] = None) -> Tuple[float, bool]:
    """Sets priorities (as `set_priority`); returns (total, sampleable).

    Not sampleable while the memory holds fewer transitions than a sample
    needs (stack size + update horizon).
    """
    self.set_priority(slots, priorities)
    try:
      sampling.sampling_range(int(self.memory.add_count), self._capacity,
                              self._stack_size, self._update_horizon)
      ready = True
    except RuntimeError:
      ready = False
    return float(self.memory.sum_tree.total_priority()), ready

  def add_count(self) -> int:
    """Returns the memory's add_count."""
    return int(self.memory.add_count)

  def has_tensorflow(self) -> bool:
    """Returns whether this process has imported TensorFlow (for tests)."""
    return 'tensorflow' in sys.modules

  def stored_frame_blocks(self) -> Optional[int]:
    """Returns how many compressed frame blocks the memory stores, or None
    if its frames are an array (compress_observations off)."""
    frames = self.memory.storage.arrays['observation']
    if isinstance(frames, np.ndarray):
      return None
    return int(np.count_nonzero(frames.sizes))

  # ------------------------------------------------------------- sampling

  def draw(self, slots: Optional[np.ndarray], priorities: Optional[np.ndarray],
           fractions: np.ndarray, gather: bool
          ) -> Tuple[np.ndarray, np.ndarray, Optional[Tuple[Any, ...]],
                     Tuple[float, bool]]:
    """Sets priorities, then finds the slots at fractions of the total mass.

    A target is a fraction of the shard's total at the time of the call, so
    a total that changed since the learner read it skews only how many
    targets this shard got, never which of its slots they find.

    Args:
      slots, priorities: as `set_priority`.
      fractions: float64 array in [0, 1], the targets.
      gather: bool, whether to also return the valid slots' transitions.

    Returns:
      (slots, valid, batch, mass): the int64 slots found; whether each is a
      valid transition (all False at total priority 0, so the learner
      redraws them over the other shards); the valid slots'
      `sample_transition_batch` if `gather` (else None); `mass()` after.
    """
    self.set_priority(slots, priorities)
    fractions = np.clip(np.asarray(fractions, dtype=np.float64), 0.0, 1.0)
    tree = self.memory.sum_tree
    total = tree.total_priority()
    if not (len(fractions) and total > 0.0):
      # Nothing to find: every target, if any, is invalid.
      return (np.zeros(len(fractions), dtype=np.int64),
              np.zeros(len(fractions), dtype=bool), None, self.mass())
    found = tree.query(fractions * total)
    valid = np.asarray(self.memory.is_valid_transition(found), dtype=bool)
    batch = None
    if gather and valid.any():
      batch = self._transitions(found[valid])
    return found, valid, batch, self.mass()

  def gather(self, slots: np.ndarray) -> Tuple[Any, ...]:
    """The transitions at `slots` (see `_transitions`); errors name the
    shard."""
    with self._naming_shard(ValueError):
      return self._transitions(slots)

  def _transitions(self, slots: np.ndarray) -> Tuple[Any, ...]:
    """`sample_transition_batch(indices=slots)`; with compressed frames,
    its states left compressed (`ship_frames`: a ShippedFrames)."""
    return self.memory.sample_transition_batch(indices=slots,
                                               ship_frames=True)

  # ----------------------------------------------------------- priorities

  def set_priority(self, slots: Optional[np.ndarray],
                   priorities: Optional[np.ndarray]) -> None:
    """Sets priorities of slots the learner already checked (None: none)."""
    if slots is not None:
      self.memory.set_priority(slots, priorities)

  def get_priority(self, slots: np.ndarray) -> np.ndarray:
    """Returns the float32 priorities of slots the learner already checked."""
    return self.memory.get_priority(slots)

  # ---------------------------------------------------------- checkpoints

  # `memory_checkpoint`'s phases expect the caller to hold the memory's lock:
  # a Ray actor runs one call at a time, on one thread.

  def prepare_save(self, checkpoint_dir: str, iteration_number: int
                  ) -> Optional[Dict[str, Any]]:
    """Stages checkpoint `iteration_number` in ``checkpoint_dir/shard_{shard}``.

    Nothing visible changes until `commit_save`.

    Returns:
      The staged files as `transaction.Record.to_data()`, or None (nothing
      written) if `checkpoint_dir` does not exist.

    Raises:
      Whatever writing raises, with the shard named; no staged file is left.
    """
    if not atomic_files.exists(checkpoint_dir):
      return None
    directory = shard_directory(checkpoint_dir, self.shard)
    with self._naming_shard():
      atomic_files.make_directories(directory)
      record = memory_checkpoint.prepare_save(self.memory, directory,
                                              iteration_number)
    return None if record is None else record.to_data()

  def commit_save(self, checkpoint_dir: str, iteration_number: int,
                  staged: Dict[str, Any]) -> None:
    """Moves the files `prepare_save` staged (`staged`) into place.

    Idempotent: the learner calls it again to complete a save interrupted
    after its record. Nothing is pruned (see `prune`). Errors name the shard.
    """
    with self._naming_shard():
      memory_checkpoint.commit_save(
          self.memory, shard_directory(checkpoint_dir, self.shard),
          iteration_number, transaction.Record.from_data(staged),
          prune=False)

  def prune(self, checkpoint_dir: str, iteration_number: int,
            iterations: Sequence[int]) -> List[int]:
    """`memory_checkpoint.prune` after checkpoint `iteration_number`.

    Run once every shard committed its part. Errors name the shard.

    Returns:
      list of int, those of `iterations` (the older checkpoints the learner
      has records of) that the shard no longer holds.
    """
    directory = shard_directory(checkpoint_dir, self.shard)
    with self._naming_shard():
      memory_checkpoint.prune(self.memory, directory, iteration_number)
      return [iteration for iteration in iterations
              if not memory_checkpoint.holds_checkpoint(directory, iteration)]

  def prepare_load(self, checkpoint_dir: str, suffix: Any) -> None:
    """Reads ``checkpoint_dir/shard_{shard}`` into a new memory, kept aside.

    `commit_load` swaps it in; `abort_load` drops it. `load`'s errors name
    the shard, which is unchanged.
    """
    self._loaded = None
    memory = self._new_memory()
    with self._naming_shard():
      memory.load(shard_directory(checkpoint_dir, self.shard), suffix)
    self._loaded = memory

  def commit_load(self) -> None:
    """Replaces the memory with the one `prepare_load` read."""
    if self._loaded is None:
      raise RuntimeError('shard {}: no prepared load to commit'.format(
          self.shard))
    self.memory, self._loaded = self._loaded, None

  def abort_load(self) -> None:
    """Drops the memory `prepare_load` read, if any."""
    self._loaded = None
