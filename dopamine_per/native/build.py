# coding=utf-8
"""Builds the native libraries, once per source and TensorFlow version.

The three shared objects of docs/architecture.md#native-ops, compiled with
g++ (or $CXX) on first use and cached under $DOPAMINE_PER_NATIVE_CACHE
(default ~/.cache/dopamine_per/native), each named by a hash of its
sources, compiler and flags. A cached library is loaded only if it matches
the record beside it (docs/reliability.md: loading a truncated one kills
the process). `python -m dopamine_per.native.build` builds all three now.

With $DOPAMINE_PER_NATIVE_SANITIZE=1 the builds use AddressSanitizer and
UBSan, for tests (libasan must be preloaded). Where nothing builds,
`NativeBuildError` says why and the memories keep their Python paths.
"""

import fcntl
import hashlib
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple, Type

from absl import logging

__all__ = ['CACHE_ENV', 'SANITIZE_ENV', 'NativeBuildError', 'Once',
           'cache_root', 'compile_test_program', 'core_library', 'main',
           'ops_library', 'python_extension']

# The environment variable naming the cache directory.
CACHE_ENV = 'DOPAMINE_PER_NATIVE_CACHE'
# The environment variable that, set to 1, selects the sanitized builds.
SANITIZE_ENV = 'DOPAMINE_PER_NATIVE_SANITIZE'

# A library's record beside it: its size and SHA-256.
_RECORD_SUFFIX = '.sha256'
_RECORD_FORMAT = 'size={} sha256={}\n'
_RECORD_PATTERN = re.compile(rb'size=(\d+) sha256=([0-9a-f]{64})\n')
# A build's work directory in the cache, `.build-XXXX`, and its lock,
# `.build-XXXX.lock`, which the build holds (flock) while it runs.
_WORK_PREFIX = '.build-'
_LOCK_SUFFIX = '.lock'

_SOURCE_DIR = os.path.dirname(os.path.abspath(__file__))
# The headers every library includes.
_HEADERS = ('replay_core.h', 'sum_tree.h', 'transitions.h', 'lz4_block.h',
            'frames.h', 'batch.h', 'memory.h', 'sampler.h', 'batch_queue.h',
            'deferred_states.h', 'binary_sum_tree.h', 'block_compressor.h',
            'helper_thread.h')
# The extension's module name: replay_python.cc defines PyInit__replay.
PYTHON_MODULE = 'dopamine_per.native._replay'
# -ffp-contract=off: no fused multiply-adds, so sums match NumPy's bits.
# -Wall -Wextra: our sources compile without a warning.
_PROGRAM_FLAGS = ['-O3', '-std=c++17', '-ffp-contract=off', '-Wall',
                  '-Wextra']
_COMMON_FLAGS = _PROGRAM_FLAGS + ['-shared', '-fPIC']
_SANITIZER_FLAGS = ['-fsanitize=address,undefined', '-fno-omit-frame-pointer',
                    '-g']
# GCC's null checks make `&function == nullptr` no constant expression,
# which TensorFlow's absl headers need: the ops go without them.
_OPS_SANITIZER_FLAGS = _SANITIZER_FLAGS + [
    '-fno-sanitize=null,nonnull-attribute,returns-nonnull-attribute']


class NativeBuildError(RuntimeError):
  """The native libraries cannot be built here (the message says why)."""


class Once(object):
  """Builds and loads a library on the first call; then returns it.

  A failure is remembered and raised again (a machine without a compiler
  does not retry on every call). Thread-safe.
  """

  def __init__(self, build_and_load: Callable[[], Any], failure: str,
               load_errors: Tuple[Type[BaseException], ...]):
    """Remembers how to build and load the library.

    Args:
      build_and_load: returns the library, or raises NativeBuildError.
      failure: the start of the NativeBuildError a load error becomes.
      load_errors: the exceptions of loading that become NativeBuildError.
    """
    self._build_and_load = build_and_load
    self._failure = failure
    self._load_errors = load_errors
    self._lock = threading.Lock()
    self._library = None
    self._error: Optional[NativeBuildError] = None

  def __call__(self) -> Any:
    """The library.

    Raises:
      NativeBuildError: If it cannot be built or loaded (now or before).
    """
    with self._lock:
      if self._error is not None:
        raise self._error
      if self._library is None:
        try:
          self._library = self._build_and_load()
        except NativeBuildError as e:
          self._error = e
          raise
        except self._load_errors as e:
          self._error = NativeBuildError('{}: {}'.format(self._failure, e))
          raise self._error from e
      return self._library


def cache_root() -> str:
  """The directory holding the built libraries."""
  root = os.environ.get(CACHE_ENV)
  if root:
    return root
  base = os.environ.get('XDG_CACHE_HOME') or os.path.join(
      os.path.expanduser('~'), '.cache')
  return os.path.join(base, 'dopamine_per', 'native')


def _compiler() -> List[str]:
  """The C++ compiler's command and its version line."""
  name = os.environ.get('CXX', 'g++')
  path = shutil.which(name)
  if path is None:
    raise NativeBuildError(
        'no C++ compiler: {!r} is not on PATH (install g++, e.g. '
        '`apt-get install g++`, or set $CXX)'.format(name))
  try:
    version = subprocess.run([path, '--version'], capture_output=True,
                             text=True, check=True).stdout.splitlines()[0]
  except (OSError, subprocess.CalledProcessError, IndexError) as e:
    raise NativeBuildError('the C++ compiler {} does not run: {}'.format(
        path, e)) from e
  return [path, version]


def _digest(source: str, *parts: str) -> str:
  """A hash of the library's `source`, the headers and `parts`."""
  digest = hashlib.sha256()
  for name in _HEADERS + (source,):
    try:
      with open(os.path.join(_SOURCE_DIR, name), 'rb') as f:
        digest.update(name.encode() + b'\0' + f.read() + b'\0')
    except OSError as e:  # E.g. an installed package without its sources.
      raise NativeBuildError('the native sources cannot be read: {}'.format(
          e)) from e
  for part in parts:
    digest.update(part.encode() + b'\0')
  return digest.hexdigest()[:16]


def _read(path: str, size: Optional[int] = None) -> Optional[bytes]:
  """The contents of the regular file at `path` (of `size`), else None.

  Opened without blocking (a FIFO would wait for a writer), then checked
  and read through that one descriptor.
  """
  try:
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
  except OSError:
    return None
  try:
    status = os.fstat(handle)
    if not stat.S_ISREG(status.st_mode) or (
        size is not None and status.st_size != size):
      return None
    chunks = []
    while True:
      chunk = os.read(handle, 1 << 20)
      if not chunk:
        return b''.join(chunks)
      chunks.append(chunk)
  except OSError:
    return None
  finally:
    os.close(handle)


def _contents(path: str, size: Optional[int] = None
              ) -> Optional[Tuple[int, str]]:
  """The size and SHA-256 of the regular file at `path` (`_read`)."""
  data = _read(path, size)
  return None if data is None else (len(data), hashlib.sha256(
      data).hexdigest())


def _record(path: str) -> Optional[Tuple[int, str]]:
  """The size and SHA-256 that the record at `path` holds, else None."""
  match = _RECORD_PATTERN.fullmatch(_read(path) or b'')
  return (int(match.group(1)), match.group(2).decode()) if match else None


def _verified(target: str) -> bool:
  """Whether `target` is the library its record describes (size, SHA-256)."""
  record = _record(target + _RECORD_SUFFIX)
  return record is not None and _contents(target, record[0]) == record


def _start_work(directory: str) -> Tuple[str, int]:
  """Creates this build's work directory in `directory`: (path, lock).

  The lock, an flock on `<work>.lock` until `_end_work`, which the kernel
  drops however the process ends, tells `_sweep` the build is alive.
  """
  while True:
    handle, lock = tempfile.mkstemp(prefix=_WORK_PREFIX, suffix=_LOCK_SUFFIX,
                                    dir=directory)
    try:
      fcntl.flock(handle, fcntl.LOCK_EX)
    except OSError:  # No locks on this filesystem: sweeps skip it too.
      break
    try:  # A sweep may have locked and removed it before this process did.
      if os.path.samestat(os.fstat(handle), os.lstat(lock)):
        break
    except FileNotFoundError:
      pass
    os.close(handle)
  work = lock[:-len(_LOCK_SUFFIX)]
  try:
    os.mkdir(work)
  except OSError:
    _end_work(work, handle)
    raise
  return work, handle


def _end_work(work: str, lock: int) -> None:
  """Removes a build's work directory and then its lock."""
  shutil.rmtree(work, ignore_errors=True)
  try:
    os.remove(work + _LOCK_SUFFIX)
  except OSError:
    pass
  os.close(lock)


def _sweep(directory: str) -> None:
  """Removes the work of builds that were killed (their lock is free)."""
  try:
    names = os.listdir(directory)
  except OSError:
    return
  for name in names:
    if not (name.startswith(_WORK_PREFIX) and name.endswith(_LOCK_SUFFIX)):
      continue
    lock = os.path.join(directory, name)
    try:
      handle = os.open(lock, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
      continue
    try:
      fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
      if os.path.samestat(os.fstat(handle), os.lstat(lock)):
        shutil.rmtree(lock[:-len(_LOCK_SUFFIX)], ignore_errors=True)
        os.remove(lock)
    except OSError:  # Held (the build runs), gone, or read-only.
      pass
    finally:
      os.close(handle)


def _install(source: str, target: str, work: str) -> None:
  """Renames `source` to `target`, atomically replacing what is there.

  A directory there is first moved into the work directory.
  """
  try:
    os.replace(source, target)
  except IsADirectoryError:
    try:
      os.replace(target, os.path.join(work, 'in-the-way'))
    except FileNotFoundError:  # Another build moved it.
      pass
    os.replace(source, target)


def _run_compiler(command: List[str], name: str) -> str:
  """Runs the compiler's `command`; returns what it printed.

  Raises:
    NativeBuildError: If the compiler would not start or failed.
  """
  try:
    result = subprocess.run(command, capture_output=True, text=True,
                            check=False)
  except OSError as e:
    raise NativeBuildError('compiling {} failed: {}'.format(name, e)) from e
  if result.returncode != 0:
    raise NativeBuildError('compiling {} failed:\n{}'.format(
        name, result.stderr[-4000:]))
  return result.stderr


def _compile(command: List[str], target: str) -> str:
  """Runs `command` (writing to {output}) unless `target` verifies.

  Compiles into a new work directory beside `target`, gives the library a
  new executable's mode, records it and renames it (then its record) over
  whatever did not verify there.

  Returns:
    `target`, which `_verified` accepts.

  Raises:
    NativeBuildError: If the cache cannot be written or the compiler fails.
  """
  directory, name = os.path.split(target)
  _sweep(directory)
  if _verified(target):
    return target
  try:
    os.makedirs(directory, exist_ok=True)
    work, lock = _start_work(directory)
  except OSError as e:
    raise NativeBuildError(
        'cannot write the cache directory {} ({}): set ${} to a writable '
        'directory'.format(directory, e, CACHE_ENV)) from e
  # The first use on a machine waits for the compiler: say why.
  logging.info('dopamine_per: compiling %s (once; cached in %s)', name,
               directory)
  start = time.monotonic()
  try:
    output = os.path.join(work, name)
    printed = _run_compiler([part.replace('{output}', output)
                             for part in command], name)
    if printed.strip():  # Warnings: our sources should have none.
      logging.warning('dopamine_per: compiling %s printed:\n%s', name,
                      printed[-4000:])
    contents = _contents(output)
    if not contents or not contents[0]:
      raise NativeBuildError('compiling {} failed: the compiler wrote no '
                             'library'.format(name))
    # The work directory was made with the mode of a new executable
    # (0777 & ~umask); the owner must at least read the library.
    os.chmod(output, stat.S_IMODE(os.stat(work).st_mode) & 0o777 | 0o400)
    record = output + _RECORD_SUFFIX
    with open(record, 'x') as f:
      f.write(_RECORD_FORMAT.format(*contents))
    _install(output, target, work)
    _install(record, target + _RECORD_SUFFIX, work)
    logging.info('dopamine_per: compiled %s in %.1f s', name,
                 time.monotonic() - start)
  except OSError as e:  # A full disk.
    raise NativeBuildError('compiling {} failed: {}'.format(name, e)) from e
  finally:
    _end_work(work, lock)
  return target


def _system_includes(flags: Sequence[str]) -> List[str]:
  """`flags` with each `-I<dir>` as `-isystem <dir>`.

  So the warnings of TensorFlow's and Python's headers stay out of the
  build's output.
  """
  rewritten = []
  for flag in flags:
    if flag.startswith('-I') and len(flag) > 2:
      rewritten += ['-isystem', flag[2:]]
    else:
      rewritten.append(flag)
  return rewritten


def _sanitize(sanitize: Optional[bool]) -> bool:
  """`sanitize`, or (None) whether $DOPAMINE_PER_NATIVE_SANITIZE is 1."""
  if sanitize is None:
    return os.environ.get(SANITIZE_ENV) == '1'
  return bool(sanitize)


def core_library(sanitize: Optional[bool] = None) -> str:
  """Builds (once) and returns the path of the TensorFlow-free core library.

  Args:
    sanitize: build with AddressSanitizer and UBSan; None: whether
      $DOPAMINE_PER_NATIVE_SANITIZE is 1.

  Raises:
    NativeBuildError: If there is no compiler or it fails.
  """
  compiler, version = _compiler()
  flags = _COMMON_FLAGS + (_SANITIZER_FLAGS if _sanitize(sanitize) else [])
  name = 'libdopamine_per_core-{}.so'.format(
      _digest('replay_core.cc', version, compiler, *flags))
  command = [compiler] + flags + [
      '-Wl,-soname,' + name, os.path.join(_SOURCE_DIR, 'replay_core.cc'),
      '-o', '{output}']
  return _compile(command, os.path.join(cache_root(), name))


def ops_library(sanitize: Optional[bool] = None) -> str:
  """Builds (once) and returns the path of the TensorFlow ops library.

  Compiled against the installed TensorFlow, linked to
  `core_library(sanitize)`; `sanitize` as there.

  Raises:
    NativeBuildError: If there is no compiler, TensorFlow's headers are
      missing, or the compiler fails.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  sanitize = _sanitize(sanitize)
  core = core_library(sanitize)
  compiler, version = _compiler()
  tf_flags = _system_includes(tf.sysconfig.get_compile_flags())
  link_flags = tf.sysconfig.get_link_flags()
  include = [tf_flags[i + 1] for i, flag in enumerate(tf_flags[:-1])
             if flag == '-isystem']
  if not any(os.path.exists(os.path.join(path, 'tensorflow', 'core',
                                         'framework', 'op_kernel.h'))
             for path in include):
    raise NativeBuildError(
        "TensorFlow {}'s C++ headers are missing from {}".format(
            tf.__version__, include))
  flags = (_COMMON_FLAGS + (_OPS_SANITIZER_FLAGS if sanitize else []) +
           tf_flags)
  name = 'dopamine_per_ops-{}.so'.format(_digest(
      'replay_ops.cc', version, compiler, tf.__version__, os.path.basename(core),
      *(flags + link_flags)))
  command = [compiler] + flags + [
      os.path.join(_SOURCE_DIR, 'replay_ops.cc'), '-o', '{output}',
      '-L' + os.path.dirname(core), '-l:' + os.path.basename(core),
      '-Wl,-rpath,' + os.path.dirname(core)] + link_flags
  return _compile(command, os.path.join(cache_root(), name))


def python_extension(sanitize: Optional[bool] = None) -> str:
  """Builds (once) and returns the path of the kernels' Python extension.

  `PYTHON_MODULE`, for this interpreter's headers and ABI, without
  TensorFlow or the core library; `sanitize` as for `core_library`.

  Raises:
    NativeBuildError: If there is no compiler, Python's headers are missing
      or the compiler fails.
  """
  sanitize = _sanitize(sanitize)
  compiler, version = _compiler()
  paths = sysconfig.get_paths()
  include = paths.get('include') or ''
  if not os.path.exists(os.path.join(include, 'Python.h')):
    raise NativeBuildError(
        "Python {}'s C headers are missing (no Python.h in {!r}): install "
        'them, e.g. `apt-get install python3-dev`'.format(
            platform.python_version(), include))
  includes = [include]
  platform_include = paths.get('platinclude')
  if platform_include and platform_include != include:
    includes.append(platform_include)
  suffix = sysconfig.get_config_var('EXT_SUFFIX') or '.so'
  flags = (_COMMON_FLAGS + (_SANITIZER_FLAGS if sanitize else []) +
           ['-fvisibility=hidden'] +
           _system_includes(['-I' + path for path in includes]))
  name = 'dopamine_per_replay-{}{}'.format(
      _digest('replay_python.cc', version, compiler, suffix, sys.version,
              *flags), suffix)
  command = [compiler] + flags + [
      os.path.join(_SOURCE_DIR, 'replay_python.cc'), '-o', '{output}']
  return _compile(command, os.path.join(cache_root(), name))


def compile_test_program(source: str, output: str,
                         sanitize: bool = False) -> str:
  """Compiles the C++ test program `source` into the executable `output`.

  With the libraries' compiler and flags (but -shared and -fPIC) and the
  native sources on the include path. Not cached.

  Returns:
    What the compiler printed (its warnings; empty for a clean source).

  Raises:
    NativeBuildError: If there is no compiler or it fails.
  """
  compiler, _ = _compiler()
  return _run_compiler([compiler] + _PROGRAM_FLAGS +
                       (_SANITIZER_FLAGS if sanitize else []) +
                       ['-I' + _SOURCE_DIR, source, '-o', output], source)


def main(argv: Sequence[str] = ()) -> int:
  """`python -m dopamine_per.native.build [--sanitize]`: builds all three."""
  sanitize = '--sanitize' in argv
  try:
    print('core library:', core_library(sanitize))
    print('Python extension:', python_extension(sanitize))
    print('TensorFlow ops:', ops_library(sanitize))
  except NativeBuildError as e:
    print('dopamine_per: cannot build the native libraries: {}'.format(e),
          file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
