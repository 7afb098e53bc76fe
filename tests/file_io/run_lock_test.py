"""One trainer per run directory: `run_lock` (docs/reliability.md).

The trainer's side (two trainers on one --base_dir) is in
tests/discrete_domains/train_test.py.
"""

import errno
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from unittest import mock

from absl.testing import absltest

from dopamine_per.file_io import run_lock
from tests.support import fixtures

# Bounds every wait on a subprocess (a Python start and an import).
_TIMEOUT_SECONDS = 60
# A process that takes the lock, says so, and waits for its stdin to close.
_HOLDER = textwrap.dedent('''
    import sys
    from dopamine_per.file_io import run_lock
    lock = run_lock.RunDirectoryLock(sys.argv[1])
    print('locked' if lock.acquire() else 'not locked', flush=True)
    sys.stdin.read()
    ''')
# A process that waits for its stdin to close, inheriting what it may.
_SLEEPER = 'import sys; print("started", flush=True); sys.stdin.read()'


def _start(script, *args, close_fds=True):
  return subprocess.Popen(
      [sys.executable, '-c', script] + list(args),
      env=fixtures.subprocess_env(), stdin=subprocess.PIPE,
      stdout=subprocess.PIPE, close_fds=close_fds)


def _read_line(process):
  """The process's next line of stdout, waiting at most _TIMEOUT_SECONDS."""
  ready, _, _ = select.select([process.stdout], [], [], _TIMEOUT_SECONDS)
  if not ready:
    raise AssertionError('no line from the subprocess in {} s'.format(
        _TIMEOUT_SECONDS))
  return process.stdout.readline().decode().strip()


def _stop(process):
  if process.poll() is None:
    process.kill()
  process.wait(timeout=_TIMEOUT_SECONDS)
  process.stdin.close()
  process.stdout.close()


class RunDirectoryLockTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = fixtures.temp_dir(self)
    self.base_dir = os.path.join(self.dir, 'runs', 'cartpole')

  def _lock(self):
    lock = run_lock.RunDirectoryLock(self.base_dir)
    self.addCleanup(lock.release)
    return lock

  def test_second_lock_is_refused_naming_the_holder(self):
    first = self._lock()
    self.assertTrue(first.acquire())  # Creates the directories.
    self.assertTrue(first.locked)
    self.assertEqual(first.path,
                     os.path.join(self.base_dir, run_lock.LOCK_FILENAME))
    with open(first.path, 'rb') as f:
      note = f.read()
    self.assertEqual(json.loads(note)['pid'], os.getpid())
    second = self._lock()
    with self.assertRaises(run_lock.RunDirectoryLockedError) as raised:
      second.acquire()
    error = raised.exception
    self.assertEqual((error.directory, error.pid, error.host),
                     (self.base_dir, os.getpid(), socket.gethostname()))
    self.assertRegex(str(error), r'^{} is in use by another trainer \(pid {} '
                     r'on host {}, since [0-9T:-]+\)'.format(
                         self.base_dir, os.getpid(), socket.gethostname()))
    self.assertNotIn('\n', str(error))
    self.assertFalse(second.locked)
    # The refusal changed nothing.
    with open(first.path, 'rb') as f:
      self.assertEqual(f.read(), note)
    with self.assertRaisesRegex(RuntimeError, 'already locked'):
      first.acquire()

  def test_release_deletes_the_file_and_lets_the_next_in(self):
    first = self._lock()
    first.acquire()
    first.release()
    first.release()  # Idempotent.
    self.assertFalse(first.locked)
    self.assertEqual(os.listdir(self.base_dir), [])
    with self._lock() as second:
      self.assertTrue(second.locked)
      with self.assertRaises(run_lock.RunDirectoryLockedError):
        self._lock().acquire()
    self.assertFalse(second.locked)
    self.assertEqual(os.listdir(self.base_dir), [])

  def test_sigkilled_holder_leaves_no_stale_lock(self):
    holder = _start(_HOLDER, self.base_dir)
    self.addCleanup(_stop, holder)
    self.assertEqual(_read_line(holder), 'locked')
    with self.assertRaises(run_lock.RunDirectoryLockedError) as raised:
      self._lock().acquire()
    self.assertEqual((raised.exception.pid, raised.exception.host),
                     (holder.pid, socket.gethostname()))
    holder.send_signal(signal.SIGKILL)
    self.assertEqual(holder.wait(timeout=_TIMEOUT_SECONDS), -signal.SIGKILL)
    # The file stays (its holder could not delete it), the lock does not.
    self.assertTrue(os.path.exists(os.path.join(self.base_dir,
                                                run_lock.LOCK_FILENAME)))
    lock = self._lock()
    self.assertTrue(lock.acquire())
    with open(lock.path) as f:
      self.assertEqual(json.loads(f.read())['pid'], os.getpid())

  def _lock_survives_in_child(self, hold, release):
    """Whether a child (close_fds=False) started while `hold()` holds a lock
    keeps it once this process has called `release()`."""
    hold()
    child = _start(_SLEEPER, close_fds=False)
    self.addCleanup(_stop, child)
    self.assertEqual(_read_line(child), 'started')
    release()
    probe = run_lock.RunDirectoryLock(self.base_dir)
    try:
      probe.acquire()
    except run_lock.RunDirectoryLockedError:
      return True
    probe.release()
    return False

  def test_descriptor_is_not_inherited(self):
    lock = self._lock()
    self.assertFalse(self._lock_survives_in_child(lock.acquire,
                                                  lock.release))

  def test_the_inheritance_check_can_fail(self):
    # The same check on a descriptor made inheritable on purpose: the child
    # keeps the lock after this process closed its descriptor.
    os.makedirs(self.base_dir)
    path = os.path.join(self.base_dir, run_lock.LOCK_FILENAME)
    fds = []

    def hold():
      fds.append(os.open(path, os.O_RDWR | os.O_CREAT))
      fcntl.flock(fds[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
      os.set_inheritable(fds[0], True)

    self.assertTrue(self._lock_survives_in_child(
        hold, lambda: os.close(fds[0])))

  def test_file_deleted_under_a_locker_is_not_locked_twice(self):
    # The holder releases (deletes the file, then unlocks) between the
    # second locker's open and its flock: the second locks a deleted file,
    # sees that, and locks the new file under the name instead.
    first, second = self._lock(), self._lock()
    first.acquire()
    flock = fcntl.flock
    calls = []

    def flock_after_release(fd, operation):
      calls.append(fd)
      if len(calls) == 1:
        first.release()
      return flock(fd, operation)

    with mock.patch.object(run_lock.fcntl, 'flock', flock_after_release):
      self.assertTrue(second.acquire())
    self.assertLen(calls, 2)
    self.assertTrue(os.path.exists(second.path))
    with self.assertRaises(run_lock.RunDirectoryLockedError) as raised:
      self._lock().acquire()
    self.assertEqual(raised.exception.pid, os.getpid())

  def test_url_is_not_locked_with_one_warning(self):
    lock = run_lock.RunDirectoryLock('gs://bucket/runs/cartpole')
    with self.assertLogs('absl', 'WARNING') as logs:
      self.assertFalse(lock.acquire())
    self.assertLen(logs.records, 1)
    self.assertIn('gs://bucket/runs/cartpole cannot be locked',
                  logs.records[0].getMessage())
    self.assertFalse(lock.locked)
    lock.release()

  def test_filesystem_without_locks_warns_once_and_goes_on(self):
    for code in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
      with self.subTest(errno=errno.errorcode[code]):
        lock = self._lock()
        with mock.patch.object(run_lock.fcntl, 'flock',
                               side_effect=OSError(code, os.strerror(code))):
          with self.assertLogs('absl', 'WARNING') as logs:
            self.assertFalse(lock.acquire())
        self.assertLen(logs.records, 1)
        self.assertRegex(logs.records[0].getMessage(),
                         r'^{} cannot be locked: its filesystem does not '
                         r'support locks \({}\)'.format(
                             self.base_dir, os.strerror(code)))
        self.assertFalse(lock.locked)
        self.assertEqual(os.listdir(self.base_dir), [])

  def test_other_errors_are_raised(self):
    os.makedirs(os.path.join(self.base_dir, run_lock.LOCK_FILENAME))
    with self.assertRaises(OSError):
      self._lock().acquire()
    with mock.patch.object(run_lock.fcntl, 'flock',
                           side_effect=OSError(errno.EIO, 'I/O error')):
      with self.assertRaises(OSError):
        run_lock.RunDirectoryLock(self.dir).acquire()
    with self.assertRaisesRegex(ValueError, "directory must be a non-empty "
                                "path, got ''"):
      run_lock.RunDirectoryLock('')

  def test_holder_without_a_note_is_reported_at_once(self):
    # A holder that has locked but written nothing: the refusal reads the
    # file once and says that the holder did not say which it is.
    os.makedirs(self.base_dir)
    path = os.path.join(self.base_dir, run_lock.LOCK_FILENAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    self.addCleanup(os.close, fd)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    start = time.monotonic()
    with mock.patch.object(run_lock.os, 'pread', wraps=os.pread) as pread:
      with self.assertRaises(run_lock.RunDirectoryLockedError) as raised:
        self._lock().acquire()
    self.assertLess(time.monotonic() - start, 1)
    self.assertEqual(pread.call_count, 1)
    self.assertIsNone(raised.exception.pid)
    self.assertIn('another process, which did not say which',
                  str(raised.exception))
    self.assertEqual(os.path.getsize(path), 0)

  def test_release_leaves_a_file_that_replaced_the_locked_one(self):
    lock = self._lock()
    lock.acquire()
    replacement = lock.path + '.new'
    with open(replacement, 'w') as f:
      f.write('by hand\n')
    os.replace(replacement, lock.path)
    lock.release()
    self.assertFalse(lock.locked)
    with open(lock.path) as f:
      self.assertEqual(f.read(), 'by hand\n')


if __name__ == '__main__':
  absltest.main()
