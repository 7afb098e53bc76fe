"""pytest configuration: the `slow` marker, taken from BUILD's tags.

BUILD is the one place that says which test files are slow (training runs,
subprocess trainers): a py_test tagged `tags = ["slow"]`. Under pytest,
every test of such a file carries the `slow` marker, so

  bash scripts/test.sh -m "not slow"

runs the fast subset, while `bash scripts/test.sh` still runs everything
(tests/suites/markers_test.py checks both). Bazel runs each file as a
program and does not read this file.
"""

import ast
import os
from typing import FrozenSet, List

import pytest

from tests.support import fixtures

SLOW = 'slow'


def slow_test_files(build_path: str = fixtures.repo_path('BUILD')
                    ) -> FrozenSet[str]:
  """The sources of BUILD's py_test targets tagged slow.

  BUILD is Starlark, whose calls, lists and strings are Python's syntax; the
  `srcs` and `tags` of a py_test are plain literals.

  Args:
    build_path: path of the BUILD file.

  Returns:
    Repository-relative paths, e.g. 'tests/agents/learning_test.py'.
  """
  with open(build_path, encoding='utf-8') as build:
    tree = ast.parse(build.read(), filename=build_path)
  slow = set()
  for statement in tree.body:
    call = getattr(statement, 'value', None)
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and
            call.func.id == 'py_test'):
      continue
    attributes = {keyword.arg: keyword.value for keyword in call.keywords}
    if 'tags' in attributes and SLOW in ast.literal_eval(attributes['tags']):
      slow.update(ast.literal_eval(attributes['srcs']))
  return frozenset(slow)


def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line(
      'markers', f'{SLOW}: a test of a file BUILD tags slow (training runs, '
      'trainer subprocesses); deselect with -m "not slow".')


def pytest_collection_modifyitems(config: pytest.Config,
                                  items: List[pytest.Item]) -> None:
  del config
  slow = slow_test_files()
  for item in items:
    if os.path.relpath(str(item.path), fixtures.REPO_ROOT) in slow:
      item.add_marker(SLOW)
