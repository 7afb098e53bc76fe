# coding=utf-8
"""Crash-safe experiment checkpoints, as Dopamine's ``checkpointer``.

Same names and files as ``dopamine.discrete_domains.checkpointer``: each
iteration N has ``ckpt.N`` (the pickled experiment data), the agent's own
files (``tf_ckpt-N.*``, the replay memory's ``*_ckpt.N.gz``, a sharded
memory's ``shard_k/*``) and the marker ``sentinel_checkpoint_complete.N``,
which here lists those files with their sizes and SHA-256 (`verify`). The
Runner's saves stage the agent's files, then `Checkpointer.commit_checkpoint`
switches them, ``ckpt.N`` and the marker in as one `transaction`. What
differs from Dopamine: docs/compat.md#checkpointer.
"""

import json
import os
import pickle
import posixpath
import re
import shutil
import stat
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from absl import logging
import gin
import tensorflow as tf

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import safe_pickle
from dopamine_per.file_io import transaction

__all__ = ['get_latest_checkpoint_number', 'get_complete_checkpoint_numbers',
           'Checkpointer', 'error_summary', 'regular_file_size']

_MARKER_FORMAT = 'dopamine_per.checkpoint_complete/2'

# The largest marker and ``ckpt.N`` read: far above what a run writes.
_MAX_MARKER_BYTES = 1 << 20
_MAX_DATA_BYTES = 1 << 28
# Iteration numbers in marker names: ASCII digits (str.isdigit also takes
# other scripts' digits), no more than an int64 holds.
_ITERATION_NUMBER = re.compile(r'[0-9]{1,18}')
# Lines of TF's graph-error messages that locate the error but do not say
# what it is.
_TF_CONTEXT_LINES = ('Detected at node', 'File "', 'Node:', '[[',
                     'Original stack trace')
# Where the agent writes an iteration's files before `commit_checkpoint`: on
# the checkpoint directory's filesystem (adopting a file is a rename), and
# always the same, so that TF's ``checkpoint`` file (paths relative to
# itself) is right once moved up.
_STAGING_NAME = '.{}_staging'
# The redo journal (`transaction`) of a save switching its files into place.
_JOURNAL_NAME = '{}_journal'
# A file name holding an iteration number: temporaries of such names in the
# checkpoint directory are left by killed saves (`remove_leftovers`).
_ANY_ITERATION = re.compile(r'[.-][0-9]+(\.|$)')


def _sentinel_prefix(sentinel_file_identifier: str) -> str:
  return 'sentinel_{}_complete'.format(sentinel_file_identifier)


def error_summary(error: BaseException) -> str:
  """Returns one line saying why a checkpoint was refused.

  The first informative line of the message (not TF's 'Graph execution
  error:' and where the op was built), cut to 500 characters, after the
  exception's type unless it is a `atomic_files.CheckpointError`.

  Args:
    error: the exception raised while reading the checkpoint.
  """
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  informative = [line for line in lines if not (
      line.endswith('error:') or line.startswith(_TF_CONTEXT_LINES))]
  line = (informative or lines or [''])[0]
  if not isinstance(error, atomic_files.CheckpointError) or not line:
    line = '{}: {}'.format(type(error).__name__, line).rstrip(': ')
  return line if len(line) <= 500 else line[:497] + '...'


def regular_file_size(path: str) -> int:
  """Returns the size of the regular file at `path`, without opening it.

  Args:
    path: str, a local path or a tf.io.gfile URL.

  Returns:
    int, the size in bytes.

  Raises:
    atomic_files.CheckpointError: If nothing is there, or something other
      than a regular file (a directory, a FIFO, a device), which reading
      would fail on, block on, or never finish.
  """
  if atomic_files.is_url(path):
    if not tf.io.gfile.exists(path):
      raise atomic_files.CheckpointError('{} is missing'.format(path))
    if tf.io.gfile.isdir(path):
      raise atomic_files.CheckpointError(
          '{} is not a regular file'.format(path))
    try:
      return tf.io.gfile.stat(path).length
    except tf.errors.OpError as e:
      raise atomic_files.CheckpointError('{}: {}'.format(
          path, error_summary(e))) from e
  try:
    status = os.stat(path)
  except FileNotFoundError:
    raise atomic_files.CheckpointError(
        '{} is missing'.format(path)) from None
  except OSError as e:
    raise atomic_files.CheckpointError('{}: {}'.format(
        path, e.strerror or e)) from e
  if not stat.S_ISREG(status.st_mode):
    raise atomic_files.CheckpointError('{} is not a regular file'.format(path))
  return status.st_size


def _read_file(path: str, limit: int, what: str) -> bytes:
  """`atomic_files.read_file`, with a missing file a CheckpointError."""
  try:
    return atomic_files.read_file(path, limit, what)
  except FileNotFoundError:
    raise atomic_files.CheckpointError(
        '{} is missing'.format(path)) from None


def _belongs_to_iteration(path: str, iteration_number: int) -> bool:
  """Whether `path` names a file of iteration N's checkpoint.

  `path` is relative to the checkpoint directory, '/'-separated,
  normalized and inside it (`transaction.is_relative_path`), with no part
  starting with '.' (temporaries, the staging directory); in its file name
  N stands between a '.' or '-' and a '.' or the end: ``ckpt.N``,
  ``tf_ckpt-N.index``, ``shard_0/add_count_ckpt.N.gz``.
  """
  if not transaction.is_relative_path(path):
    return False
  parts = path.split('/')
  if any(part.startswith('.') for part in parts):
    return False
  return re.search(r'[.-]{}(\.|$)'.format(int(iteration_number)),
                   parts[-1]) is not None


def _walk(directory: str) -> Iterator[Tuple[str, List[str]]]:
  """Yields ('/'-separated path relative to `directory`, file names)."""
  walk = tf.io.gfile.walk if atomic_files.is_url(directory) else os.walk
  for root, _, names in walk(directory):
    relative = os.path.relpath(root, directory)
    yield ('' if relative == '.' else relative.replace(os.sep, '/')), names


def _files_under(directory: str) -> List[str]:
  """The files below `directory`: sorted '/'-separated relative paths."""
  return sorted(posixpath.join(relative, name)
                for relative, names in _walk(directory) for name in names)


def _remove_tree(path: str) -> None:
  """Deletes directory `path` and everything in it, if it exists."""
  if atomic_files.is_url(path):
    if tf.io.gfile.exists(path):
      tf.io.gfile.rmtree(path)
    return
  try:
    shutil.rmtree(path)
  except FileNotFoundError:
    pass


def _stage_written_file(staged: transaction.Transaction, target: str,
                        source: str) -> None:
  """Stages a file the agent wrote: adopted (a rename), or copied (gs://)."""
  if not atomic_files.is_url(source):
    staged.adopt(target, source)
    return

  def copy(f):
    with atomic_files.open_for_reading(source) as original:
      for chunk in iter(lambda: original.read(atomic_files.READ_CHUNK_BYTES),
                        b''):
        f.write(chunk)
  staged.write(target, copy)


def get_complete_checkpoint_numbers(
    base_directory: str,
    sentinel_file_identifier: str = 'checkpoint') -> List[int]:
  """Returns the iteration numbers that have a completion marker, newest first.

  Args:
    base_directory: str, the checkpoint directory.
    sentinel_file_identifier: str, the marker names' identifier.
  """
  prefix = _sentinel_prefix(sentinel_file_identifier) + '.'
  try:
    names = tf.io.gfile.listdir(base_directory)
  except tf.errors.NotFoundError:
    return []
  numbers = []
  for name in names:
    if (name.startswith(prefix) and
        _ITERATION_NUMBER.fullmatch(name[len(prefix):])):
      numbers.append(int(name[len(prefix):]))
  return sorted(numbers, reverse=True)


@gin.configurable
def get_latest_checkpoint_number(base_directory: str,
                                 override_number: Optional[int] = None,
                                 sentinel_file_identifier: str = 'checkpoint'
                                ) -> int:
  """Returns the newest iteration with a completion marker, or -1.

  Args:
    base_directory: str, the checkpoint directory.
    override_number: int or None, returned as is if not None (a gin override).
    sentinel_file_identifier: str, the marker names' identifier.
  """
  if override_number is not None:
    return override_number
  numbers = get_complete_checkpoint_numbers(base_directory,
                                            sentinel_file_identifier)
  return numbers[0] if numbers else -1


def _listed_files(marker: Any, iteration_number: int,
                  marker_path: str) -> Dict[str, atomic_files.FileDigest]:
  """Returns a marker's {path: FileDigest}, after checking its structure.

  Raises:
    atomic_files.CheckpointError: If the marker is not of iteration N, or
      its file list is not {path of one of N's files in the checkpoint
      directory (`_belongs_to_iteration`): [size, sha256]}.
  """
  def malformed(what):
    return atomic_files.CheckpointError(
        '{} is malformed: {}'.format(marker_path, what))

  if marker.get('iteration', iteration_number) != iteration_number:
    raise malformed('it is the marker of iteration {!r}'.format(
        marker.get('iteration')))
  files = marker.get('files')
  if not isinstance(files, dict):
    raise malformed("its 'files' entry is not a dict")
  listed = {}
  for name, digest in files.items():
    if not (isinstance(name, str) and
            _belongs_to_iteration(name, iteration_number)):
      raise malformed('it lists {!r}, which is not a file name of checkpoint '
                      '{}'.format(name, iteration_number)[:300])
    listed[name] = atomic_files.digest_from_data(digest)
    if listed[name] is None:
      raise malformed('the size and SHA-256 of {} are not [int, hex '
                      'digest]'.format(name))
  return listed


@gin.configurable
class Checkpointer(object):
  """Saves and loads the experiment data of each iteration.

  Dopamine's save: the agent writes its files in place, then
  `save_checkpoint`. The Runner's: `begin_checkpoint`, the agent writes
  there, then `commit_checkpoint` (or `abort_checkpoint`).
  """

  def __init__(self, base_directory: str, checkpoint_file_prefix: str = 'ckpt',
               sentinel_file_identifier: str = 'checkpoint',
               checkpoint_frequency: int = 1, checkpoint_duration: int = 4,
               keep_every: Optional[int] = None):
    """Creates the directory if needed.

    Args:
      base_directory: str, the checkpoint directory.
      checkpoint_file_prefix: str, the data files' prefix.
      sentinel_file_identifier: str, the marker names' identifier.
      checkpoint_frequency: int, checkpoint every this many iterations.
      checkpoint_duration: int, checkpoints kept (in units of the frequency).
      keep_every: int or None, never delete iterations that are multiples of
        keep_every * checkpoint_frequency.

    Raises:
      ValueError: If base_directory is empty or cannot be created.
    """
    if not base_directory:
      raise ValueError('No path provided to Checkpointer.')
    self._checkpoint_file_prefix = checkpoint_file_prefix
    self._sentinel_file_prefix = _sentinel_prefix(sentinel_file_identifier)
    self._checkpoint_frequency = checkpoint_frequency
    self._checkpoint_duration = checkpoint_duration
    self._keep_every = keep_every
    self._base_directory = base_directory
    self._staging_directory = os.path.join(
        base_directory, _STAGING_NAME.format(checkpoint_file_prefix))
    self._journal_name = _JOURNAL_NAME.format(checkpoint_file_prefix)
    self._staged_iteration = None  # What `begin_checkpoint` staged for.
    try:
      atomic_files.make_directories(base_directory)
    except (tf.errors.PermissionDeniedError, PermissionError) as e:
      raise ValueError('Unable to create checkpoint path: {}.'.format(
          base_directory)) from e

  def _generate_filename(self, file_prefix: str, iteration_number: int) -> str:
    return os.path.join(self._base_directory,
                        '{}.{}'.format(file_prefix, iteration_number))

  def _is_saved(self, iteration_number: int) -> bool:
    return iteration_number % self._checkpoint_frequency == 0

  # ----------------------------------------------------------------- saving

  def save_checkpoint(self, iteration_number: int, data: Any) -> None:
    """Writes `data` and the completion marker, for files written in place.

    The marker lists the iteration's files found in the directory (it
    cannot tell whose they are); then the stale iteration is pruned.

    Args:
      iteration_number: int, the iteration (skipped unless a multiple of
        checkpoint_frequency).
      data: picklable plain data (see the module docstring).
    """
    if not self._is_saved(iteration_number):
      return
    own = ('{}.{}'.format(self._checkpoint_file_prefix, iteration_number),
           '{}.{}'.format(self._sentinel_file_prefix, iteration_number))
    found = {}
    for name in tf.io.gfile.listdir(self._base_directory):
      path = os.path.join(self._base_directory, name)
      if (name not in own and _belongs_to_iteration(name, iteration_number)
          and not tf.io.gfile.isdir(path)):
        found[name] = atomic_files.file_digest(path)
    self._commit(iteration_number, data,
                 transaction.Transaction(self._base_directory), found)
    self._clean_up_old_checkpoints(iteration_number)

  def begin_checkpoint(self, iteration_number: int) -> Optional[str]:
    """Returns an empty directory for iteration N's files, or None.

    The agent writes its files there (``bundle_and_checkpoint(directory,
    N)``), then `commit_checkpoint(N, data)` switches them in. What an
    interrupted save left there is deleted first.

    Args:
      iteration_number: int, the iteration.

    Returns:
      str, the staging directory; None if N is not a multiple of
      checkpoint_frequency (not saved).
    """
    self._staged_iteration = None
    if not self._is_saved(iteration_number):
      return None
    _remove_tree(self._staging_directory)
    atomic_files.make_directories(self._staging_directory)
    self._staged_iteration = iteration_number
    return self._staging_directory

  def commit_checkpoint(self, iteration_number: int, data: Any) -> None:
    """Switches the staged files, ``ckpt.N`` and the marker in, all at once.

    One `transaction.Transaction` adopts every staged file (subdirectories
    included), then stages ``ckpt.N`` and, last, the marker, which lists
    the transaction's files of iteration N (TF's ``checkpoint`` file moves
    in unlisted). A save that fails or is killed before the journal is
    written leaves a previous checkpoint N as it was; after,
    `finish_interrupted_save` completes it. Then the staging directory goes
    and the stale iteration is pruned by its marker.

    Args:
      iteration_number: int, the iteration `begin_checkpoint` was given.
      data: picklable plain data (see the module docstring).

    Raises:
      ValueError: If `begin_checkpoint` was not called for this iteration.
      Whatever pickling `data` or the filesystem raises; a previous
        checkpoint N is then unchanged.
    """
    if self._staged_iteration != iteration_number:
      raise ValueError('commit_checkpoint({0}) without begin_checkpoint({0})'
                       ': nothing is staged for it'.format(iteration_number))
    self._staged_iteration = None
    staged = transaction.Transaction(self._base_directory)
    try:
      for path in _files_under(self._staging_directory):
        _stage_written_file(staged, path,
                            transaction.join(self._staging_directory, path))
    except BaseException:
      staged.abort()
      raise
    self._commit(iteration_number, data, staged, {})
    _remove_tree(self._staging_directory)
    self._clean_up_old_checkpoints(iteration_number)

  def abort_checkpoint(self) -> None:
    """Gives up the save `begin_checkpoint` staged: its directory goes."""
    self._staged_iteration = None
    _remove_tree(self._staging_directory)

  def _commit(self, iteration_number: int, data: Any,
              staged: transaction.Transaction,
              found: Mapping[str, atomic_files.FileDigest]) -> None:
    """Adds ``ckpt.N`` and the marker (`staged`'s and `found`'s files of
    iteration N) to `staged`, then commits it."""
    data_name = '{}.{}'.format(self._checkpoint_file_prefix, iteration_number)
    marker_name = '{}.{}'.format(self._sentinel_file_prefix, iteration_number)
    try:
      payload = pickle.dumps(data, protocol=4)
      staged.write(data_name, lambda f: f.write(payload))
      files = dict(found)
      files.update((path, digest) for path, digest in staged.digests.items()
                   if _belongs_to_iteration(path, iteration_number))
      encoded = json.dumps({
          'format': _MARKER_FORMAT, 'iteration': int(iteration_number),
          'files': {path: list(digest) for path, digest in files.items()}},
                           indent=1, sort_keys=True).encode('utf-8')
      # Staged last, so moved into place last: until then a reader that
      # does not roll the journal forward sees the previous marker, which
      # refuses the files already replaced.
      staged.write(marker_name, lambda f: f.write(encoded))
    except BaseException:
      staged.abort()
      raise
    # Rolls a pending journal forward first; aborts if it writes no journal.
    staged.commit(self._journal_name)

  def _clean_up_old_checkpoints(self, iteration_number: int) -> None:
    """Deletes the stale iteration's marker, then ``ckpt.N`` and its list.

    A marker that lists nothing (Dopamine's) or cannot be read takes only
    ``ckpt.N`` along: other files cannot be told from someone else's.
    """
    stale = iteration_number - (self._checkpoint_frequency *
                                self._checkpoint_duration)
    if stale < 0:
      return
    if (self._keep_every is not None and
        stale % (self._keep_every * self._checkpoint_frequency) == 0):
      return
    marker_path = self._generate_filename(self._sentinel_file_prefix, stale)
    listed = {}
    if atomic_files.exists(marker_path):
      try:
        listed = self._listed_files_of(stale) or {}
      except atomic_files.CheckpointError as e:
        logging.warning('Deleting checkpoint %d, whose marker is unusable '
                        '(%s): its files other than %s.%d are left.', stale,
                        error_summary(e), self._checkpoint_file_prefix, stale)
    # The marker goes first: a half-deleted checkpoint is never complete.
    atomic_files.remove_if_exists(marker_path)
    for path in ['{}.{}'.format(self._checkpoint_file_prefix, stale)] + sorted(
        listed):
      atomic_files.remove_if_exists(
          transaction.join(self._base_directory, path))

  # ------------------------------------------------- after a killed save

  def finish_interrupted_save(self) -> bool:
    """Finishes a save killed after its commit point, before any reading.

    Its staged files are moved onto their targets
    (`transaction.roll_forward`, idempotent): checkpoint N is the new one.

    Returns:
      bool, whether there was such a save.

    Raises:
      atomic_files.CorruptCheckpointError: If the journal is malformed
        (nothing is moved then).
      OSError: If a rename fails (call it again).
    """
    return transaction.roll_forward(self._base_directory, self._journal_name)

  def remove_leftovers(self) -> List[str]:
    """Deletes what killed saves left, once a committed one is finished.

    A save killed after its commit point is finished first
    (`finish_interrupted_save`, may raise). Then the staging directory goes,
    and below the checkpoint directory the temporaries
    (`atomic_files.remove_temporaries`) of names with an iteration number,
    of TF's ``checkpoint`` file and of the journal; nothing else.

    Returns:
      list of str, the paths deleted (the staging directory included).
    """
    self.finish_interrupted_save()
    removed = []
    if atomic_files.exists(self._staging_directory):
      _remove_tree(self._staging_directory)
      removed.append(self._staging_directory)

    def is_target(name):
      return (name in ('checkpoint', self._journal_name) or
              _ANY_ITERATION.search(name) is not None)

    for relative, _ in list(_walk(self._base_directory)):
      removed += atomic_files.remove_temporaries(
          transaction.join(self._base_directory, relative), is_target)
    return removed

  # ---------------------------------------------------------------- loading

  def _listed_files_of(self, iteration_number: int
                      ) -> Optional[Dict[str, atomic_files.FileDigest]]:
    """Reads iteration N's marker: {path: digest}, None for Dopamine's.

    Raises:
      atomic_files.CheckpointError: If the marker is missing, not a bounded
        regular file, or malformed.
    """
    marker_path = self._generate_filename(self._sentinel_file_prefix,
                                          iteration_number)
    content = _read_file(marker_path, _MAX_MARKER_BYTES, 'completion marker')
    try:
      marker = json.loads(content.decode('utf-8'))
    except (ValueError, RecursionError):  # ValueError: also Unicode errors.
      marker = None
    if not isinstance(marker, dict) or marker.get('format') != _MARKER_FORMAT:
      if content.strip() in (b'done', b''):
        return None  # Dopamine's marker: lists nothing.
      raise atomic_files.CheckpointError(
          '{} is neither a completion marker of ours nor '
          "Dopamine's".format(marker_path))
    return _listed_files(marker, iteration_number, marker_path)

  def verify(self, iteration_number: int) -> None:
    """Checks iteration_number's marker and the files it lists.

    Checks each listed file's type, size and SHA-256; a Dopamine marker
    (``done``) lists nothing and passes.

    Args:
      iteration_number: int, the iteration.

    Raises:
      atomic_files.CheckpointError: Naming the file and why: the marker is
        missing, unreadable or malformed; a listed file is missing, not a
        regular file, or changed since the checkpoint was written.
    """
    listed = self._listed_files_of(iteration_number) or {}
    for name, digest in listed.items():
      path = transaction.join(self._base_directory, name)
      size = regular_file_size(path)
      if size != digest.size or atomic_files.file_digest(path) != digest:
        raise atomic_files.CheckpointError(
            '{} changed since the checkpoint was written ({} bytes, '
            'recorded {} bytes{})'.format(
                path, size, digest.size,
                ', another SHA-256' if size == digest.size else ''))

  def is_complete(self, iteration_number: int) -> bool:
    """Returns whether iteration_number's marker exists and its files match.

    A checkpoint with a marker that fails `verify` is logged with the reason.

    Args:
      iteration_number: int, the iteration.
    """
    if not tf.io.gfile.exists(self._generate_filename(
        self._sentinel_file_prefix, iteration_number)):
      return False
    try:
      self.verify(iteration_number)
    except atomic_files.CheckpointError as e:
      logging.warning('Checkpoint %d is not usable: %s', iteration_number, e)
      return False
    return True

  def _load_data(self, iteration_number: int) -> Any:
    path = self._generate_filename(self._checkpoint_file_prefix,
                                   iteration_number)
    return safe_pickle.restricted_loads(
        _read_file(path, _MAX_DATA_BYTES, 'experiment data file'),
        filename=path)

  def load_checkpoint(self, iteration_number: int) -> Optional[Any]:
    """Returns the data saved for iteration_number, or None.

    None when the checkpoint is not complete (see `is_complete`) or its data
    file is missing (Dopamine's contract; `load_verified_checkpoint` says
    why instead).

    Args:
      iteration_number: int, the iteration.

    Raises:
      atomic_files.CheckpointError: If the data file is corrupt, not a
        regular file, too large, or holds more than plain data.
    """
    if not self.is_complete(iteration_number):
      return None
    if not tf.io.gfile.exists(self._generate_filename(
        self._checkpoint_file_prefix, iteration_number)):
      return None
    return self._load_data(iteration_number)

  def load_verified_checkpoint(self, iteration_number: int) -> Any:
    """Returns the data of iteration_number, after `verify`.

    Args:
      iteration_number: int, the iteration.

    Raises:
      atomic_files.CheckpointError: If the checkpoint fails `verify`, or
        its data file is missing, not a regular file, too large, corrupt, or
        holds more than plain data; the message names the file.
    """
    self.verify(iteration_number)
    return self._load_data(iteration_number)
