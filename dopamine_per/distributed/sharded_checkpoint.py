# coding=utf-8
"""A sharded memory's checkpoints: a record of their shape, all or nothing.

Checkpoint N is one directory per shard (``shard_{k}/``, the single
memory's files) and the record ``dopamine_per_shards_ckpt.N``: JSON of the
shape and each shard's staged files, written once every shard has staged
its part, the commit point of the whole checkpoint. `ShardedCheckpointer`
runs the protocol (docs/distributed.md#design, Checkpoints); legacy
checkpoints, without a record, are recognized by their shard directories.
Imports neither Ray nor TensorFlow.
"""

import dataclasses
import itertools
import operator
import os
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from absl import logging

from dopamine_per import errors
from dopamine_per.distributed import shard as shard_lib
from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import transaction
from dopamine_per.replay_memory.checkpoint import memory_checkpoint

__all__ = ['RECORD_FORMAT', 'ShardedRecord', 'ShardedCheckpointer',
           'record_path', 'read_record', 'latest_checkpoint_iteration']

# The record's file is ``{_RECORD_NAME}_ckpt.{N}``: Dopamine's naming, so the
# experiment checkpointer counts it among iteration N's files.
_RECORD_NAME = 'dopamine_per_shards'
RECORD_FORMAT = 'dopamine_per.sharded_checkpoint/1'

# A record lists each shard's files: 16 MiB holds thousands of shards.
_MAX_RECORD_BYTES = 1 << 24

# Calls a method of several shards at once and waits for all:
# (method, {shard: args}) -> ({shard: result} of those that answered, the
# first error or None).
CallEach = Callable[[str, Dict[int, Tuple[Any, ...]]],
                    Tuple[Dict[int, Any], Optional[Exception]]]

_RECORD_FILE = re.compile(r'^{}_ckpt\.([0-9]{{1,18}})$'.format(
    re.escape(_RECORD_NAME)))


@dataclasses.dataclass
class ShardedRecord(object):
  """A sharded checkpoint's shape and every shard's staged files.

  Attributes:
    iteration: int, the checkpoint's number.
    num_shards: int, the number of shards that saved it.
    shard_capacity: int, each shard's replay_capacity.
    shards: list of transaction.Record, shard k's staged files (paths
      relative to ``shard_{k}/``), in shard order.
  """
  iteration: int
  num_shards: int
  shard_capacity: int
  shards: List[transaction.Record]

  def to_data(self) -> Dict[str, Any]:
    """Returns the record as JSON-ready plain data."""
    return {'format': RECORD_FORMAT, 'iteration': self.iteration,
            'num_shards': self.num_shards,
            'shard_capacity': self.shard_capacity,
            'shards': [record.to_data() for record in self.shards]}

  @classmethod
  def from_data(cls, data: Any, where: str) -> 'ShardedRecord':
    """Builds a record from `to_data`'s form, checking every part of it.

    Args:
      data: what `to_data` returned (or a record file held).
      where: str, what to name in an error (the file).

    Raises:
      atomic_files.CorruptCheckpointError: If `data` is not such a record.
    """
    def malformed(what):
      return atomic_files.CorruptCheckpointError(
          '{} is malformed: {}'.format(where, what))

    if not isinstance(data, dict) or data.get('format') != RECORD_FORMAT:
      raise malformed('not a {} record'.format(RECORD_FORMAT))
    numbers = {}
    for name, minimum in (('iteration', 0), ('num_shards', 1),
                          ('shard_capacity', 1)):
      value = data.get(name)
      if type(value) is not int or value < minimum:  # pylint: disable=unidiomatic-typecheck
        raise malformed('{} is {}, not an int >= {}'.format(
            name, errors.describe(value), minimum))
      numbers[name] = value
    shards = data.get('shards')
    if not isinstance(shards, list) or len(shards) != numbers['num_shards']:
      raise malformed('shards is {}, not a list of num_shards ({}) '
                      'records'.format(errors.describe(shards),
                                       numbers['num_shards']))
    return cls(shards=[
        transaction.Record.from_data(part, where='{} (shard {})'.format(
            where, k)) for k, part in enumerate(shards)], **numbers)


def record_path(checkpoint_dir: str, iteration_number: Any) -> str:
  """Returns the path of checkpoint `iteration_number`'s record."""
  return os.path.join(checkpoint_dir, '{}_ckpt.{}'.format(
      _RECORD_NAME, iteration_number))


def read_record(checkpoint_dir: str, suffix: Any) -> Optional[ShardedRecord]:
  """Reads and checks checkpoint `suffix`'s record; None if there is none.

  Raises:
    atomic_files.CheckpointError: If the record is not a bounded regular
      file holding a well-formed record of checkpoint `suffix`.
  """
  path = record_path(checkpoint_dir, suffix)
  try:
    data = atomic_files.read_json(path, _MAX_RECORD_BYTES,
                                  'sharded checkpoint record')
  except FileNotFoundError:
    return None
  record = ShardedRecord.from_data(data, where=path)
  if str(record.iteration) != str(suffix):
    raise atomic_files.CorruptCheckpointError(
        '{} is malformed: it is the record of checkpoint {}'.format(
            path, record.iteration))
  return record


def _written(checkpoint_dir: str, record: ShardedRecord) -> bool:
  """After writing `record` failed: whether it may be in place all the same.

  True also if the record cannot be read: then what the shards staged must
  stay (a later save's clean-up deletes it if needed).
  """
  try:
    on_disk = read_record(checkpoint_dir, record.iteration)
  except Exception:  # pylint: disable=broad-except
    return True
  return on_disk is not None and on_disk.to_data() == record.to_data()


def _record_iterations(checkpoint_dir: str) -> List[int]:
  """The numbers of the checkpoints that have a record, in order."""
  return sorted(int(match.group(1))
                for match in map(_RECORD_FILE.match,
                                 atomic_files.list_directory(checkpoint_dir))
                if match)


def _remove_records(checkpoint_dir: str, iterations: Iterable[int]) -> None:
  """Deletes the records of `iterations` (checkpoints a shard no longer
  holds), and the temporaries of records that killed saves left."""
  for iteration in iterations:
    atomic_files.remove_if_exists(record_path(checkpoint_dir, iteration))
  atomic_files.remove_temporaries(
      checkpoint_dir, lambda target: _RECORD_FILE.match(target) is not None)


def latest_checkpoint_iteration(checkpoint_dir: str) -> Optional[int]:
  """Returns the newest complete sharded checkpoint's number, or None.

  A checkpoint is complete once its record exists; legacy ones (no record)
  are not counted.
  """
  iterations = _record_iterations(checkpoint_dir)
  return iterations[-1] if iterations else None


def _legacy_shards(checkpoint_dir: str, suffix: Any, num_shards: int
                  ) -> List[int]:
  """The shards whose directory holds legacy checkpoint `suffix`, in order.

  Looks at the first `num_shards` shard directories and at those after
  them, as long as they exist.
  """
  held = []
  for k in itertools.count():
    directory = shard_lib.shard_directory(checkpoint_dir, k)
    if k >= num_shards and not atomic_files.exists(directory):
      return held
    if memory_checkpoint.holds_checkpoint(directory, suffix):
      held.append(k)


class ShardedCheckpointer(object):
  """Saves and loads a sharded memory's shards as one checkpoint.

  It reaches the shards (`shard.ReplayShard` actors) only through
  `call_each`; the memory calls it holding its lock, after sending what it
  had queued for the shards.
  """

  def __init__(self, num_shards: int, shard_capacity: int,
               call_each: CallEach):
    """Creates the checkpointer of a memory of this shape.

    Args:
      num_shards: int, the number of shards.
      shard_capacity: int, each shard's replay_capacity.
      call_each: CallEach, how to call the shards.
    """
    self._num_shards = num_shards
    self._shard_capacity = shard_capacity
    self._call_each = call_each

  def _call(self, method: str, args_by_shard: Dict[int, Tuple[Any, ...]]
           ) -> Dict[int, Any]:
    """`call_each`, raising the first error; returns {shard: result}."""
    results, error = self._call_each(method, args_by_shard)
    if error is not None:
      raise error
    return results

  def _call_all(self, method: str) -> None:
    """Calls `method()` on every shard; raises the first error."""
    self._call(method, {k: () for k in range(self._num_shards)})

  def save(self, checkpoint_dir: str, iteration_number: int) -> None:
    """Saves every shard as checkpoint `iteration_number`, all or nothing.

    The phases: docs/distributed.md#design, Checkpoints. A failure before
    the record deletes what the shards staged; after it, `load` (or the next
    save) completes the commits. Pending commits are completed for the
    newest record only: a save numbered below the newest record whose
    commit fails is lost at the next save.

    Args:
      checkpoint_dir: str, an existing directory (if it does not exist, a
        warning is logged and nothing is written, as the single memory).
      iteration_number: int, the checkpoint's number.

    Raises:
      The shards' errors (`shard.ShardError` for a dead one), whatever
      writing the record raises, and `atomic_files.CheckpointError` if the
      newest record is malformed.
    """
    iteration_number = operator.index(iteration_number)
    if not atomic_files.exists(checkpoint_dir):
      logging.warning('Not saving the sharded replay memory: %s does not '
                      'exist.', checkpoint_dir)
      return
    iterations = _record_iterations(checkpoint_dir)
    if iterations:
      newest = read_record(checkpoint_dir, iterations[-1])
      if newest is not None:
        self._complete_commits(checkpoint_dir, newest)
    staged, error = self._call_each('prepare_save', {
        k: (checkpoint_dir, iteration_number)
        for k in range(self._num_shards)})
    record = None
    try:
      if error is not None:
        raise error
      if any(part is None for part in staged.values()):
        raise FileNotFoundError('{} disappeared while the shards saved into '
                                'it'.format(checkpoint_dir))
      record = ShardedRecord(
          iteration_number, self._num_shards, self._shard_capacity,
          [transaction.Record.from_data(staged[k])
           for k in range(self._num_shards)])
      atomic_files.write_json(record_path(checkpoint_dir, iteration_number),
                              record.to_data())
    except BaseException:
      if record is None or not _written(checkpoint_dir, record):
        _abort_staged(checkpoint_dir, staged)
      raise
    # Committed: checkpoint `iteration_number` is the record's from here on.
    self._complete_commits(checkpoint_dir, record)
    lost = self._call('prune', {
        k: (checkpoint_dir, iteration_number,
            [iteration for iteration in iterations
             if iteration < iteration_number])
        for k in range(self._num_shards)})
    _remove_records(checkpoint_dir, sorted(set().union(*lost.values())))

  def load(self, checkpoint_dir: str, suffix: Any) -> None:
    """Restores every shard from checkpoint `suffix`, all or none.

    A checkpoint of another shape is refused before any shard is called; a
    save interrupted after its record is first completed. Then each shard
    reads its files into a new memory, and only when all have succeeded do
    they swap them in. A legacy checkpoint (no record) loads if exactly
    shards 0 to num_shards - 1 hold it.

    Args:
      checkpoint_dir: str, the directory `save` wrote.
      suffix: int or str, the checkpoint's number.

    Raises:
      atomic_files.CheckpointError: (a ValueError) If the checkpoint's shape
        is not this memory's, or its record is malformed.
      The shards' `load` errors (naming the shard), and `shard.ShardError`
      if a shard is dead.
    """
    record = read_record(checkpoint_dir, suffix)
    self._check_shape(checkpoint_dir, suffix, record)
    if record is not None:
      self._complete_commits(checkpoint_dir, record)
    _, error = self._call_each('prepare_load', {
        k: (checkpoint_dir, suffix) for k in range(self._num_shards)})
    if error is not None:
      self._call_all('abort_load')
      raise error
    self._call_all('commit_load')

  def _complete_commits(self, checkpoint_dir: str,
                        record: ShardedRecord) -> None:
    """Has each of this memory's shards commit its part of `record`."""
    self._call('commit_save', {
        k: (checkpoint_dir, record.iteration, record.shards[k].to_data())
        for k in range(min(record.num_shards, self._num_shards))})

  def _check_shape(self, checkpoint_dir: str, suffix: Any,
                   record: Optional[ShardedRecord]) -> None:
    """Refuses (CheckpointError) a checkpoint of another shape."""
    mine = '{} shards of {} slots'.format(self._num_shards,
                                          self._shard_capacity)
    if record is not None:
      if (record.num_shards, record.shard_capacity) != (
          self._num_shards, self._shard_capacity):
        raise atomic_files.CheckpointError(
            'checkpoint {} in {} was saved by a sharded memory of {} shards '
            'of {} slots; this memory has {}. Load it into a memory of '
            'num_shards={} and replay_capacity={}.'.format(
                suffix, checkpoint_dir, record.num_shards,
                record.shard_capacity, mine, record.num_shards,
                record.num_shards * record.shard_capacity))
      return
    held = _legacy_shards(checkpoint_dir, suffix, self._num_shards)
    if held and held != list(range(self._num_shards)):
      raise atomic_files.CheckpointError(
          'checkpoint {} in {} has no record of its shape (saved before '
          'sharded checkpoints had one) and its shard directories {} hold '
          'it; this memory has {} (shard_0 to shard_{}), so it is not '
          'loaded.'.format(suffix, checkpoint_dir,
                           ['shard_{}'.format(k) for k in held], mine,
                           self._num_shards - 1))


def _abort_staged(checkpoint_dir: str,
                  staged: Dict[int, Optional[Dict[str, Any]]]) -> None:
  """Deletes the files the shards staged, from here (a shard may be dead).

  Never raises: the save's error matters more.
  """
  for k, part in staged.items():
    if part is None:
      continue
    try:
      memory_checkpoint.abort_save(
          shard_lib.shard_directory(checkpoint_dir, k),
          transaction.Record.from_data(part))
    except Exception as error:  # pylint: disable=broad-except
      logging.warning('Could not delete what shard %d staged in %s: %s', k,
                      checkpoint_dir, atomic_files.describe_error(error))
