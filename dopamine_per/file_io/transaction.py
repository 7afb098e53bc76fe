# coding=utf-8
"""Several files replaced as one: staged files and a redo journal.

`Transaction.write` (or `adopt`) stages each file under a temporary name
beside its target; `Transaction.commit` writes the journal (each target's
staged name, size and SHA-256) atomically, the commit point; `roll_forward`
renames the staged files onto their targets in order, then deletes the
journal, and finishes the renames left when run again after a crash. A
reader meeting an interrupted commit rolls it forward first or reads
through the journal (`pending`, `Record.path_of`). `Transaction.record` is
plain data that another process can `commit`. A journal names only
temporaries of files of its directory, so a crafted one can rename nothing
but staged files. The protocol: docs/reliability.md.
"""

import collections
import os
import posixpath
from typing import Any, BinaryIO, Callable, Dict, List, Optional

from dopamine_per import errors
from dopamine_per.file_io import atomic_files

__all__ = ['JOURNAL_FORMAT', 'Entry', 'Record', 'Transaction', 'commit',
           'abort', 'abort_uncommitted', 'roll_forward', 'pending',
           'is_relative_path', 'join']

JOURNAL_FORMAT = 'dopamine_per.journal/1'

# A journal lists a checkpoint's files: a few hundred at most.
_MAX_JOURNAL_BYTES = 1 << 24

# One staged file: `target` and `staged` are paths relative to the journal's
# directory ('/'-separated), `digest` the staged file's FileDigest.
Entry = collections.namedtuple('Entry', ['target', 'staged', 'digest'])


class Record(object):
  """What a transaction staged, as plain data that a journal holds.

  Attributes:
    entries: list of Entry, in the order the files were staged (and are
      renamed).
  """

  def __init__(self, entries: List[Entry]):
    self.entries = list(entries)

  def to_data(self) -> Dict[str, Any]:
    """Returns the record as JSON-ready plain data (what a journal holds)."""
    return {'format': JOURNAL_FORMAT,
            'files': [[e.target, e.staged, e.digest.size, e.digest.sha256]
                      for e in self.entries]}

  @classmethod
  def from_data(cls, data: Any, where: str = 'journal') -> 'Record':
    """Builds a record from `to_data`'s form, checking every part of it.

    Args:
      data: what `to_data` returned (or a journal file held).
      where: str, what to name in an error.

    Raises:
      atomic_files.CorruptCheckpointError: If `data` is not such a record
        (a path outside the directory or not normalized, a staged name not
        a temporary of its target, a target twice, a malformed digest).
    """
    def malformed(what):
      return atomic_files.CorruptCheckpointError(
          '{} is malformed: {}'.format(where, what))

    if not isinstance(data, dict) or data.get('format') != JOURNAL_FORMAT:
      raise malformed('not a {} record'.format(JOURNAL_FORMAT))
    files = data.get('files')
    if not isinstance(files, list):
      raise malformed("its 'files' entry is not a list")
    entries, targets = [], set()
    for item in files:
      if not (isinstance(item, list) and len(item) == 4):
        raise malformed('an entry is {}, not [target, staged, size, '
                        'sha256]'.format(errors.describe(item)))
      target, staged, size, sha256 = item
      for path in (target, staged):
        if not is_relative_path(path):
          raise malformed('{} is not a path inside its directory'.format(
              errors.describe(path)))
      if (posixpath.dirname(staged) != posixpath.dirname(target) or
          not atomic_files.is_temporary_of(posixpath.basename(staged),
                                           posixpath.basename(target))):
        raise malformed('{} is not a temporary file of {}'.format(
            errors.describe(staged), errors.describe(target)))
      digest = atomic_files.digest_from_data([size, sha256])
      if digest is None:
        raise malformed('the size and SHA-256 of {} are not [int, hex '
                        'digest]'.format(errors.describe(target)))
      if target in targets:
        raise malformed('{} is listed twice'.format(errors.describe(target)))
      targets.add(target)
      entries.append(Entry(target, staged, digest))
    return cls(entries)

  def _entry(self, target: str) -> Optional[Entry]:
    return next((e for e in self.entries if e.target == target), None)

  def digest_of(self, target: str) -> Optional[atomic_files.FileDigest]:
    """The digest recorded for `target`, or None if it is not listed."""
    entry = self._entry(target)
    return entry and entry.digest

  def path_of(self, directory: str, target: str) -> str:
    """Where `target`'s content is now, under the journal's `directory`.

    Raises:
      KeyError: If `target` is not listed.
    """
    entry = self._entry(target)
    if entry is None:
      raise KeyError(target)
    staged = join(directory, entry.staged)
    return staged if atomic_files.exists(staged) else join(directory, target)


def is_relative_path(path: Any) -> bool:
  """Whether `path` is a str naming a file inside a directory, normalized.

  '/' separators; no empty, '.' or '..' part, backslash or NUL.
  """
  if not isinstance(path, str) or not path or '\\' in path or '\0' in path:
    return False
  parts = path.split('/')
  return all(part not in ('', '.', '..') for part in parts)


def join(directory: str, relative: str) -> str:
  """Returns the path of `relative` ('/'-separated) below `directory`."""
  return os.path.join(directory, *relative.split('/'))


class Transaction(object):
  """Files staged in one directory, to replace their targets all at once.

  Usage::

    transaction = Transaction(directory)
    try:
      transaction.write('a_ckpt.3.gz', write_a)
      transaction.write('b_ckpt.3.gz', write_b)
    except BaseException:
      transaction.abort()
      raise
    transaction.commit('journal_ckpt.3')  # Writes the journal, renames.

  Not thread-safe; one transaction per directory and journal name at a time
  (the caller's lock, e.g. the trainer's lock on its run directory).
  """

  def __init__(self, directory: str):
    """Starts an empty transaction in existing `directory` (of the targets)."""
    self.directory = directory
    self._entries = []

  def _target_path(self, target: str) -> str:
    """The path of a new target, its directory created."""
    if not is_relative_path(target):
      raise ValueError('target must be a path inside {}, got {}'.format(
          self.directory, errors.describe(target)))
    if any(entry.target == target for entry in self._entries):
      raise ValueError('{} is staged twice'.format(target))
    path = join(self.directory, target)
    atomic_files.make_directories(os.path.dirname(path))
    return path

  def _add(self, target: str, staged_path: str,
           digest: atomic_files.FileDigest) -> atomic_files.FileDigest:
    staged = posixpath.join(posixpath.dirname(target),
                            os.path.basename(staged_path))
    self._entries.append(Entry(target, staged, digest))
    return digest

  def write(self, target: str, write: Callable[[BinaryIO], None]
           ) -> atomic_files.FileDigest:
    """Stages a file; `write` writes its content (`atomic_files.stage_write`).

    Args:
      target: str, the file's path relative to the directory ('/'
        separators); its directory is created if missing.
      write: callable taking a writable binary file object.

    Returns:
      FileDigest of what was written.

    Raises:
      ValueError: If `target` is not a path inside the directory, or is
        staged already.
      Whatever `write` or the filesystem raises (nothing is staged then).
    """
    staged = atomic_files.stage_write(self._target_path(target), write)
    return self._add(target, staged.path, staged.digest)

  def adopt(self, target: str, source: str) -> atomic_files.FileDigest:
    """Stages an existing file (another writer's, e.g. TensorFlow's saver's).

    `source` is fsync'ed and moved to a temporary name beside the target.

    Args:
      target: str, the file's path relative to the directory.
      source: str, a regular local file on the same filesystem.

    Returns:
      FileDigest of the file.

    Raises:
      ValueError: If `target` is not a path inside the directory, or is
        staged already.
      FileNotFoundError, atomic_files.CheckpointError: If `source` is
        missing or not a regular file.
    """
    path = self._target_path(target)
    digest = atomic_files.file_digest(source)
    with open(source, 'rb') as f:
      os.fsync(f.fileno())
    fd, staged_path = atomic_files.create_temporary(path)
    os.close(fd)
    try:
      os.replace(source, staged_path)
    except BaseException:
      atomic_files.remove_if_exists(staged_path)
      raise
    return self._add(target, staged_path, digest)

  @property
  def digests(self) -> Dict[str, atomic_files.FileDigest]:
    """{target: digest} of the files staged so far."""
    return {entry.target: entry.digest for entry in self._entries}

  def record(self) -> Record:
    """What was staged, for `commit` (here or in another process)."""
    return Record(self._entries)

  def abort(self) -> None:
    """Deletes the staged files; the targets stay as they were."""
    abort(self.directory, self.record())
    self._entries = []

  def commit(self, journal_name: str) -> None:
    """Writes the journal, then moves every staged file onto its target.

    If it fails before the journal is written, the staged files are deleted
    (`abort_uncommitted`) and the targets stay as they were.

    Args:
      journal_name: str, the journal's file name in the directory.
    """
    record = self.record()
    self._entries = []
    try:
      commit(self.directory, journal_name, record)
    except BaseException:
      abort_uncommitted(self.directory, journal_name, record)
      raise


def commit(directory: str, journal_name: str, record: Record) -> None:
  """Commits `record`: writes it as the journal, then `roll_forward`.

  A journal of that name still pending is rolled forward first, never
  overwritten. A failure leaves the staged files in place: the caller
  decides (`abort_uncommitted`).

  Args:
    directory: str, the directory of the record's paths.
    journal_name: str, the journal's file name in `directory`.
    record: Record, from `Transaction.record` (or `Record.from_data`).
  """
  roll_forward(directory, journal_name)
  atomic_files.write_json(os.path.join(directory, journal_name),
                          record.to_data())
  roll_forward(directory, journal_name)


def abort_uncommitted(directory: str, journal_name: str,
                      record: Record) -> None:
  """After a failed `commit`: deletes `record`'s staged files unless its
  journal was written (then they are the targets' content). Never raises:
  the caller re-raises the commit's error.
  """
  try:
    journal = pending(directory, journal_name)
    if journal is None or journal.to_data() != record.to_data():
      abort(directory, record)
  except Exception:  # pylint: disable=broad-except
    pass  # Left as temporaries, which the next save deletes.


def abort(directory: str, record: Record) -> None:
  """Deletes the staged files of a `record` not committed, if still there.

  Args:
    directory: str, the directory of the record's paths.
    record: Record, from `Transaction.record` (or `Record.from_data`).
  """
  for entry in record.entries:
    atomic_files.remove_if_exists(join(directory, entry.staged))


def pending(directory: str, journal_name: str) -> Optional[Record]:
  """The record of a journal not yet rolled forward, or None.

  Raises:
    atomic_files.CorruptCheckpointError: If the journal is not a bounded
      regular file holding a well-formed record (see `Record.from_data`).
  """
  path = os.path.join(directory, journal_name)
  try:
    data = atomic_files.read_json(path, _MAX_JOURNAL_BYTES, 'journal')
  except FileNotFoundError:
    return None
  return Record.from_data(data, where=path)


def roll_forward(directory: str, journal_name: str) -> bool:
  """Finishes a committed transaction: staged files onto targets, in order.

  Idempotent (a staged file no longer there was moved already); the
  journal is deleted last.

  Args:
    directory: str, the journal's directory.
    journal_name: str, the journal's file name.

  Returns:
    bool, whether there was a journal to roll forward.

  Raises:
    atomic_files.CorruptCheckpointError: If the journal is malformed (it is
      left in place, and nothing is renamed).
    OSError: If a rename fails (run it again).
  """
  record = pending(directory, journal_name)
  if record is None:
    return False
  for entry in record.entries:
    staged = join(directory, entry.staged)
    if atomic_files.exists(staged):
      atomic_files.replace(staged, join(directory, entry.target))
  atomic_files.remove_if_exists(os.path.join(directory, journal_name))
  return True
