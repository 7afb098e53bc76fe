"""Reads the repository's BUILD files without Bazel.

tests/conftest.py reads which test files are slow from them,
tests/suites/build_test.py checks what they list. Starlark's calls, lists
and strings are Python's; attribute values may be literals,
`glob([...], exclude=[...])` and `+`.
"""

import ast
import glob
import os
from typing import Any, Dict, List

__all__ = ['FIRST_PARTY', 'build_files', 'first_party_files', 'label',
           'parse']

# The top-level folders whose packages hold BUILD files.
FIRST_PARTY = ('dopamine_per', 'benchmarks', 'tests')

# Attributes that name files: their plain strings are paths in the package.
_FILE_ATTRIBUTES = ('srcs', 'hdrs', 'data')

# Calls of a BUILD file that declare no target.
_NOT_TARGETS = ('load', 'package', 'exports_files')


def first_party_files(root: str, suffix: str) -> List[str]:
  """Root-relative paths of the files of FIRST_PARTY ending in `suffix`."""
  found = []
  for top in FIRST_PARTY:
    for directory, subdirectories, files in os.walk(os.path.join(root, top)):
      subdirectories[:] = sorted(d for d in subdirectories
                                 if not d.startswith(('.', '__pycache__')))
      found += [os.path.relpath(os.path.join(directory, name), root)
                for name in sorted(files) if name.endswith(suffix)]
  return found


def build_files(root: str) -> List[str]:
  """Paths of the BUILD files below `root`: 'BUILD', then the rest sorted."""
  found = ['BUILD'] if os.path.isfile(os.path.join(root, 'BUILD')) else []
  return found + [path for path in first_party_files(root, 'BUILD')
                  if os.path.basename(path) == 'BUILD']


def label(package: str, text: str) -> str:
  """The full label ('//package:name') of `text`, written in `package`.

  Args:
    package: the BUILD file's root-relative directory ('' for the root's).
    text: ':name', '//other:name' or '//other' ('//other:last component').

  Raises:
    ValueError: If `text` is not a label of this repository.
  """
  if text.startswith(':'):
    return f'//{package}{text}'
  if not text.startswith('//'):
    raise ValueError(f'not a label of this repository: {text!r}')
  if ':' in text:
    return text
  return f'{text}:{text.rsplit("/", 1)[-1]}'


def parse(root: str, path: str) -> Dict[str, Dict[str, Any]]:
  """The targets of the BUILD file at root-relative `path`.

  Returns:
    {label: {'rule': str, 'package': str, attribute: value}}: files (in
    srcs, hdrs and data) as root-relative paths, labels as full labels.

  Raises:
    ValueError: If two targets have one name.
  """
  package = os.path.dirname(path)
  with open(os.path.join(root, path), encoding='utf-8') as build:
    tree = ast.parse(build.read(), filename=path)
  targets = {}
  for statement in tree.body:
    if not (isinstance(statement, ast.Expr) and
            isinstance(statement.value, ast.Call) and
            isinstance(statement.value.func, ast.Name)):
      continue
    call = statement.value
    if call.func.id in _NOT_TARGETS:
      continue
    target = {'rule': call.func.id, 'package': package}
    for keyword in call.keywords:
      value = _evaluate(keyword.value, root, package)
      if keyword.arg in _FILE_ATTRIBUTES:
        value = [label(package, item) if item.startswith((':', '//'))
                 else os.path.normpath(os.path.join(package, item))
                 for item in value]
      elif keyword.arg == 'deps':
        value = [label(package, item) for item in value]
      target[keyword.arg] = value
    name = label(package, ':' + target['name'])
    if name in targets:
      raise ValueError(f'duplicate target {name}')
    targets[name] = target
  return targets


def _evaluate(node: ast.AST, root: str, package: str) -> Any:
  """A BUILD attribute's value: a literal, a glob (package-relative) or a
  sum."""
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
    return (_evaluate(node.left, root, package) +
            _evaluate(node.right, root, package))
  if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
      node.func.id == 'glob'):
    return _glob(root, package, ast.literal_eval(node.args[0]), [
        pattern for keyword in node.keywords if keyword.arg == 'exclude'
        for pattern in ast.literal_eval(keyword.value)])
  return ast.literal_eval(node)


def _glob(root: str, package: str, patterns: List[str],
          exclude: List[str]) -> List[str]:
  """Bazel's glob: the package's files (not its subpackages') matching."""
  directory = os.path.join(root, package)

  def matches(pattern):
    return {os.path.relpath(match, directory)
            for match in glob.glob(os.path.join(directory, pattern),
                                   recursive=True) if os.path.isfile(match)}

  found = set()
  for pattern in patterns:
    found |= matches(pattern)
  for pattern in exclude:
    found -= matches(pattern)
  return sorted(path for path in found
                if not _in_subpackage(directory, path))


def _in_subpackage(directory: str, path: str) -> bool:
  """Whether `path`, relative to `directory`, lies below another BUILD."""
  parent = os.path.dirname(path)
  while parent:
    if os.path.isfile(os.path.join(directory, parent, 'BUILD')):
      return True
    parent = os.path.dirname(parent)
  return False
