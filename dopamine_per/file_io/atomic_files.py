# coding=utf-8
"""Atomic writing and safe, bounded reading of files, and their errors.

* `atomic_write` writes a temporary file beside the target, fsyncs it and
  renames it into place, so a crash never leaves a half-written file under
  the final name; `stage_write` and `replace` are its two halves, for
  `transaction`. A killed writer's temporary is found by
  `remove_temporaries`. New files get the mode a plain ``open`` gives.
* `FileDigest`: the size and SHA-256 `atomic_write` returns;
  `open_for_reading` checks a file against one as it is read.
* Only regular files are read, never blocking on a FIFO or device.
* A file that cannot be used raises `CheckpointError` naming it; a missing
  one `CheckpointNotFoundError` (`not_found_error`).

Paths with a URL scheme (``gs://``, ``ram://``) go through ``tf.io.gfile``,
TensorFlow being imported only then. How this differs from Dopamine, which
writes files in place: docs/compat.md#file_io.
"""

import collections
import contextlib
import errno
import functools
import hashlib
import json
import os
import re
import secrets
import stat
import sys
from typing import Any, BinaryIO, Callable, Iterator, List, Optional, Tuple

from dopamine_per import errors

__all__ = ['CheckpointError', 'CorruptCheckpointError',
           'CheckpointNotFoundError', 'not_found_error', 'READ_CHUNK_BYTES',
           'describe_error', 'refusing', 'is_url', 'exists', 'make_directories',
           'list_directory', 'remove_if_exists', 'FileDigest',
           'digest_from_data', 'file_digest', 'read_file', 'read_json',
           'write_json', 'open_for_reading', 'create_temporary', 'StagedFile',
           'stage_write', 'replace', 'atomic_write', 'is_temporary_of',
           'remove_temporaries']

# Bytes read per call when hashing a file or filling an array from one.
READ_CHUNK_BYTES = 1 << 24

_URL = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*://')


class CheckpointError(ValueError):
  """A checkpoint file that cannot be used (base class of this package's)."""


class CorruptCheckpointError(CheckpointError):
  """A checkpoint file that is truncated, corrupt or of the wrong layout."""


class CheckpointNotFoundError(FileNotFoundError, CheckpointError):
  """A missing checkpoint file; raise it with `not_found_error`.

  Attributes:
    filename: str or None, the missing file.
  """

  def __init__(self, message: str, filename: Optional[str] = None):
    super().__init__(message)
    self.errno = errno.ENOENT
    self.filename = filename

  def __str__(self) -> str:
    return str(self.args[0]) if self.args else ''

  def __reduce__(self):
    # Rebuilt by `not_found_error` where it is unpickled (a Ray shard's error
    # reaching the learner): a TensorFlow error there if TensorFlow is.
    return not_found_error, (str(self), self.filename)


@functools.lru_cache(maxsize=None)
def _tf_not_found_error_class() -> type:
  """CheckpointNotFoundError that is also a tf.errors.NotFoundError."""
  tf_not_found = sys.modules['tensorflow'].errors.NotFoundError

  class TfCheckpointNotFoundError(CheckpointNotFoundError, tf_not_found):
    """A missing checkpoint file, built as TensorFlow's errors are."""

    def __init__(self, node_def, op, message: str, *args):
      tf_not_found.__init__(self, node_def, op, message, *args)
      # Last: TensorFlow's __init__ leaves Exception.args empty.
      CheckpointNotFoundError.__init__(self, message)

  TfCheckpointNotFoundError.__module__ = __name__
  TfCheckpointNotFoundError.__qualname__ = 'TfCheckpointNotFoundError'
  return TfCheckpointNotFoundError


def not_found_error(message: str, filename: Optional[str] = None
                   ) -> CheckpointNotFoundError:
  """The error for a missing checkpoint file; never imports TensorFlow.

  Where TensorFlow is loaded the error is also a `tf.errors.NotFoundError`,
  which Dopamine's callers catch (its memories' `load` raises one);
  elsewhere it is a plain `CheckpointNotFoundError`.

  Args:
    message: str, what is missing.
    filename: optional str, the missing file.

  Returns:
    CheckpointNotFoundError (a FileNotFoundError and a CheckpointError).
  """
  if 'tensorflow' in sys.modules:
    error = _tf_not_found_error_class()(None, None, message)
  else:
    error = CheckpointNotFoundError(message)
  error.filename = filename
  return error


def describe_error(error: BaseException) -> str:
  """'Type: message' of an error, cut to 200 characters; never raises."""
  try:
    text = str(error)
  except Exception:  # pylint: disable=broad-except
    text = ''
  text = text if len(text) <= 200 else text[:197] + '...'
  return '{}: {}'.format(type(error).__name__, text) if text else (
      type(error).__name__)


@contextlib.contextmanager
def refusing(path: str) -> Iterator[None]:
  """Turns any error inside the `with` into a CorruptCheckpointError.

  `CheckpointError`s pass unchanged; so do exceptions that are not
  `Exception`s (KeyboardInterrupt).

  Args:
    path: str, the file (or a description of it) named in the error.

  Raises:
    CorruptCheckpointError: chained to the original error.
  """
  try:
    yield
  except CheckpointError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise CorruptCheckpointError('{}: unusable: {}'.format(
        path, describe_error(e))) from e


# ------------------------------------------------------------------- paths


def is_url(path: str) -> bool:
  """Whether `path` has a URL scheme (``gs://``, ``ram://``): tf.io.gfile's."""
  return bool(_URL.match(path))


def _gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.io.gfile


def exists(path: str) -> bool:
  """Returns whether `path` (a file or a directory) exists."""
  if is_url(path):
    return bool(_gfile().exists(path))
  return os.path.exists(path)


def make_directories(path: str) -> None:
  """Creates directory `path` and its missing parents; an existing one is fine.

  Local directories get 0777 less the umask (``tf.io.gfile.makedirs`` would
  create them 0755 whatever the umask).

  Raises:
    OSError: If it cannot be created (e.g. PermissionError), or a file is in
      its place (FileExistsError).
  """
  if is_url(path):
    _gfile().makedirs(path)
    return
  os.makedirs(path, exist_ok=True)


def list_directory(path: str) -> list:
  """Returns the names in directory `path` ([] if it does not exist)."""
  if is_url(path):
    gfile = _gfile()
    return list(gfile.listdir(path)) if gfile.exists(path) else []
  try:
    return os.listdir(path)
  except FileNotFoundError:
    return []


def remove_if_exists(path: str) -> bool:
  """Deletes the file at `path` if there is one; returns whether it did."""
  if is_url(path):
    gfile = _gfile()
    if not gfile.exists(path):
      return False
    gfile.remove(path)
    return True
  try:
    os.remove(path)
  except FileNotFoundError:
    return False
  return True


def _fsync_directory(directory: str) -> None:
  """Flushes a directory entry to disk where the OS allows it."""
  try:
    fd = os.open(directory, os.O_RDONLY)
  except OSError:
    return  # E.g. Windows: directories cannot be opened.
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


# ----------------------------------------------------------------- digests

# The size in bytes and SHA-256 (hex) of a file as written.
FileDigest = collections.namedtuple('FileDigest', ['size', 'sha256'])

_SHA256 = re.compile('[0-9a-f]{64}')


def digest_from_data(value: Any, container: type = list
                    ) -> Optional[FileDigest]:
  """A FileDigest from its stored form, or None if `value` is not one.

  Args:
    value: what a journal or state file holds for one file: a `container`
      of a size (an int >= 0, not a bool) and a SHA-256 (64 lowercase hex).
    container: type, the exact type the pair must have (list in JSON, tuple
      in a pickle).
  """
  # Exact types: a bool is an int, and a list where a tuple belongs is not
  # what this package wrote.
  # pylint: disable=unidiomatic-typecheck
  if not (type(value) is container and len(value) == 2):
    return None
  size, sha256 = value
  if (type(size) is not int or size < 0 or not isinstance(sha256, str) or
      not _SHA256.fullmatch(sha256)):
    return None
  return FileDigest(size, sha256)


class _HashingWriter(object):
  """A write-only file object that hashes and counts what passes through."""

  def __init__(self, file: BinaryIO):
    self._file = file
    self._hash = hashlib.sha256()
    self.size = 0

  def write(self, data) -> int:
    self._hash.update(data)
    self.size += memoryview(data).nbytes
    self._file.write(data)
    return memoryview(data).nbytes

  def flush(self) -> None:
    self._file.flush()

  def digest(self) -> FileDigest:
    return FileDigest(self.size, self._hash.hexdigest())


class _VerifyingReader(object):
  """A read-only file object that checks the bytes read against a digest."""

  def __init__(self, file: BinaryIO, expected: FileDigest, path: str):
    self._file = file
    self._expected = FileDigest(*expected)
    self._path = path
    self._hash = hashlib.sha256()
    self._size = 0

  def read(self, size: int = -1) -> bytes:
    data = self._file.read(size)
    self._hash.update(data)
    self._size += len(data)
    return data

  def verify(self) -> None:
    """Reads what is left and compares; raises CorruptCheckpointError."""
    while self.read(READ_CHUNK_BYTES):
      pass
    if (self._size, self._hash.hexdigest()) != tuple(self._expected):
      raise CorruptCheckpointError(
          '{}: size or checksum differs from the one recorded when the '
          'checkpoint was written ({} bytes, sha256 {}...; recorded {} bytes, '
          'sha256 {}...).'.format(self._path, self._size,
                                  self._hash.hexdigest()[:12],
                                  self._expected.size,
                                  self._expected.sha256[:12]))


# ----------------------------------------------------------------- reading


def _file_kind(mode: int) -> str:
  for test, kind in ((stat.S_ISDIR, 'a directory'), (stat.S_ISFIFO, 'a FIFO'),
                     (stat.S_ISCHR, 'a character device'),
                     (stat.S_ISBLK, 'a block device'),
                     (stat.S_ISSOCK, 'a socket')):
    if test(mode):
      return kind
  return 'not a regular file'


def _open_regular(path: str) -> BinaryIO:
  """Opens local file `path` for reading if it is a regular file.

  The name is checked first, so a device is never opened; the open does not
  block (a FIFO's would wait for a writer), and the descriptor must be the
  file checked. Raises FileNotFoundError or CorruptCheckpointError.
  """
  try:
    named = os.stat(path)
    if not stat.S_ISREG(named.st_mode):
      raise CorruptCheckpointError(
          '{}: is {}, not a regular file; refusing to read it.'.format(
              path, _file_kind(named.st_mode)))
    fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NONBLOCK', 0) |
                 getattr(os, 'O_BINARY', 0))
    try:
      opened = os.fstat(fd)
      if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
        raise CorruptCheckpointError(
            '{}: replaced while being opened; refusing to read it.'.format(
                path))
      return os.fdopen(fd, 'rb')
    except BaseException:
      os.close(fd)
      raise
  except (FileNotFoundError, CheckpointError):
    raise
  except OSError as e:
    raise CorruptCheckpointError('{}: cannot be opened: {}'.format(
        path, e)) from e


def _open_file(path: str) -> BinaryIO:
  """Opens a file for reading: local paths as regular files only."""
  if not is_url(path):
    return _open_regular(path)
  gfile = _gfile()
  if not gfile.exists(path):
    # As a local path (tf.io.gfile would raise its NotFoundError on read).
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
  if gfile.isdir(path):
    raise CorruptCheckpointError(
        '{}: is a directory, not a file; refusing to read it.'.format(path))
  return gfile.GFile(path, 'rb')


def read_file(path: str, limit: int, what: str = 'checkpoint file') -> bytes:
  """Returns the whole content of a file of at most `limit` bytes.

  Args:
    path: str, the file.
    limit: int, the largest size accepted.
    what: str, what the file is, for the error message.

  Returns:
    bytes, the file's content.

  Raises:
    FileNotFoundError: If the file does not exist.
    CorruptCheckpointError: If it is not a regular file, is larger than
      `limit`, or cannot be read.
  """
  try:
    with _open_file(path) as f:
      data = f.read(limit + 1)
  except (FileNotFoundError, CheckpointError):
    raise
  except Exception as e:  # pylint: disable=broad-except
    # OSError locally; tf.errors.OpError through tf.io.gfile.
    raise CorruptCheckpointError('{}: cannot be read: {}'.format(
        path, errors.describe(e, 200))) from e
  if len(data) > limit:
    raise CorruptCheckpointError('{}: larger than any {} ({} bytes).'.format(
        path, what, limit))
  return data


def read_json(path: str, limit: int, what: str) -> Any:
  """Returns the JSON value a file of at most `limit` bytes holds.

  Raises:
    FileNotFoundError: If the file does not exist.
    CorruptCheckpointError: As `read_file`, or if it does not hold JSON
      (invalid UTF-8, nesting deep enough to exhaust the stack included).
  """
  content = read_file(path, limit, what)
  with refusing(path):
    return json.loads(content.decode('utf-8'))


def write_json(path: str, data: Any) -> FileDigest:
  """Writes `data` as JSON to `path`, atomically (`atomic_write`)."""
  encoded = json.dumps(data, indent=0, sort_keys=True).encode('utf-8')
  return atomic_write(path, lambda f: f.write(encoded))


@contextlib.contextmanager
def open_for_reading(path: str, expected: Optional[FileDigest] = None
                    ) -> Iterator[BinaryIO]:
  """Opens a file for reading; with `expected`, checks it at the `with`'s end.

  Args:
    path: str, the file (local paths: regular files only).
    expected: optional FileDigest the file must match.

  Yields:
    A binary file object with a ``read`` method.

  Raises:
    FileNotFoundError: If the file does not exist.
    CorruptCheckpointError: If it is not a regular file, or does not match
      `expected`.
  """
  with _open_file(path) as raw:
    if expected is None:
      yield raw
      return
    reader = _VerifyingReader(raw, expected, path)
    yield reader
    reader.verify()


def file_digest(path: str) -> FileDigest:
  """Returns the size and SHA-256 of the file at `path`, read in chunks.

  Raises:
    FileNotFoundError: If the file does not exist.
    CorruptCheckpointError: If `path` is not a regular file.
  """
  digest = hashlib.sha256()
  size = 0
  with _open_file(path) as f:
    while True:
      chunk = f.read(READ_CHUNK_BYTES)
      if not chunk:
        return FileDigest(size, digest.hexdigest())
      digest.update(chunk)
      size += len(chunk)


# ----------------------------------------------------------------- writing

# `atomic_write`'s temporaries: '.{name}.{8 random characters}.tmp' beside
# the target, '{name}.tmp-{12 hex digits}' for tf.io.gfile paths.
_TEMP_CHARACTERS = 'abcdefghijklmnopqrstuvwxyz0123456789_'
_LOCAL_TEMPORARY = re.compile(r'^\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp$')
_GFILE_TEMPORARY = re.compile(r'^(?P<target>.+)\.tmp-[0-9a-f]{12}$')


def is_temporary_of(name: str, target: str) -> bool:
  """Whether file name `name` is an `atomic_write` temporary of `target`."""
  for pattern in (_LOCAL_TEMPORARY, _GFILE_TEMPORARY):
    match = pattern.match(name)
    if match and match.group('target') == target:
      return True
  return False


def remove_temporaries(directory: str, is_target: Callable[[str], bool]
                      ) -> List[str]:
  """Deletes temporary files of `atomic_write` left by killed writers.

  Only regular files named as `atomic_write` names its temporaries, for a
  target name that `is_target` accepts, are deleted: a user's other files
  are never touched. Call it only while no other process writes those
  targets, and after any pending `transaction` journal of the directory is
  rolled forward (its staged files are such temporaries).

  Args:
    directory: str, the directory written to.
    is_target: callable taking a file name (no directory) and returning
      whether temporaries of that name are the caller's.

  Returns:
    list of str, the paths deleted.
  """
  pattern = _GFILE_TEMPORARY if is_url(directory) else _LOCAL_TEMPORARY
  removed = []
  for name in list_directory(directory):
    match = pattern.match(name)
    if not match or not is_target(match.group('target')):
      continue
    path = os.path.join(directory, name)
    if not is_url(path):
      try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
          continue
      except FileNotFoundError:
        continue
    if remove_if_exists(path):
      removed.append(path)
  return removed


def create_temporary(path: str) -> Tuple[int, str]:
  """Creates a new temporary file beside local file `path`: (fd, its path).

  Named as `remove_temporaries` recognizes, not inherited by child
  processes, and created as `open` creates a file (0666 less the umask), not
  0600 as `tempfile.mkstemp` would: a checkpoint or log gets the permissions
  the user's other files get.
  """
  directory, base = os.path.split(os.path.abspath(path))
  flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, 'O_BINARY', 0) |
           getattr(os, 'O_CLOEXEC', 0) | getattr(os, 'O_NOFOLLOW', 0))
  while True:
    suffix = ''.join(secrets.choice(_TEMP_CHARACTERS) for _ in range(8))
    temp_path = os.path.join(directory, '.{}.{}.tmp'.format(base, suffix))
    try:
      return os.open(temp_path, flags, 0o666), temp_path
    except FileExistsError:
      continue


# A file written in full and flushed to disk under a temporary name beside
# its target, which it has not replaced yet: `path`, the temporary file;
# `digest`, its FileDigest.
StagedFile = collections.namedtuple('StagedFile', ['path', 'digest'])


def stage_write(path: str, write: Callable[[BinaryIO], None]) -> StagedFile:
  """Writes what `path` should hold to a temporary file beside it, on disk.

  The first half of `atomic_write`: `path` is not touched; `write` fills a
  new temporary file, which is then fsync'ed (deleted if `write` raises).

  Args:
    path: str, the destination file.
    write: callable taking a writable binary file object.

  Returns:
    StagedFile: the temporary file and the digest of the bytes.

  Raises:
    Whatever `write` or the filesystem raises.
  """
  url = is_url(path)
  if url:
    temp_path = '{}.tmp-{}'.format(path, os.urandom(6).hex())
    opened = _gfile().GFile(temp_path, 'wb')
  else:
    fd, temp_path = create_temporary(path)
    opened = os.fdopen(fd, 'wb')
  try:
    with opened as f:
      hashing = _HashingWriter(f)
      write(hashing)
      if not url:
        f.flush()
        os.fsync(f.fileno())
  except BaseException:
    _remove_quietly(temp_path)
    raise
  return StagedFile(temp_path, hashing.digest())


def _remove_quietly(path: str) -> None:
  """Deletes a temporary file after a failure, which it never hides."""
  try:
    remove_if_exists(path)
  except Exception:  # pylint: disable=broad-except
    pass


def replace(source: str, destination: str) -> None:
  """Renames file `source` onto `destination`, replacing it, atomically.

  Locally ``os.replace`` (both in one filesystem), then the destination's
  directory is fsync'ed; tf.io.gfile paths are renamed as atomically as
  their filesystem allows.
  """
  if is_url(destination):
    _gfile().rename(source, destination, overwrite=True)
    return
  os.replace(source, destination)
  _fsync_directory(os.path.dirname(os.path.abspath(destination)))


def atomic_write(path: str, write: Callable[[BinaryIO], None]) -> FileDigest:
  """Writes a file so that `path` holds either the old or the new content.

  `stage_write`, then `replace`. If anything fails, the temporary file is
  deleted and `path` is untouched.

  Args:
    path: str, the destination file.
    write: callable taking a writable binary file object.

  Returns:
    FileDigest of the bytes written.

  Raises:
    Whatever `write` or the filesystem raises.
  """
  staged = stage_write(path, write)
  try:
    replace(staged.path, path)
  except BaseException:
    _remove_quietly(staged.path)
    raise
  return staged.digest
