"""Tests for dopamine_per.native.build and core: compiling, caching, loading.

The libraries are built once, for real, into a cache directory of this
test ($DOPAMINE_PER_NATIVE_CACHE); tests of failures get fresh ones, tests
of a damaged cache damage copies of it.
"""

import filecmp
import os
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized

from dopamine_per.native import build
from dopamine_per.native import extension
from tests.support import fixtures

_RUN = subprocess.run


def _compile_command(build_library):
  """The compiler command the last library `build_library()` builds runs.

  Nothing is compiled: `build._compile` only records its command.
  """
  commands = []

  def record(command, target):
    commands.append(command)
    return target

  with mock.patch.object(build, '_compile', record):
    build_library()
  return commands[-1]


class BuildTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cache = tempfile.mkdtemp()
    cls.compiles = []  # (command, what the compiler printed)
    run_compiler = build._run_compiler  # pylint: disable=protected-access

    def recording(command, name):
      cls.compiles.append((command, run_compiler(command, name)))
      return cls.compiles[-1][1]

    with mock.patch.dict(os.environ, {build.CACHE_ENV: cls.cache}), \
        mock.patch.object(build, '_run_compiler', recording):
      cls.core, cls.ops = build.core_library(), build.ops_library()
      cls.extension = build.python_extension()

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.cache)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    patcher = mock.patch.dict(os.environ, {build.CACHE_ENV: self.cache})
    patcher.start()
    self.addCleanup(patcher.stop)

  def _fresh_cache(self):
    """Points $DOPAMINE_PER_NATIVE_CACHE at a new empty directory."""
    cache = fixtures.temp_dir(self)
    os.environ[build.CACHE_ENV] = cache
    return cache

  def test_builds_once_into_the_cache(self):
    core, ops = self.core, self.ops
    self.assertEqual(os.path.dirname(core), self.cache)
    self.assertEqual(os.path.dirname(ops), self.cache)
    stamps = os.stat(core).st_mtime_ns, os.stat(ops).st_mtime_ns
    self.assertEqual(build.core_library(), core)
    self.assertEqual(build.ops_library(), ops)
    self.assertEqual((os.stat(core).st_mtime_ns, os.stat(ops).st_mtime_ns),
                     stamps, 'a cached library was compiled again')
    self.assertEqual(build.python_extension(), self.extension)
    libraries = [os.path.basename(path)
                 for path in (core, ops, self.extension)]
    self.assertCountEqual(
        os.listdir(self.cache),
        libraries + [name + '.sha256' for name in libraries],
        'temporary files left behind')

  def test_the_libraries_compile_without_warnings(self):
    sources = sorted(os.path.basename(part) for command, _ in self.compiles
                     for part in command if part.endswith('.cc'))
    self.assertEqual(sources,
                     ['replay_core.cc', 'replay_ops.cc', 'replay_python.cc'])
    for command, printed in self.compiles:
      self.assertIn('-Wall', command)
      self.assertIn('-Wextra', command)
      self.assertNotIn('-w', command)
      # TensorFlow's and Python's headers are system headers (-isystem):
      # their warnings are not ours.
      self.assertEmpty([part for part in command if part.startswith('-I')],
                       command)
      self.assertEqual(printed, '', command)

  def test_libraries_are_readable_with_a_new_executables_mode(self):
    # Not 0711, which the compiler gave a temporary file it wrote over.
    umask = os.umask(0o022)
    os.umask(umask)
    for path in (self.core, self.ops, self.extension):
      self.assertEqual(oct(stat.S_IMODE(os.stat(path).st_mode)),
                       oct(0o777 & ~umask | 0o400), path)
      self.assertEqual(stat.S_IMODE(os.stat(path + '.sha256').st_mode),
                       0o666 & ~umask, path)

  def test_an_unwritable_cache_is_named(self):
    # A file where the cache directory should be: even root cannot write.
    blocker = os.path.join(fixtures.temp_dir(self), 'a_file')
    with open(blocker, 'w') as f:
      f.write('not a directory')
    os.environ[build.CACHE_ENV] = os.path.join(blocker, 'cache')
    with self.assertRaisesRegex(
        build.NativeBuildError,
        r'^cannot write the cache directory .*a_file/cache \(.*\): set '
        r'\$DOPAMINE_PER_NATIVE_CACHE to a writable directory$'):
      build.core_library()

  def test_a_compile_says_so_and_a_cached_library_is_silent(self):
    cache = self._fresh_cache()
    with mock.patch.object(build.logging, 'info') as info:
      core = build.core_library()
      build.core_library()
    self.assertLen(info.call_args_list, 2)
    self.assertEqual(info.call_args_list[0].args,
                     ('dopamine_per: compiling %s (once; cached in %s)',
                      os.path.basename(core), cache))
    self.assertEqual(info.call_args_list[1].args[:2],
                     ('dopamine_per: compiled %s in %.1f s',
                      os.path.basename(core)))

  def test_the_extension_is_built_for_this_interpreter(self):
    self.assertTrue(self.extension.endswith(
        sysconfig.get_config_var('EXT_SUFFIX')))
    module = extension._import(self.extension)  # pylint: disable=protected-access
    self.assertEqual(module.__name__, build.PYTHON_MODULE)
    self.assertEqual(module.update_parents.__doc__.split('(')[0],
                     'update_parents')
    self.assertIn('-ffp-contract=off',
                  _compile_command(build.python_extension))

  @parameterized.named_parameters(
      ('no_compiler', lambda: mock.patch.dict(
          os.environ, {'CXX': 'no-such-compiler-here'}), 'core_library',
       'no-such-compiler-here.*install g\\+\\+'),
      ('no_python_headers', lambda: mock.patch.object(
          sysconfig, 'get_paths', return_value=dict(
              sysconfig.get_paths(), include='/no/such/include')),
       'python_extension', 'C headers are missing.*python3-dev'),
      ('failed_compile', lambda: mock.patch.object(
          build, '_COMMON_FLAGS',
          build._COMMON_FLAGS + ['-fno-such-option']),  # pylint: disable=protected-access
       'core_library',
       '(?s)compiling libdopamine_per_core.*failed.*no-such-option'),
      ('compiler_will_not_start', lambda: mock.patch.object(
          build.subprocess, 'run', side_effect=_refuse_to_compile),
       'core_library',
       r'^compiling libdopamine_per_core-\w+\.so failed: .*Permission denied'),
  )
  def test_a_failure_is_named_and_leaves_nothing(self, patch, library,
                                                 message):
    cache = self._fresh_cache()
    with patch(), self.assertRaisesRegex(build.NativeBuildError, message):
      getattr(build, library)()
    self.assertEmpty(os.listdir(cache), 'a failed build left files')

  def test_the_name_changes_with_tensorflow_and_the_flags(self):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with mock.patch.object(build, '_compile', lambda command, target: target):
      self.assertNotEqual(build.core_library(sanitize=True),
                          build.core_library())
      with mock.patch.object(tf, '__version__', '0.0.0'):
        self.assertNotEqual(build.ops_library(), self.ops)

  def test_the_ops_are_compiled_with_tensorflows_abi(self):
    ops_command = _compile_command(build.ops_library)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    for flag in tf.sysconfig.get_compile_flags():
      # -I<dir> is -isystem <dir>: test_the_libraries_compile_without_warnings.
      if not flag.startswith('-I'):
        self.assertIn(flag, ops_command)
    self.assertIn('-D_GLIBCXX_USE_CXX11_ABI=1', ops_command)
    self.assertIn('-std=c++17', ops_command)

  def test_the_build_command(self):
    result = fixtures.run_python(['-m', 'dopamine_per.native.build'], 300,
                                 **{build.CACHE_ENV: self.cache})
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn('core library: ' + self.cache, result.stdout)
    self.assertIn('TensorFlow ops: ' + self.cache, result.stdout)
    self.assertIn('Python extension: ' + self.cache, result.stdout)
    failed = fixtures.run_python(['-m', 'dopamine_per.native.build'], 300,
                                 CXX='no-such-compiler-here',
                                 **{build.CACHE_ENV: self._fresh_cache()})
    self.assertEqual(failed.returncode, 1)
    self.assertIn('cannot build the native libraries', failed.stderr)

  def _copy_of_the_cache(self):
    """Points $DOPAMINE_PER_NATIVE_CACHE at a copy of the built cache."""
    cache = os.path.join(fixtures.temp_dir(self), 'cache')
    shutil.copytree(self.cache, cache)
    os.environ[build.CACHE_ENV] = cache
    return cache

  def _in_copy(self, cache, library):
    return os.path.join(cache, os.path.basename(library))

  def test_a_truncated_library_is_rebuilt_before_it_is_loaded(self):
    # A truncated ELF is mapped past its end: SIGBUS on load, which killed
    # even a process that only makes a NumPy memory (its kernels are the
    # extension's). The memory registers (and unregisters) without
    # TensorFlow.
    cache = self._copy_of_the_cache()
    for library in (self.core, self.extension):
      os.truncate(self._in_copy(cache, library),
                  os.path.getsize(library) // 2)
    script = (
        'import gc, sys\n'
        'import numpy as np\n'
        'from dopamine_per.native import core\n'
        'from dopamine_per.replay_memory import prioritized_replay_buffer\n'
        'memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer('
        '(4,), 1, 100, 8)\n'
        'memory.native_memory()\n'
        'memory.add(np.zeros(4, np.uint8), 0, 0.0, False, 1.0)\n'
        'assert core.load().per_memory_count() == 1\n'
        'assert "tensorflow" not in sys.modules, "TensorFlow was imported"\n'
        'del memory\n'
        'gc.collect()\n'
        'assert core.load().per_memory_count() == 0, "still registered"\n')
    result = fixtures.run_python(['-c', script], 300,
                                 **{build.CACHE_ENV: cache})
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertNotIn('cannot be built', result.stderr)
    for library in (self.core, self.extension):
      self.assertTrue(filecmp.cmp(self._in_copy(cache, library), library,
                                  shallow=False), library)

  def test_what_does_not_verify_is_rebuilt(self):
    cache = self._copy_of_the_cache()
    core, extension_path = (self._in_copy(cache, path)
                            for path in (self.core, self.extension))
    # An empty library (which used to disable the native path for good)
    # and a directory in its place are rebuilt and replaced.
    open(core, 'wb').close()
    os.remove(extension_path)
    os.makedirs(os.path.join(extension_path, 'inside'))
    self.assertEqual(build.core_library(), core)
    self.assertEqual(build.python_extension(), extension_path)
    for library, copy in ((self.core, core),
                          (self.extension, extension_path)):
      self.assertTrue(filecmp.cmp(copy, library, shallow=False), library)
    self.assertCountEqual(os.listdir(cache), os.listdir(self.cache))
    verified = build._verified  # pylint: disable=protected-access
    for library in (self.core, self.ops, self.extension):
      self.assertTrue(verified(library), library)
    # Each damage to a copy of the ops library: none verifies (nor blocks).
    size = os.path.getsize(self.ops)
    damages = {
        'missing': os.remove,
        'empty': lambda path: os.truncate(path, 0),
        'truncated': lambda path: os.truncate(path, size - 1),
        'one byte changed': _flip_last_byte,
        'a FIFO': _replaced(os.mkfifo),
        'a directory': _replaced(os.mkdir),
        'a dangling link': _replaced(lambda path: os.symlink('gone', path)),
        'no record': lambda path: os.remove(path + '.sha256'),
        'a FIFO as its record': lambda path: _replaced(os.mkfifo)(
            path + '.sha256'),
        "another library's record": lambda path: shutil.copy(
            self.core + '.sha256', path + '.sha256'),
        'a garbled record': lambda path: _flip_last_byte(path + '.sha256'),
    }
    scratch = fixtures.temp_dir(self)
    for number, (damage, make) in enumerate(damages.items()):
      with self.subTest(damage):
        os.mkdir(os.path.join(scratch, str(number)))
        path = os.path.join(scratch, str(number), os.path.basename(self.ops))
        shutil.copy(self.ops, path)
        shutil.copy(self.ops + '.sha256', path + '.sha256')
        self.assertTrue(verified(path))
        make(path)
        self.assertFalse(verified(path))

  def test_a_killed_build_leaves_nothing_behind(self):
    # A compiler that never finishes, in a process killed (SIGKILL) while
    # it runs: what it left in the cache is removed by the next process,
    # even one that finds its libraries built.
    cache = self._copy_of_the_cache()
    before = sorted(os.listdir(cache))
    directory = fixtures.temp_dir(self)
    started = os.path.join(directory, 'started')
    compiler = os.path.join(directory, 'slow-g++')
    with open(compiler, 'w') as f:
      f.write('#!/bin/sh\n'
              'if [ "$1" = --version ]; then echo slow-g++ 1.0; exit 0; fi\n'
              'touch {}\n'
              'exec sleep 600\n'.format(started))
    os.chmod(compiler, 0o755)
    process = subprocess.Popen(
        [sys.executable, '-c',
         'from dopamine_per.native import build\nbuild.core_library()\n'],
        env=fixtures.subprocess_env(**{build.CACHE_ENV: cache,
                                       'CXX': compiler}),
        start_new_session=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
      fixtures.wait_until(lambda: os.path.exists(started), timeout_s=120,
                          message='the build never started')
    finally:
      os.killpg(process.pid, signal.SIGKILL)
      process.wait(timeout=60)
    self.assertNotEqual(sorted(os.listdir(cache)), before,
                        'the killed build left nothing to remove')
    self.assertEqual(build.core_library(), self._in_copy(cache, self.core))
    self.assertEqual(sorted(os.listdir(cache)), before)


def _refuse_to_compile(command, **kwargs):
  """subprocess.run, but for a compiler that will not start."""
  if '-shared' in command:  # Not the compiler's --version.
    raise PermissionError(13, 'Permission denied')
  return _RUN(command, **kwargs)


def _flip_last_byte(path):
  """Changes the last byte of the file at `path`, keeping its size."""
  with open(path, 'r+b') as f:
    f.seek(-1, os.SEEK_END)
    last = f.read(1)
    f.seek(-1, os.SEEK_END)
    f.write(bytes([last[0] ^ 1]))


def _replaced(make):
  """A damage: removes the file at a path, then `make(path)` (a FIFO...)."""

  def damage(path):
    os.remove(path)
    make(path)
  return damage


if __name__ == '__main__':
  absltest.main()
