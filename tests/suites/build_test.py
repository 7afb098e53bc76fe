"""Checks that the BUILD files mirror the Python modules, without Bazel.

`bazel test //...` only runs what the BUILD files list, and the venv's
editable install can hide a missing dependency; these checks catch both
under plain pytest: one target per .py file, named after it; each test file
a sized py_test that Bazel can run as a program; test folders mirroring the
package; strict dependencies (every first-party import provided by the
target or a direct dependency, every package's `__init__.py` a transitive
one).
"""

import ast
import os

from absl.testing import absltest

from tests.support import build_files
from tests.support import fixtures

FIRST_PARTY = build_files.FIRST_PARTY
SIZES = ('small', 'medium', 'large', 'enormous')
# The rules whose sources are Python modules.
_PYTHON_RULES = ('py_library', 'py_test')


def parse_builds():
  """Returns {label: target} for the targets of every BUILD file."""
  targets = {}
  for path in build_files.build_files(fixtures.REPO_ROOT):
    for name, target in build_files.parse(fixtures.REPO_ROOT, path).items():
      targets[name] = target
  return targets


def python_files():
  """Returns the repository-relative paths of the first-party .py files."""
  return build_files.first_party_files(fixtures.REPO_ROOT, '.py')


def _module_file(module):
  """The file defining dotted `module`, or None if it is not first-party."""
  if module.split('.')[0] not in FIRST_PARTY:
    return None
  base = module.replace('.', '/')
  for candidate in (base + '.py', base + '/__init__.py'):
    if os.path.isfile(fixtures.repo_path(candidate)):
      return candidate
  raise AssertionError(f'first-party module {module!r} has no file')


def first_party_imports(path):
  """Returns the first-party files that the module at `path` imports."""
  with open(fixtures.repo_path(path), encoding='utf-8') as source:
    tree = ast.parse(source.read(), filename=path)
  package = os.path.dirname(path).replace('/', '.')
  imported = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        parts = package.split('.')
        base = '.'.join(parts[:len(parts) - node.level + 1])
        module = f'{base}.{node.module}' if node.module else base
      else:
        module = node.module
      # `from a.b import c` imports module a.b.c if there is one, else a
      # name defined in a.b.
      modules = []
      for alias in node.names:
        submodule = f'{module}.{alias.name}'
        if (module.split('.')[0] in FIRST_PARTY and os.path.isfile(
            fixtures.repo_path(submodule.replace('.', '/') + '.py'))):
          modules.append(submodule)
        else:
          modules.append(module)
    else:
      continue
    for module in modules:
      file = _module_file(module)
      if file is not None and file != path:
        imported.add(file)
  return imported


def _has_absltest_main_guard(path):
  with open(fixtures.repo_path(path), encoding='utf-8') as source:
    tree = ast.parse(source.read(), filename=path)
  for statement in tree.body:
    if (isinstance(statement, ast.If) and
        ast.unparse(statement.test).replace('"', "'") ==
        "__name__ == '__main__'"):
      return any('absltest.main(' in ast.unparse(inner)
                 for inner in statement.body)
  return False


def _module_target(path):
  """The label of the target of module `path`: '//package:module', but for
  a package's __init__.py (named after the package) and __main__.py
  ('main')."""
  package, name = os.path.split(path)
  name = name[:-len('.py')]
  name = {'__init__': os.path.basename(package), '__main__': 'main'}.get(
      name, name)
  return f'//{package}:{name}'


# The longest a module of the package may be, in lines.
_MAX_MODULE_LINES = 800


class BuildTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.targets = parse_builds()
    cls.owner = {}
    for name, target in cls.targets.items():
      if target['rule'] not in _PYTHON_RULES:
        continue
      for src in target.get('srcs', []):
        if src in cls.owner:
          raise AssertionError(
              f'{src} is in both {cls.owner[src]} and {name}')
        cls.owner[src] = name

  def _transitive_srcs(self, name):
    seen, stack, srcs = set(), [name], set()
    while stack:
      current = stack.pop()
      if current in seen:
        continue
      seen.add(current)
      srcs.update(self.targets[current].get('srcs', []))
      stack += self.targets[current].get('deps', [])
    return srcs

  def test_every_python_file_has_one_target(self):
    missing = [path for path in python_files() if path not in self.owner]
    self.assertEmpty(missing, 'files without a BUILD target')

  def test_every_python_package_has_a_build_file(self):
    packages = {os.path.dirname(path) for path in python_files()
                if os.path.basename(path) == '__init__.py'}
    self.assertEmpty(
        sorted(package for package in packages if not os.path.isfile(
            fixtures.repo_path(package, 'BUILD'))), 'packages without BUILD')

  def test_targets_are_named_after_their_modules(self):
    for path, name in self.owner.items():
      self.assertEqual(name, _module_target(path), path)

  def test_all_sources_names_every_package(self):
    expected = {build_files.label(os.path.dirname(path), ':sources')
                for path in build_files.build_files(fixtures.REPO_ROOT)}
    for name in expected:
      self.assertEqual(self.targets.get(name, {}).get('rule'), 'filegroup',
                       f'no filegroup {name}')
    self.assertCountEqual(self.targets['//:all_sources']['srcs'], expected)

  def test_listed_sources_exist(self):
    for src, name in self.owner.items():
      self.assertTrue(os.path.isfile(fixtures.repo_path(src)),
                      f'{name} lists missing {src}')

  def test_labels_name_targets(self):
    for name, target in self.targets.items():
      for dep in target.get('deps', []):
        self.assertIn(dep, self.targets, f'{name} -> {dep}')

  def test_test_files_are_py_tests(self):
    for path in python_files():  # Others: test_libraries_are_py_libraries.
      if not (path.startswith('tests/') and path.endswith('_test.py')):
        continue
      with self.subTest(path=path):
        name = _module_target(path)
        target = self.targets.get(name)
        self.assertIsNotNone(target, f'no target {name}')
        self.assertEqual(target['rule'], 'py_test')
        self.assertEqual(target['srcs'], [path])
        self.assertIn(target.get('size'), SIZES, f'{name} needs a size')

  def test_test_folders_mirror_the_package(self):
    subpackages = {name for name in os.listdir(fixtures.repo_path(
        'dopamine_per')) if os.path.isfile(
            fixtures.repo_path('dopamine_per', name, '__init__.py'))}
    self.assertContainsSubset({'agents', 'discrete_domains', 'distributed',
                               'file_io', 'replay_memory'}, subpackages)
    for path in python_files():
      parts = path.split('/')
      if parts[0] != 'tests' or len(parts) == 2:
        continue
      with self.subTest(path=path):
        self.assertLen(parts, 3, 'tests/ folders are one level deep')
        if parts[1] == 'support':
          self.assertFalse(path.endswith('_test.py'),
                           'tests/support/ holds helpers, not tests')
        else:
          self.assertIn(parts[1], subpackages | {'suites'})

  def test_test_files_call_absltest_main(self):
    lacking = [path for path in python_files()
               if path.startswith('tests/') and path.endswith('_test.py')
               and not _has_absltest_main_guard(path)]
    self.assertEmpty(
        lacking, "test files without `if __name__ == '__main__': "
        'absltest.main()`, which Bazel needs to run them')

  def test_library_modules_are_short(self):
    # One concept per module (issue 13): none grows past _MAX_MODULE_LINES.
    for path in python_files():
      if path.startswith('dopamine_per/'):
        with open(fixtures.repo_path(path), encoding='utf-8') as module:
          lines = sum(1 for _ in module)
        self.assertLessEqual(lines, _MAX_MODULE_LINES, path)

  def test_libraries_are_py_libraries(self):
    for path in python_files():
      if not path.endswith('_test.py'):
        self.assertEqual(self.targets[self.owner[path]]['rule'], 'py_library',
                         path)

  def test_strict_dependencies(self):
    for path in python_files():
      name = self.owner.get(path)
      if name is None:
        continue  # Reported by test_every_python_file_has_one_target.
      provided = {name} | set(self.targets[name].get('deps', []))
      for imported in sorted(first_party_imports(path)):
        with self.subTest(path=path, imports=imported):
          self.assertIn(self.owner.get(imported), provided,
                        f'{name} imports {imported} (target '
                        f'{self.owner.get(imported)}) without depending on it')

  def test_package_init_files_are_dependencies(self):
    for name, target in self.targets.items():
      if target['rule'] not in _PYTHON_RULES:
        continue
      available = self._transitive_srcs(name)
      for src in target.get('srcs', []):
        directory = os.path.dirname(src)
        while directory:
          init = f'{directory}/__init__.py'
          if os.path.isfile(fixtures.repo_path(init)):
            self.assertIn(init, available, f'{name} needs {init}')
          directory = os.path.dirname(directory)


if __name__ == '__main__':
  absltest.main()
