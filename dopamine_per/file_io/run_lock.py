# coding=utf-8
"""One trainer per run directory: an exclusive kernel lock on the directory.

A `RunDirectoryLock` holds ``flock(LOCK_EX)`` on the file `LOCK_FILENAME`
in the run's directory and writes into it who holds it. A second lock on
the same directory, from any process, is refused at once with
`RunDirectoryLockedError`, which names the holder. The lock goes away with
its process however it ends, so it is never stale, and its descriptor is
close-on-exec. `release` deletes the file while still holding the lock;
`acquire` checks that the file it locked is still the one under the name.
Where the filesystem cannot lock, and for paths with a URL scheme, nothing
is locked: `acquire` logs one warning and returns False. Details:
docs/reliability.md.
"""

import datetime
import errno
import fcntl
import json
import os
import socket
import stat
from typing import Optional

from absl import logging

from dopamine_per.file_io import atomic_files

__all__ = ['LOCK_FILENAME', 'RunDirectoryLockedError', 'RunDirectoryLock']

# The lock file in the run directory.
LOCK_FILENAME = '.dopamine_per_lock'
# What `flock` fails with where the filesystem cannot lock.
_CANNOT_LOCK = frozenset(
    code for code in (getattr(errno, name, None) for name in (
        'ENOLCK', 'EOPNOTSUPP', 'ENOTSUP', 'ENOSYS', 'EINVAL'))
    if code is not None)
# What `flock(LOCK_NB)` fails with while another descriptor holds the lock
# (EACCES: Python emulates flock with fcntl's F_SETLK where the system has no
# flock, and POSIX lets F_SETLK fail with it).
_HELD = frozenset((errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES))
# The holder's note is a line of JSON, far shorter than this.
_MAX_NOTE_BYTES = 4096
# Times the lock file may be deleted under `acquire` before it gives up.
_MAX_ATTEMPTS = 100


class RunDirectoryLockedError(RuntimeError):
  """Another process (or lock object) holds the run directory's lock.

  Attributes:
    directory: str, the run directory.
    pid: int or None, the holder's process id (None if it did not say).
    host: str or None, the holder's host name.
    since: str or None, when it took the lock (ISO 8601, local time).
  """

  def __init__(self, directory: str, pid: Optional[int],
               host: Optional[str], since: Optional[str]):
    self.directory = directory
    self.pid = pid
    self.host = host
    self.since = since
    if pid is None:
      holder = 'another process, which did not say which'
    else:
      holder = 'pid {} on host {}{}'.format(
          pid, host or '(unknown)', ', since {}'.format(since) if since
          else '')
    super().__init__(
        '{} is in use by another trainer ({}); wait for it to end or use '
        'another directory'.format(directory, holder))


def _holder_note() -> bytes:
  """This process's note for the lock file: one line of JSON."""
  return (json.dumps({
      'pid': os.getpid(),
      'host': socket.gethostname(),
      'since': datetime.datetime.now().isoformat(timespec='seconds'),
  }, sort_keys=True) + '\n').encode('utf-8')


def _read_note(fd: int) -> Optional[dict]:
  """The holder's note as a dict of pid, host and since, read once.

  The file is another process's: anything in it is tolerated (None).
  """
  try:
    note = json.loads(os.pread(fd, _MAX_NOTE_BYTES, 0).decode('utf-8'))
  except (OSError, ValueError, RecursionError):
    return None
  if not isinstance(note, dict):
    return None
  pid = note.get('pid')
  if isinstance(pid, bool) or not isinstance(pid, int):
    return None

  def text(key):
    value = note.get(key)
    return value[:200] if isinstance(value, str) else None

  return {'pid': pid, 'host': text('host'), 'since': text('since')}


class RunDirectoryLock(object):
  """An exclusive lock on a run directory, for the life of its holder.

  Use it as a context manager (``with RunDirectoryLock(base_dir):``), or
  call `acquire` and `release`.

  Attributes:
    directory: str, the run directory.
    path: str, the lock file in it.
  """

  def __init__(self, directory: str):
    """Names the directory; nothing is created or locked yet.

    Args:
      directory: str, the run directory (it need not exist yet).

    Raises:
      ValueError: If directory is empty.
    """
    if not directory:
      raise ValueError('directory must be a non-empty path, got {!r}'.format(
          directory))
    self.directory = directory
    self.path = os.path.join(directory, LOCK_FILENAME)
    self._fd: Optional[int] = None

  @property
  def locked(self) -> bool:
    """Whether this object holds the lock."""
    return self._fd is not None

  def acquire(self) -> bool:
    """Creates the directory if needed and takes the lock, without waiting.

    Returns:
      bool: True if the lock is held; False if the path has a URL scheme or
      its filesystem cannot lock (one warning logged; nothing is held, and
      nothing is left in the directory).

    Raises:
      RunDirectoryLockedError: If another process, or another lock object
        of this one, holds it (nothing was changed: an existing directory
        and lock file are only opened).
      RuntimeError: If this object already holds it.
      OSError: If the directory cannot be created or the lock file cannot
        be opened (e.g. it is a directory, or a symbolic link).
    """
    if self._fd is not None:
      raise RuntimeError('{} is already locked by this object'.format(
          self.directory))
    if atomic_files.is_url(self.directory):
      logging.warning('%s cannot be locked (a URL): make sure that no other '
                      'trainer uses it at the same time.', self.directory)
      return False
    os.makedirs(self.directory, exist_ok=True)
    for _ in range(_MAX_ATTEMPTS):
      fd = self._open()
      try:
        if not self._lock(fd):
          os.close(fd)
          atomic_files.remove_if_exists(self.path)
          return False
        if self._is_current(fd):
          os.ftruncate(fd, 0)
          os.pwrite(fd, _holder_note(), 0)
          self._fd = fd
          return True
      except BaseException:
        os.close(fd)
        raise
      # The holder deleted the file between our open and our lock.
      os.close(fd)
    raise OSError(errno.EAGAIN, 'the lock file was replaced {} times while '
                  'locking it'.format(_MAX_ATTEMPTS), self.path)

  def _open(self) -> int:
    """Opens (or creates) the lock file; the descriptor is not inherited."""
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC |
                 getattr(os, 'O_NOFOLLOW', 0) | getattr(os, 'O_NONBLOCK', 0),
                 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
      os.close(fd)
      raise OSError(errno.EINVAL, 'not a regular file', self.path)
    return fd

  def _lock(self, fd: int) -> bool:
    """Locks `fd`: True; False (warned) where the filesystem cannot lock.

    Raises:
      RunDirectoryLockedError: If another descriptor holds the lock.
    """
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      return True
    except OSError as e:
      if e.errno in _HELD:
        note = _read_note(fd) or {}
        raise RunDirectoryLockedError(self.directory, note.get('pid'),
                                      note.get('host'),
                                      note.get('since')) from None
      if e.errno not in _CANNOT_LOCK:
        raise
      logging.warning('%s cannot be locked: its filesystem does not support '
                      'locks (%s); make sure that no other trainer uses it '
                      'at the same time.', self.directory,
                      e.strerror or e)
      return False

  def _is_current(self, fd: int) -> bool:
    """Whether the locked `fd` is still the file under the lock's name."""
    try:
      named = os.stat(self.path, follow_symlinks=False)
    except FileNotFoundError:
      return False
    opened = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)

  def release(self) -> None:
    """Deletes the lock file and releases the lock; idempotent.

    A file that replaced the locked one under its name (by hand) is left.
    """
    if self._fd is None:
      return
    fd, self._fd = self._fd, None
    try:
      # Deleted while still locked: see the module's docstring.
      if self._is_current(fd):
        atomic_files.remove_if_exists(self.path)
    finally:
      os.close(fd)

  def __enter__(self) -> 'RunDirectoryLock':
    """Acquires the lock (see `acquire`); returns this object."""
    self.acquire()
    return self

  def __exit__(self, *unused_exc_info) -> None:
    self.release()
