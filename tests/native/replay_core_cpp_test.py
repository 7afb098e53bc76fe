"""The C++ unit tests of replay_core.h, and a warning-free native build.

tests/native/replay_core_test.cc, a plain C++ program, is compiled with
the libraries' compiler and flags (`build.compile_test_program`), plainly
and with AddressSanitizer and UBSan, and run: it must compile without a
warning, exit 0 and say "N checks passed". The libraries, built in a fresh
cache, must compile without a warning too.
"""

import os
import subprocess
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized

from dopamine_per.native import build
from tests.support import fixtures

SOURCE = fixtures.repo_path('tests', 'native', 'replay_core_test.cc')


class ReplayCoreCppTest(parameterized.TestCase):

  @parameterized.named_parameters(('plain', False), ('sanitized', True))
  def test_the_core_passes_its_unit_tests(self, sanitize):
    program = os.path.join(fixtures.temp_dir(self), 'replay_core_test')
    printed = build.compile_test_program(SOURCE, program, sanitize=sanitize)
    self.assertEqual(printed, '', 'the compiler warned')
    # UBSan only reports and goes on unless told to halt; the program
    # leaks nothing, but LeakSanitizer needs ptrace, which a container may
    # refuse: memory errors and undefined behaviour are what is tested.
    env = fixtures.subprocess_env(
        ASAN_OPTIONS='detect_leaks=0',
        UBSAN_OPTIONS='halt_on_error=1:print_stacktrace=1')
    result = subprocess.run([program], env=env, capture_output=True,
                            text=True, check=False, timeout=120)
    output = result.stdout + result.stderr
    self.assertEqual(result.returncode, 0, output)
    self.assertRegex(result.stdout, r'^[1-9]\d* checks passed\n$')
    self.assertEqual(result.stderr, '')

  def test_the_libraries_compile_without_warnings(self):
    compiles = []
    run = subprocess.run

    def recording_run(command, *args, **kwargs):
      result = run(command, *args, **kwargs)
      if any(str(part).endswith('.cc') for part in command):
        compiles.append((command, result))
      return result

    # A fresh cache: every library is compiled, none found.
    with mock.patch.dict(os.environ,
                         {build.CACHE_ENV: fixtures.temp_dir(self)}), \
        mock.patch.object(build.subprocess, 'run', recording_run):
      build.core_library(sanitize=False)
      build.python_extension(sanitize=False)
      build.ops_library(sanitize=False)
    sources = sorted(os.path.basename(part) for command, _ in compiles
                     for part in command if part.endswith('.cc'))
    self.assertEqual(sources,
                     ['replay_core.cc', 'replay_ops.cc', 'replay_python.cc'])
    for command, result in compiles:
      self.assertEqual(result.returncode, 0, result.stderr)
      self.assertIn('-Wall', command)
      self.assertIn('-Wextra', command)
      self.assertNotIn('-w', command)
      # TensorFlow's and Python's headers are system headers (-isystem):
      # their warnings are not ours.
      self.assertEmpty([part for part in command if part.startswith('-I')],
                       command)
      self.assertEqual(result.stderr, '', 'warnings compiling {}'.format(
          command))


if __name__ == '__main__':
  absltest.main()
