"""The C++ unit tests of replay_core.h.

tests/native/replay_core_test.cc, a plain C++ program, is compiled with
the libraries' compiler and flags (`build.compile_test_program`), plainly
and with AddressSanitizer and UBSan, and run: it must compile without a
warning, exit 0 and say "N checks passed".
"""

import os
import subprocess

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


if __name__ == '__main__':
  absltest.main()
