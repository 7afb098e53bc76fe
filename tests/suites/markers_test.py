"""Checks that pytest's `slow` marker selects exactly what BUILD tags slow.

`bash scripts/test.sh -m "not slow"` relies on it. These checks import no
test module, so one that fails to import fails only itself.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest

from tests import conftest
from tests.support import build_files
from tests.support import fixtures

# A collected test id, e.g.
# 'tests/agents/learning_test.py::LearningTest::test_x'.
_TEST_ID = re.compile(r'^(tests/(?:\w+/)*\w+\.py)::', re.MULTILINE)


class _Item:
  """What the collection hook reads and writes of a pytest item."""

  def __init__(self, path):
    self.path = path
    self.markers = []

  def add_marker(self, marker):
    self.markers.append(marker)


class MarkersTest(absltest.TestCase):

  def test_hook_marks_exactly_the_tests_of_builds_slow_files(self):
    # Of every existing test file: so BUILD tags none that is missing.
    items = [_Item(path) for path in sorted(glob.glob(
        fixtures.repo_path('tests', '**', '*_test.py'), recursive=True))]
    self.assertGreater(len(items), 40)
    conftest.pytest_collection_modifyitems(None, items)
    marked = {os.path.relpath(item.path, fixtures.REPO_ROOT)
              for item in items if item.markers}
    self.assertNotEmpty(marked)
    self.assertEqual(marked, conftest.slow_test_files())
    self.assertTrue(all(item.markers in ([], [conftest.SLOW])
                        for item in items))

  def test_pytest_registers_and_applies_the_marker(self):
    # A copy of conftest.py and what it imports beside a BUILD with one slow
    # test, in a folder, and one fast test.
    with tempfile.TemporaryDirectory() as root:
      os.makedirs(os.path.join(root, 'tests', 'support'))
      os.mkdir(os.path.join(root, 'tests', 'agents'))
      shutil.copy(conftest.__file__, os.path.join(root, 'tests'))
      for helper in (build_files, fixtures):
        shutil.copy(helper.__file__, os.path.join(root, 'tests', 'support'))
      files = {
          'BUILD': """
              py_test(name = "slow_test",
                      srcs = ["tests/agents/slow_test.py"], tags = ["slow"])
              py_test(name = "fast_test", srcs = ["tests/fast_test.py"])
              """,
          'tests/__init__.py': '',
          'tests/support/__init__.py': '',
          'tests/agents/__init__.py': '',
          'tests/agents/slow_test.py': 'def test_long():\n  pass\n',
          'tests/fast_test.py': 'def test_short():\n  pass\n',
      }
      for name, text in files.items():
        with open(os.path.join(root, name), 'w', encoding='utf-8') as out:
          out.write(textwrap.dedent(text))
      slow, fast = 'tests/agents/slow_test.py', 'tests/fast_test.py'
      for selection, expected in (('slow', {slow}), ('not slow', {fast}),
                                  ('', {slow, fast})):
        with self.subTest(selection=selection):
          result = subprocess.run(
              [sys.executable, '-m', 'pytest', '--collect-only', '-q',
               '--strict-markers', '-p', 'no:cacheprovider', '-m', selection,
               'tests'],
              cwd=root, capture_output=True, text=True, timeout=300,
              check=False)
          self.assertEqual(result.returncode, 0,
                           result.stdout + result.stderr)
          self.assertEqual(set(_TEST_ID.findall(result.stdout)), expected)

if __name__ == '__main__':
  absltest.main()
