"""pytest configuration: the `slow` marker, taken from the BUILD files' tags.

Every test of a py_test tagged `tags = ["slow"]` carries it, so that
`bash scripts/test.sh -m "not slow"` runs the fast subset.
"""

import os
from typing import FrozenSet, List

import pytest

from tests.support import build_files
from tests.support import fixtures

SLOW = 'slow'


def slow_test_files(root: str = fixtures.REPO_ROOT) -> FrozenSet[str]:
  """Root-relative sources of the py_test targets tagged slow in BUILD files."""
  slow = set()
  for path in build_files.build_files(root):
    for target in build_files.parse(root, path).values():
      if target['rule'] == 'py_test' and SLOW in target.get('tags', []):
        slow.update(target['srcs'])
  return frozenset(slow)


def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line(
      'markers', f'{SLOW}: a test of a file a BUILD tags slow (training runs, '
      'trainer subprocesses); deselect with -m "not slow".')


def pytest_collection_modifyitems(config: pytest.Config,
                                  items: List[pytest.Item]) -> None:
  del config
  slow = slow_test_files()
  for item in items:
    if os.path.relpath(str(item.path), fixtures.REPO_ROOT) in slow:
      item.add_marker(SLOW)
