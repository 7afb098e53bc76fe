# coding=utf-8
"""A replay memory's checkpoints: file layout, save, load, clean-up.

The files are Dopamine's, ``{name}_ckpt.{N}.gz``, plus a
``dopamine_per_state`` file that marks the checkpoint complete and records
every other file's digest; a memory class adds files with a
`CheckpointExtension` (`SUM_TREE`). A save is `prepare_save` (stage every
file), `commit_save` (the journal, the commit point, then the renames) and
`prune`. What differs from Dopamine: docs/compat.md#memory_checkpoint; the
guarantees: docs/reliability.md.
"""

import functools
import operator
import os
import re
from typing import (Any, BinaryIO, Callable, Dict, List, Optional, Sequence,
                    Tuple)

from absl import logging
import numpy as np

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.file_io import safe_pickle
from dopamine_per.file_io import transaction
from dopamine_per.replay_memory.checkpoint import checkpoint_extension
from dopamine_per.replay_memory.checkpoint import checkpoint_reading
from dopamine_per.replay_memory.checkpoint import chunk_checkpoint

__all__ = ['STORE_FILENAME_PREFIX', 'DOPAMINE_PER_STATE_NAME', 'JOURNAL_NAME',
           'CheckpointExtension', 'SUM_TREE', 'latest_checkpoint_iteration',
           'holds_checkpoint', 'journal_filename', 'checkpoint_files',
           'checkpointable_elements', 'save', 'finish_save',
           'directory_exists', 'SaveSnapshot', 'take_snapshot', 'stage',
           'prepare_save', 'commit_save', 'abort_save', 'prune',
           'roll_forward', 'load']

# Prefix of the checkpoint names of storage arrays; '$' cannot start an
# attribute name, so these never collide with other checkpointed attributes.
STORE_FILENAME_PREFIX = '$store$_'

# Checkpoint name of the state Dopamine does not save (whether the next add
# starts an episode, the generators' states, every other file's digest).
DOPAMINE_PER_STATE_NAME = 'dopamine_per_state'

# Name of the journal of a save being committed, ``{JOURNAL_NAME}_ckpt.{N}``
# (JSON, no ``.gz``), from the commit point until every file is in place.
JOURNAL_NAME = 'dopamine_per_journal'

# A memory's checkpoint formats (its `checkpoint_format`): Dopamine's
# files, or the arrays and sum tree in chunks (`chunk_checkpoint`).
FORMATS = ('dopamine', 'chunks')

# File names of state files and journals; group 1 is the iteration number.
_STATE_PATTERN = re.compile(r'^{}_ckpt\.(\d+)\.gz$'.format(
    re.escape(DOPAMINE_PER_STATE_NAME)))
_JOURNAL_PATTERN = re.compile(r'^{}_ckpt\.(\d+)$'.format(
    re.escape(JOURNAL_NAME)))

# (name, format) of a checkpoint file. Formats: 'npy' (gzip'd np.save),
# 'pickle' (gzip'd plain-data pickle) and 'sum_tree' (gzip'd pickle of a
# Dopamine SumTree).
FileSpec = Tuple[str, str]


# A file a memory class adds (`checkpoint_extension`), and the prioritized
# memory's.
CheckpointExtension = checkpoint_extension.CheckpointExtension
SUM_TREE = checkpoint_extension.SUM_TREE


def check_format(checkpoint_format: Optional[str], compressed: bool) -> str:
  """A memory's `checkpoint_format` argument, checked: one of FORMATS;
  None: 'chunks' for a memory of compressed frames, else 'dopamine'.

  Raises:
    ValueError: naming the argument and the value, if it is another.
  """
  if checkpoint_format is None:
    return 'chunks' if compressed else 'dopamine'
  if checkpoint_format not in FORMATS:
    raise ValueError('checkpoint_format must be one of {}, got {!r}'.format(
        FORMATS, checkpoint_format))
  return checkpoint_format


def latest_checkpoint_iteration(checkpoint_dir: str) -> Optional[int]:
  """Returns the newest complete checkpoint written by `save`, or None.

  A checkpoint is complete once its `dopamine_per_state` file exists, or
  its journal (a save committed but not yet finished: `load` reads through
  it); a save or a clean-up cut short leaves the previous one the newest.

  Args:
    checkpoint_dir: str, the directory given to `save`.

  Returns:
    int, the iteration number to give `load`, or None if there is none.
  """
  iterations = _complete(checkpoint_dir)
  return max(iterations) if iterations else None


def _complete(checkpoint_dir: str) -> List[int]:
  """The iterations of the complete checkpoints in `checkpoint_dir`."""
  names = atomic_files.list_directory(checkpoint_dir)
  return (_iterations(_STATE_PATTERN, names) +
          _iterations(_JOURNAL_PATTERN, names))


def holds_checkpoint(checkpoint_dir: str, iteration_number: Any) -> bool:
  """Whether `checkpoint_dir` holds complete checkpoint N.

  Complete as `latest_checkpoint_iteration` counts it; looks at its
  `dopamine_per_state` file and its journal only.

  Args:
    checkpoint_dir: str, a memory's checkpoint directory.
    iteration_number: int or str, N.
  """
  names = ((_STATE_PATTERN, _target(DOPAMINE_PER_STATE_NAME,
                                    iteration_number)),
           (_JOURNAL_PATTERN, journal_filename(iteration_number)))
  return any(pattern.match(name) and
             atomic_files.exists(os.path.join(checkpoint_dir, name))
             for pattern, name in names)


def journal_filename(iteration_number: Any) -> str:
  """The file name (no directory) of checkpoint N's journal.

  Args:
    iteration_number: int or str, N.
  """
  return '{}_ckpt.{}'.format(JOURNAL_NAME, iteration_number)


def _iterations(pattern: 're.Pattern[str]', names: Sequence[str]
               ) -> List[int]:
  """The iteration numbers of the file names `names` that `pattern` fits."""
  return sorted(int(match.group(1))
                for match in map(pattern.match, names) if match)


def roll_forward(checkpoint_dir: str) -> List[int]:
  """Finishes the saves that were committed but cut short (SIGKILL, error).

  Renames each pending journal's files onto their names and deletes the
  journal (`transaction.roll_forward`): afterwards the directory holds
  Dopamine's files only. `prepare_save` does it first. Idempotent.

  Args:
    checkpoint_dir: str, a memory's checkpoint directory.

  Returns:
    list of int, the iterations whose journal was rolled forward.

  Raises:
    atomic_files.CorruptCheckpointError: If a journal is malformed (it and
      its files are left as they are; the checkpoint of that iteration does
      not load).
    OSError: If a rename fails (call it again).
  """
  done = []
  for iteration in _iterations(_JOURNAL_PATTERN,
                               atomic_files.list_directory(checkpoint_dir)):
    if transaction.roll_forward(checkpoint_dir, journal_filename(iteration)):
      logging.info('Finished the interrupted save of checkpoint %d in %s.',
                   iteration, checkpoint_dir)
      done.append(iteration)
  return done


# ----------------------------------------------------------------- layout


def _layout(memory: Any, chunked: Optional[bool] = None) -> List[FileSpec]:
  """Returns the files of the memory's own state (not its attributes): its
  arrays and sum tree in chunks if `chunked` (`chunk_checkpoint`; None: if
  the memory compresses its frames), else in Dopamine's files."""
  if chunked is None:
    chunked = memory.checkpoint_format == 'chunks'
  layout = (list(chunk_checkpoint.FILES) if chunked else
            [(STORE_FILENAME_PREFIX + e.name, 'npy')
             for e in memory.get_storage_signature()])
  layout += [('add_count', 'npy'), ('invalid_range', 'npy'),
             ('episode_end_indices', 'pickle')]
  layout += [(extension.name, extension.file_format)
             for extension in memory.checkpoint_extensions
             # A chunked checkpoint holds the sum tree in its chunks.
             if not (chunked and extension.file_format == 'sum_tree')]
  return layout


def _attribute_files(memory: Any) -> List[FileSpec]:
  """Returns the files of the public attributes `_layout` does not name.

  As in Dopamine, every public attribute (e.g. a subclass's counters and
  arrays) is checkpointed: NumPy arrays as 'npy' files, anything else as a
  'pickle'; sorted by name.
  """
  own = {name for name, _ in _layout(memory)}
  return [(name, 'npy' if type(value) is np.ndarray else 'pickle')
          for name, value in sorted(vars(memory).items())
          if not name.startswith('_') and name not in own]


def checkpoint_files(memory: Any, blocks: Optional[bool] = None
                    ) -> List[FileSpec]:
  """Returns (name, format) of every file of a checkpoint but the state.

  Args:
    memory: an `OutOfGraphReplayBuffer`.
    blocks: whether the arrays are saved in chunks (`chunk_checkpoint`);
      None: as the memory saves them.

  Returns:
    list of (str, str), in the order `save` writes them.
  """
  return _layout(memory, blocks) + _attribute_files(memory)


def _value(memory: Any, name: str) -> Any:
  """Returns what checkpoint file `name` holds."""
  for extension in memory.checkpoint_extensions:
    if name == extension.name:
      return extension.value(memory)
  if name.startswith(STORE_FILENAME_PREFIX):
    return memory.storage.arrays[name[len(STORE_FILENAME_PREFIX):]]
  if name in dict(chunk_checkpoint.FILES):
    return chunk_checkpoint.value(memory, name)
  if name in ('add_count', 'invalid_range'):
    return getattr(memory, name)
  if name == 'episode_end_indices':
    return set(int(i) for i in memory.episode_end_indices)
  return vars(memory)[name]  # A public attribute (`_attribute_files`).


def checkpointable_elements(memory: Any) -> Dict[str, Any]:
  """Returns {file name: value} of what `save` writes (Dopamine's hook).

  Args:
    memory: an `OutOfGraphReplayBuffer`.

  Returns:
    dict, without the dopamine_per state.
  """
  return {name: _value(memory, name) for name, _ in checkpoint_files(memory)}


# ------------------------------------------------------------------- save


def _check_checkpointable(memory: Any) -> None:
  """Checks that every public attribute can be saved and safely loaded.

  Raises:
    TypeError: If an attribute holds something other than plain data
      (`safe_pickle.non_plain_data`): loading it would have to run code.
    ValueError: If an attribute's name cannot be a checkpoint file's.
  """
  for name, _ in _attribute_files(memory):
    if not name.isidentifier() or name in (DOPAMINE_PER_STATE_NAME,
                                           JOURNAL_NAME):
      raise ValueError(
          'save(): the attribute {!r} of {} cannot be checkpointed under '
          'its name; rename it (or make it private with a leading '
          "underscore).".format(name, type(memory).__name__))
    problem = safe_pickle.non_plain_data(vars(memory)[name])
    if problem is not None:
      raise TypeError(
          'save(): the public attribute {!r} of {} holds {}; checkpoints '
          'hold plain data only (numbers, strings, bytes, None, NumPy '
          'arrays, and lists, tuples, dicts and sets of those), so that '
          'loading never runs code. Make it private (a leading '
          'underscore) or store plain data. Nothing was written.'.format(
              name, type(memory).__name__, problem))


def _extra_state(memory: Any) -> Dict[str, Any]:
  """Returns the state Dopamine's format has no file for."""
  return {
      'format_version': checkpoint_reading.STATE_FORMAT_VERSION,
      'next_experience_is_episode_start':
          bool(memory.storage.episode_start),
      'rng_state': (None if memory.rng is None else
                    memory.rng.bit_generator.state),
      # The native ops' generator: a resumed run's samples continue.
      'sampler_state': (None if memory.native is None else
                        memory.native.sampler_state()),
      # What converting between the formats needs (`convert`).
      'dopamine_layout': chunk_checkpoint.dopamine_layout(
          memory, [name for name, _ in checkpoint_files(memory, False)]),
  }


def _target(name: str, iteration_number: Any) -> str:
  """Checkpoint file `name`'s file name (no directory), as Dopamine's."""
  return gzip_files.checkpoint_filename('', name, iteration_number)


def _writer(memory: Any, name: str, file_format: str
           ) -> Callable[[BinaryIO], None]:
  """The function writing checkpoint file `name` (see `gzip_files`), as
  the memory is now: it holds a copy of the value or its pickle (the sum
  tree's: its leaves, `_SumTreeExtension.writer`)."""
  if file_format == 'sum_tree':
    return next(extension.writer(memory) for extension in
                memory.checkpoint_extensions if extension.name == name)
  value = _value(memory, name)
  if file_format == 'npy':
    return gzip_files.npy_gz_writer(np.array(value), name)
  return gzip_files.pickle_gz_writer(value)


def save(memory: Any, checkpoint_dir: str, iteration_number: int) -> None:
  """Writes `memory` to `checkpoint_dir` (`OutOfGraphReplayBuffer.save`).

  `prepare_save`, `commit_save` and `prune` in a row: whatever stops the
  save, `load(N)` gives all of the previous checkpoint N until the journal
  is written, all of the new one from then on; what it staged is deleted
  (by the next save after a SIGKILL). The caller holds the memory's `_lock`.

  Args:
    memory: an `OutOfGraphReplayBuffer`.
    checkpoint_dir: str, an existing directory. If it does not exist a
      warning is logged and nothing is written.
    iteration_number: int, the checkpoint's suffix.

  Raises:
    TypeError: If a public attribute holds something other than plain data
      (see `safe_pickle.non_plain_data`); nothing is written then.
    ValueError: If a public attribute's name cannot name a file.
    atomic_files.CorruptCheckpointError: If a pending journal in
      `checkpoint_dir` is malformed (nothing is written).
    OSError: If writing fails (disk full ...); checkpoint N is unchanged
      unless the journal was written, in which case it is the new one.
  """
  record = prepare_save(memory, checkpoint_dir, iteration_number)
  if record is not None:
    finish_save(memory, checkpoint_dir, iteration_number, record)


def finish_save(memory: Any, checkpoint_dir: str, iteration_number: int,
                record: transaction.Record,
                names: Optional[Sequence[str]] = None) -> None:
  """`commit_save` of a staged `record` (its files deleted if it fails
  before the commit point), then the clean-up of `prune`; `names`: the
  checkpoint's file names, if not the memory's now."""
  try:
    commit_save(memory, checkpoint_dir, iteration_number, record,
                prune=False)
  except BaseException:
    transaction.abort_uncommitted(
        checkpoint_dir, journal_filename(iteration_number), record)
    raise
  _clean_up(memory, checkpoint_dir, iteration_number, names)


def directory_exists(checkpoint_dir: str) -> bool:
  """Whether `checkpoint_dir` exists; if not, logs that nothing is saved."""
  if atomic_files.exists(checkpoint_dir):
    return True
  logging.warning('Checkpoint directory %s does not exist: replay buffer '
                  'not saved.', checkpoint_dir)
  return False


class SaveSnapshot(object):
  """What a save writes, as the memory was when `take_snapshot` ran.

  The storage's arrays are read out later, copy on write
  (`storage.StorageSnapshot`); every other file's value is copied or
  pickled when taken.

  Attributes:
    writers: list of (file name, function writing the file), in the order
      a save writes them (the state file is not among them).
    state: dict, the state file's content but for the files' digests.
    names: list of str, every file name of the checkpoint, the state
      file's first (for the clean-up).
  """

  def __init__(self, writers: List[Tuple[str, Callable[[BinaryIO], None]]],
               state: Dict[str, Any], storage_snapshot: Any,
               saver: Optional[chunk_checkpoint.Saver] = None):
    self.writers = writers
    self.state = state
    # Packs the chunks, if the checkpoint is chunked (`stage` binds it).
    self.saver = saver
    self.names = [DOPAMINE_PER_STATE_NAME] + [name for name, _ in writers]
    self._storage_snapshot = storage_snapshot

  def release(self) -> None:
    """Lets the storage stop keeping rows for this snapshot."""
    self._storage_snapshot.release()


def take_snapshot(memory: Any, lock: Any = None) -> SaveSnapshot:
  """Takes what a save of `memory` writes, as it is now.

  The caller holds the memory's lock; `lock` is that lock where the
  snapshot is read out after the caller let it go, or None where the
  caller holds it until the snapshot is released.

  Raises:
    TypeError, ValueError: As `save`; nothing is taken then.
  """
  _check_checkpointable(memory)
  storage = memory.storage.snapshot(lock)
  writers, saver, chunked = [], None, {}
  try:
    if checkpoint_files(memory)[0] in chunk_checkpoint.FILES:
      saver = chunk_checkpoint.Saver(chunk_checkpoint.parts(
          memory, lambda e: storage.chunks(
              e, chunk_checkpoint.ARRAY_CHUNK_BYTES),
          storage.frames, chunk_checkpoint.sum_tree_state(memory)))
      chunked = saver.writers()
    for name, file_format in checkpoint_files(memory):
      if name in chunked:
        writer = chunked[name]
      elif name.startswith(STORE_FILENAME_PREFIX):
        element = name[len(STORE_FILENAME_PREFIX):]
        array = memory.storage.arrays[element]
        writer = gzip_files.npy_chunks_gz_writer(
            array.shape, array.dtype, functools.partial(storage.chunks,
                                                        element))
      else:
        writer = _writer(memory, name, file_format)
      writers.append((name, writer))
    state = _extra_state(memory)
  except BaseException:
    storage.release()
    raise
  return SaveSnapshot(writers, state, storage, saver)


def stage(snapshot: SaveSnapshot, checkpoint_dir: str,
          iteration_number: int) -> transaction.Record:
  """Writes `snapshot` as checkpoint N under temporary names, the state
  file last (`prepare_save`'s writing, after pending journals are
  finished).

  Raises:
    atomic_files.CorruptCheckpointError: If a pending journal is malformed.
    OSError: If writing fails; what was staged is deleted.
  """
  roll_forward(checkpoint_dir)
  if snapshot.saver is not None:
    chunk_checkpoint.check_resave(checkpoint_dir, iteration_number,
                                  _complete(checkpoint_dir))
    earlier = [i for i in _complete(checkpoint_dir) if i < iteration_number]
    snapshot.saver.bind(checkpoint_dir, iteration_number,
                        max(earlier) if earlier else None)
  staging = transaction.Transaction(checkpoint_dir)
  try:
    digests = {}
    for name, writer in snapshot.writers:
      digests[name] = tuple(staging.write(_target(name, iteration_number),
                                          writer))
    # Last, so renamed last: it marks the checkpoint complete.
    state = dict(snapshot.state, files=digests)
    staging.write(_target(DOPAMINE_PER_STATE_NAME, iteration_number),
                  gzip_files.pickle_gz_writer(state, memo=False))
  except BaseException:
    staging.abort()
    raise
  return staging.record()


def prepare_save(memory: Any, checkpoint_dir: str, iteration_number: int
                ) -> Optional[transaction.Record]:
  """Writes every file of checkpoint N under a temporary name: phase one.

  Finishes pending journals first (`roll_forward`); a previous checkpoint N
  still loads as before. Give the record to `commit_save` or `abort_save`;
  nothing else may run on the directory in between (`prune` and `save`
  delete uncommitted staged files). The caller holds the memory's `_lock`.

  Args:
    memory: an `OutOfGraphReplayBuffer`.
    checkpoint_dir: str, an existing directory.
    iteration_number: int, N.

  Returns:
    transaction.Record of the staged files, or None if `checkpoint_dir`
    does not exist (a warning is logged and nothing is written).

  Raises:
    TypeError, ValueError: As `save`, before anything is written.
    atomic_files.CorruptCheckpointError: If a pending journal is malformed.
    OSError: If writing fails; what was staged is deleted.
  """
  iteration_number = operator.index(iteration_number)
  if not directory_exists(checkpoint_dir):
    return None
  snapshot = take_snapshot(memory)
  try:
    return stage(snapshot, checkpoint_dir, iteration_number)
  finally:
    snapshot.release()


def commit_save(memory: Any, checkpoint_dir: str, iteration_number: int,
                record: Optional[transaction.Record],
                prune: bool = True) -> None:  # pylint: disable=redefined-outer-name
  """Makes the files `prepare_save` staged checkpoint N: phase two.

  Writes the journal (the commit point), renames the staged files, the
  state file last, and deletes the journal. Idempotent: called again with
  the same record, it finishes what is left.

  Args:
    memory: the `OutOfGraphReplayBuffer` that was saved (for `prune`).
    checkpoint_dir: str, the directory given to `prepare_save`.
    iteration_number: int, N, as given to `prepare_save`.
    record: what `prepare_save` returned (in another process, through
      `Record.to_data` and `Record.from_data`); None commits nothing.
    prune: whether to `prune` afterwards (a sharded memory prunes once
      every shard has committed).

  Raises:
    ValueError: If `record` is not of checkpoint N's files.
    atomic_files.CheckpointError: If a staged file is gone and the record
      is not in place: checkpoint N is unchanged.
    OSError: If the journal or a rename fails: checkpoint N is unchanged
      before the journal exists (call again, or `abort_save`), the new one
      after (call again, or let the next save finish it).
  """
  if record is None:
    return
  iteration_number = operator.index(iteration_number)
  _check_record(record, iteration_number)
  journal = journal_filename(iteration_number)
  # An earlier call cut short after the commit point: finish it.
  transaction.roll_forward(checkpoint_dir, journal)
  staged = [atomic_files.exists(os.path.join(checkpoint_dir, entry.staged))
            for entry in record.entries]
  if all(staged):
    transaction.commit(checkpoint_dir, journal, record)
  elif any(staged) or not _in_place(checkpoint_dir, iteration_number,
                                    record):
    missing = [entry.staged for entry, there in zip(record.entries, staged)
               if not there]
    raise atomic_files.CheckpointError(
        'Cannot commit checkpoint {} in {}: staged files {} are gone (the '
        'save was aborted, or its temporary files deleted). Checkpoint {} '
        'is unchanged; save again.'.format(
            iteration_number, checkpoint_dir, missing[:3], iteration_number))
  if prune:
    _clean_up(memory, checkpoint_dir, iteration_number)


def abort_save(checkpoint_dir: str, record: Optional[transaction.Record]
              ) -> None:
  """Deletes the files `prepare_save` staged; nothing else changes.

  Args:
    checkpoint_dir: str, the directory given to `prepare_save`.
    record: what `prepare_save` returned; None does nothing.

  Raises:
    ValueError: If `record` is not a checkpoint's files, or was committed
      already (its journal is pending: its files are the checkpoint now).
  """
  if record is None:
    return
  iteration_number = _check_record(record)
  journal = transaction.pending(checkpoint_dir,
                                journal_filename(iteration_number))
  if journal is not None and (
      {entry.staged for entry in journal.entries} &
      {entry.staged for entry in record.entries}):
    raise ValueError(
        'Cannot abort the save of checkpoint {} in {}: it was committed '
        '(its journal is pending); the next save finishes it.'.format(
            iteration_number, checkpoint_dir))
  transaction.abort(checkpoint_dir, record)


def prune(memory: Any, checkpoint_dir: str, iteration_number: int) -> None:
  """The clean-up after checkpoint N is saved: what `save` does last.

  Finishes pending journals, then deletes the checkpoint
  `checkpoint_duration` iterations older (unless a multiple of
  keep_every), its state file first, and the temporaries killed saves
  left. Never call it between `prepare_save` and `commit_save`: it deletes
  their staged files. The caller holds the memory's lock.

  Args:
    memory: the `OutOfGraphReplayBuffer` that was saved.
    checkpoint_dir: str, its checkpoint directory.
    iteration_number: int, N.
  """
  _clean_up(memory, checkpoint_dir, iteration_number)


def _clean_up(memory: Any, checkpoint_dir: str, iteration_number: int,
              names: Optional[Sequence[str]] = None) -> None:
  """`prune` (which `commit_save`'s argument hides); `names`: the
  checkpoint's file names, if not the memory's now."""
  roll_forward(checkpoint_dir)
  if names is None:
    names = [DOPAMINE_PER_STATE_NAME] + [
        name for name, _ in checkpoint_files(memory)]
  # The files of the other format: a stale checkpoint's, and this one's
  # from before (its pack aside: `prune_packs` decides).
  other = sorted(
      {name for name, _ in _layout(memory, True) + _layout(memory, False)} -
      set(names) - {chunk_checkpoint.PACK_NAME})
  for name in other:
    atomic_files.remove_if_exists(gzip_files.checkpoint_filename(
        checkpoint_dir, name, iteration_number))
  names = list(names) + other + [chunk_checkpoint.PACK_NAME] * (
      chunk_checkpoint.PACK_NAME not in names)
  _collect_garbage(memory, checkpoint_dir, operator.index(iteration_number),
                   names)
  chunk_checkpoint.prune_packs(checkpoint_dir, _complete(checkpoint_dir))
  _remove_temporaries(checkpoint_dir, names)


def _check_record(record: transaction.Record,
                  iteration_number: Optional[int] = None) -> int:
  """Checks that `record` stages checkpoint N's files; returns N.

  Raises:
    ValueError: If a target is not a file of checkpoint N (of
      `iteration_number`, if given), or the state file is not among them.
  """
  found = [int(match.group(1)) for match in
           (_STATE_PATTERN.match(entry.target) for entry in record.entries)
           if match]
  if len(found) != 1 or (iteration_number is not None and
                         found[0] != iteration_number):
    raise ValueError(
        'Not a record of checkpoint {} (its state files: {}).'.format(
            'N' if iteration_number is None else iteration_number, found))
  suffix = '_ckpt.{}.gz'.format(found[0])
  for entry in record.entries:
    if not entry.target.endswith(suffix) or '/' in entry.target:
      raise ValueError('{} is not a file of checkpoint {}.'.format(
          entry.target, found[0]))
  return found[0]


def _in_place(checkpoint_dir: str, iteration_number: int,
              record: transaction.Record) -> bool:
  """Whether `record`'s commit has finished: its state file is in place.

  The state file is renamed last, and its bytes identify this save.
  """
  target = _target(DOPAMINE_PER_STATE_NAME, iteration_number)
  try:
    return (atomic_files.file_digest(os.path.join(checkpoint_dir, target)) ==
            record.digest_of(target))
  except (FileNotFoundError, atomic_files.CheckpointError):
    return False


def _remove_temporaries(checkpoint_dir: str, names: Sequence[str]) -> None:
  """Deletes temporaries of checkpoint files `names` and journals.

  Only once pending journals are rolled forward: their staged files are
  such temporaries.
  """
  pattern = re.compile(r'^(?:(?:{})_ckpt\.\d+\.gz|{}_ckpt\.\d+)$'.format(
      '|'.join(re.escape(name) for name in names), re.escape(JOURNAL_NAME)))
  for path in atomic_files.remove_temporaries(
      checkpoint_dir, lambda target: pattern.match(target) is not None):
    logging.info('Deleted %s, left by an interrupted save.', path)


def _collect_garbage(memory: Any, checkpoint_dir: str, iteration_number: int,
                     names: Sequence[str]) -> None:
  """Deletes files `names` (the state file first) of the stale checkpoint,
  but its pack of chunks (`chunk_checkpoint.prune_packs` deletes it once
  no checkpoint names it).

  Only with no journal pending: a checkpoint with a state file has all its
  files.
  """
  stale = iteration_number - memory.checkpoint_duration
  if stale < 0:
    return
  if memory.keep_every is not None and stale % memory.keep_every == 0:
    return
  for name in names:
    if name != chunk_checkpoint.PACK_NAME:
      atomic_files.remove_if_exists(
          gzip_files.checkpoint_filename(checkpoint_dir, name, stale))


# ------------------------------------------------------------------- load


def load(memory: Any, checkpoint_dir: str, suffix: Any,
         bind: Optional[Callable[[Any], None]] = None) -> None:
  """Restores `memory` from a checkpoint (`OutOfGraphReplayBuffer.load`).

  All-or-nothing: every file is read and validated before anything is
  installed; if `bind` then raises, the memory is put back as it was (the
  ops keep the previous arrays). A save committed but cut short is read
  through its journal, without writing. The caller holds the memory's lock.

  Args:
    memory: an `OutOfGraphReplayBuffer`.
    checkpoint_dir: str, the directory.
    suffix: int or str, the checkpoint's iteration number.
    bind: run on the memory once installed (`NativeMemory.bind`), or None.

  Raises:
    atomic_files.CheckpointNotFoundError: If an expected file is missing
      (but for episode_end_indices, which old checkpoints lack); also a
      FileNotFoundError and, where TensorFlow is loaded, the
      tf.errors.NotFoundError Dopamine raises.
    atomic_files.CheckpointError: (a ValueError) If a file or the journal
      is corrupt, unsafe, too large or does not match the memory's
      configuration; or if `bind` raises an `Exception` (chained to it).
      Any other exception of `bind` passes unchanged, the memory put back.
  """
  journal = transaction.pending(checkpoint_dir, journal_filename(suffix))

  def path_of(name, iteration=suffix):
    target = _target(name, iteration)
    if journal is not None and journal.digest_of(target) is not None:
      return journal.path_of(checkpoint_dir, target)
    return gzip_files.checkpoint_filename(checkpoint_dir, name, iteration)

  # The arrays in Dopamine's files or in chunks, as the state file says.
  index = chunk_checkpoint.INDEX_NAME
  blocks = index in checkpoint_reading.state_files(
      path_of(DOPAMINE_PER_STATE_NAME),
      {index} if atomic_files.exists(path_of(index)) else set())
  missing_episode_ends = False
  for name, _ in checkpoint_files(memory, blocks):
    if atomic_files.exists(path_of(name)):
      continue
    if name == 'episode_end_indices':
      logging.warning('Unable to find episode_end_indices. This is '
                      'expected for old checkpoints.')
      missing_episode_ends = True
      continue
    filename = gzip_files.checkpoint_filename(checkpoint_dir, name, suffix)
    raise atomic_files.not_found_error('Missing file: {}'.format(filename),
                                       filename)
  state_digest = (None if journal is None else journal.digest_of(
      _target(DOPAMINE_PER_STATE_NAME, suffix)))
  layout = checkpoint_reading.Layout(
      STORE_FILENAME_PREFIX, DOPAMINE_PER_STATE_NAME,
      checkpoint_files(memory, blocks), _attribute_files(memory))
  with atomic_files.refusing('checkpoint {} in {}'.format(
      suffix, checkpoint_dir)):
    pending = checkpoint_reading.read(memory, layout, path_of, state_digest,
                                      missing_episode_ends, suffix)
  previous = (None if bind is None else
              checkpoint_reading.replaced(memory, pending))
  checkpoint_reading.install(memory, pending)
  if bind is None:
    return
  try:
    bind(memory)
  except BaseException as e:
    # Not bound again: that would reseed the ops' generator.
    checkpoint_reading.install(memory, previous)
    if not isinstance(e, Exception):
      raise
    raise atomic_files.CheckpointError(
        'Checkpoint {} in {}: the native ops cannot take the loaded arrays '
        '({}); the memory is as it was before the load.'.format(
            suffix, checkpoint_dir, atomic_files.describe_error(e))) from e

