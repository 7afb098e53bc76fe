"""Checks that docs/architecture.md names only what the code has.

Its backticked names are read without importing anything (several modules
need TensorFlow or Ray), and each must exist:

- a path: a file or directory of the repository (a bare file name may lie
  in any directory);
- a dotted name headed by a module of the package or a class it defines
  (`storage.BufferPool.carved`): each further name is defined there (a
  function, class, assignment, import, or attribute set on `self`);
- a plain identifier with an underscore (an English word has none): a name
  the package's Python or C++ code uses, or a module's;
- `python -m MODULE`: a module of the repository that runs as a program;
- the "Modules" section: each bullet heads with modules of its package,
  and every module and native source of the package is named somewhere.

Links to `architecture.md#anchor` anywhere in the repository must name one
of its headings.
"""

import ast
import builtins
import os
import re
from typing import Dict, List, Optional, Set, Tuple

from absl.testing import absltest

from tests.support import fixtures

ARCHITECTURE = 'docs/architecture.md'
PACKAGE = 'dopamine_per'

# Extensions of repository files a backticked name may be (runtime files,
# such as statistics.jsonl or learning_curve.png, are not checked).
_SOURCE_EXTENSIONS = ('.py', '.cc', '.h', '.md', '.gin', '.sh')
_RUNTIME_EXTENSIONS = ('.png', '.json', '.jsonl', '.gz', '.npy', '.so',
                       '.sha256', '.tmp', '.txt')
_BACKTICKED = re.compile(r'`([^`\n]+)`')
_IDENTIFIER = r'[A-Za-z_][A-Za-z0-9_]*'
_DOTTED = re.compile(r'^({0}(?:\.{0})+)(?:\(\))?$'.format(_IDENTIFIER))
_PLAIN = re.compile(r'^(_*[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]*)(?:\(.*\))?$')
_PATH = re.compile(r'^[A-Za-z0-9_.\-/]+$')
_MODULE_COMMAND = re.compile(r'^python -m ({0}(?:\.{0})*)'.format(_IDENTIFIER))
_HEADING = re.compile(r'^#+ (.*)$', re.MULTILINE)
_ANCHOR_LINK = re.compile(r'architecture\.md#([a-z0-9_-]+)')
_PACKAGE_LINE = re.compile(r'^`({0}(?:\.{0})*)`.*:$'.format(_IDENTIFIER))
_BULLET_HEAD = re.compile(r'^- (.*?):( |$)')
_CC_COMMENT_OR_STRING = re.compile(
    r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.DOTALL)


def _read(path: str) -> str:
  with open(fixtures.repo_path(path), encoding='utf-8') as f:
    return f.read()


def _repository_files() -> List[str]:
  """Repository-relative paths of every file and directory, sorted."""
  found = []
  for root, directories, files in os.walk(fixtures.REPO_ROOT):
    directories[:] = [d for d in directories
                      if not d.startswith('.') and d != '__pycache__']
    relative = os.path.relpath(root, fixtures.REPO_ROOT)
    for name in directories + files:
      found.append(os.path.normpath(os.path.join(relative, name)))
  return sorted(found)


def _modules() -> Dict[str, str]:
  """{'dopamine_per.replay_memory.sum_tree': path} for the package.

  Packages map to their __init__.py.
  """
  modules = {}
  for path in _repository_files():
    if path.startswith(PACKAGE + '/') and path.endswith('.py'):
      name = path[:-len('.py')].replace('/', '.')
      if name.endswith('.__init__'):
        name = name[:-len('.__init__')]
      modules[name] = path
  return modules


class _Definitions(object):
  """The names a Python module defines, and those of its classes."""

  def __init__(self, source: str):
    tree = ast.parse(source)
    self.names: Set[str] = set()
    self.classes: Dict[str, Set[str]] = {}
    for node in tree.body:
      self.names.update(self._defined(node))
      if isinstance(node, ast.ClassDef):
        members = set()
        for child in node.body:
          members.update(self._defined(child))
        for child in ast.walk(node):
          if (isinstance(child, ast.Attribute) and
              isinstance(child.ctx, ast.Store) and
              isinstance(child.value, ast.Name) and child.value.id == 'self'):
            members.add(child.attr)
        self.classes[node.name] = members

  @staticmethod
  def _defined(node: ast.AST) -> Set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      return {(a.asname or a.name).split('.')[0] for a in node.names}
    names = set()
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      for target in targets:
        for child in ast.walk(target):
          if isinstance(child, ast.Name):
            names.add(child.id)
    if isinstance(node, (ast.If, ast.Try)):  # Guarded definitions.
      for child in ast.iter_child_nodes(node):
        names.update(_Definitions._defined(child))
    return names


def _python_names(source: str) -> Set[str]:
  """Every identifier a Python module uses: names, attributes, arguments,
  definitions, keywords, and string constants that are identifiers."""
  names = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Name):
      names.add(node.id)
    elif isinstance(node, ast.Attribute):
      names.add(node.attr)
    elif isinstance(node, ast.arg):
      names.add(node.arg)
    elif isinstance(node, ast.keyword) and node.arg:
      names.add(node.arg)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                           ast.ClassDef)):
      names.add(node.name)
    elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and
          re.fullmatch(_IDENTIFIER, node.value)):
      names.add(node.value)
  return names


def _cc_names(source: str) -> Set[str]:
  """The identifiers of C++ code, its comments and strings removed."""
  code = _CC_COMMENT_OR_STRING.sub(' ', source)
  return set(re.findall(_IDENTIFIER, code))


def github_anchor(heading: str) -> str:
  """The anchor GitHub gives a Markdown heading."""
  anchor = heading.strip().lower().replace('`', '')
  anchor = re.sub(r'[^\w\- ]', '', anchor)
  return anchor.replace(' ', '-')


class Repository(object):
  """What the checks compare a document's names with."""

  def __init__(self):
    self.files = _repository_files()
    self.modules = _modules()
    self._definitions: Dict[str, _Definitions] = {}
    self.code_names: Set[str] = set(dir(builtins))
    self.classes: Dict[str, List[str]] = {}  # class name -> module names
    for name, path in self.modules.items():
      source = _read(path)
      self.code_names |= _python_names(source)
      for class_name in self.definitions(name).classes:
        self.classes.setdefault(class_name, []).append(name)
    for path in self.files:
      if path.startswith(PACKAGE + '/') and path.endswith(('.cc', '.h')):
        self.code_names |= _cc_names(_read(path))
      if path.endswith('.py'):  # Modules, packages and tests by name.
        self.code_names.update(path[:-len('.py')].split('/'))

  def definitions(self, module: str) -> _Definitions:
    if module not in self._definitions:
      self._definitions[module] = _Definitions(_read(self.modules[module]))
    return self._definitions[module]

  def path_exists(self, path: str) -> bool:
    """Whether a file or directory ends with `path` (whole components)."""
    path = os.path.normpath(path.rstrip('/'))
    return any(f == path or f.endswith('/' + path) for f in self.files)

  def runnable(self, dotted: str) -> bool:
    """Whether `python -m dotted` names a module of the repository."""
    path = dotted.replace('.', '/')
    return any(p in self.files for p in (path + '.py',
                                         path + '/__main__.py'))

  def modules_named(self, dotted: str) -> List[str]:
    """The package's modules whose dotted name ends with `dotted`."""
    return [m for m in self.modules
            if m == dotted or m.endswith('.' + dotted)]

  def _has(self, module: str, names: List[str]) -> bool:
    """Whether `module` defines names[0], names[1] in its class, ..."""
    definitions = self.definitions(module)
    if names[0] not in definitions.names:
      return False
    if len(names) == 1:
      return True
    members = definitions.classes.get(names[0])
    return members is not None and len(names) == 2 and names[1] in members

  def dotted_problem(self, dotted: str) -> Optional[str]:
    """Why `dotted` does not resolve, None if it does or is not ours."""
    parts = dotted.split('.')
    for split in range(len(parts), 0, -1):
      modules = self.modules_named('.'.join(parts[:split]))
      if modules:
        rest = parts[split:]
        if not rest or any(self._has(m, rest) for m in modules):
          return None
        return '{}: {} has no {}'.format(dotted, ' or '.join(modules),
                                         '.'.join(rest))
    if parts[0] in self.classes and len(parts) == 2:
      if any(parts[1] in self.definitions(m).classes[parts[0]]
             for m in self.classes[parts[0]]):
        return None
      return '{}: class {} has no {}'.format(dotted, parts[0], parts[1])
    if '_' in parts[0] and parts[0] not in self.code_names:
      return '{}: no module or class {}'.format(dotted, parts[0])
    return None  # Not a name of the package (tf.data, sys.setprofile, ...).


def document_problems(text: str, repository: Repository) -> List[str]:
  """What the document's backticked names get wrong (see the module doc)."""
  problems = []
  for span in _BACKTICKED.findall(text):
    span = span.strip()
    command = _MODULE_COMMAND.match(span)
    if command:
      if not repository.runnable(command.group(1)):
        problems.append('{}: no such module'.format(span))
      continue
    if ' ' in span or '://' in span or span.endswith(_RUNTIME_EXTENSIONS):
      continue
    if '/' in span or span.endswith(_SOURCE_EXTENSIONS):
      if _PATH.match(span) and not repository.path_exists(span):
        problems.append('{}: no such file or directory'.format(span))
      continue
    dotted = _DOTTED.match(span)
    if dotted:
      problem = repository.dotted_problem(dotted.group(1))
      if problem:
        problems.append(problem)
      continue
    plain = _PLAIN.match(span)
    if plain and plain.group(1) not in repository.code_names:
      problems.append('{}: not a name the code uses'.format(span))
  return problems


def _modules_section(text: str) -> str:
  after = re.split(r'^## Modules\n', text, maxsplit=1, flags=re.MULTILINE)
  return re.split(r'^## ', after[-1], maxsplit=1, flags=re.MULTILINE)[0]


def module_list_problems(text: str, repository: Repository) -> List[str]:
  """Bullets of "Modules" that head with what their package lacks."""
  problems = []
  package = None
  for line in _modules_section(text).splitlines():
    heading = _PACKAGE_LINE.match(line)
    if heading:
      package = heading.group(1)
      continue
    bullet = _BULLET_HEAD.match(line)
    if not bullet or package is None:
      continue
    for name in _BACKTICKED.findall(bullet.group(1)):
      module = '{}.{}'.format(package, name)
      directory = package.replace('.', '/')
      if (module not in repository.modules and
          not repository.path_exists(os.path.join(directory, name))):
        problems.append('{}: not a module or file of {}'.format(name, package))
  return problems


def unnamed_modules(text: str, repository: Repository) -> List[str]:
  """The package's modules and native sources the document never names."""
  named = set()
  for span in _BACKTICKED.findall(text):
    named.update(re.split(r'[./ ()]', span))
    named.add(os.path.basename(span))
  missing = []
  for module in repository.modules:
    last = module.split('.')[-1]
    if last not in named and last != '__main__' and module != PACKAGE:
      missing.append(module)
  for path in repository.files:
    if (path.startswith(PACKAGE + '/') and path.endswith(('.cc', '.h')) and
        os.path.basename(path) not in named):
      missing.append(path)
  return sorted(missing)


def anchor_problems(repository: Repository) -> List[str]:
  """Links to architecture.md#anchor whose anchor is not a heading."""
  anchors = {github_anchor(h) for h in _HEADING.findall(_read(ARCHITECTURE))}
  problems = []
  for path in repository.files:
    if not (path.endswith(('.md', '.py', '.cc', '.h')) and
            path.startswith(('README', 'docs/', PACKAGE + '/', 'tests/',
                             'benchmarks/'))):
      continue
    if (os.path.isdir(fixtures.repo_path(path)) or
        path == 'tests/suites/docs_test.py'):
      continue
    for anchor in _ANCHOR_LINK.findall(_read(path)):
      if anchor not in anchors:
        problems.append('{}: architecture.md#{}'.format(path, anchor))
  return problems


class ArchitectureDocTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.repository = Repository()
    cls.text = _read(ARCHITECTURE)

  def test_named_files_modules_and_functions_exist(self):
    self.assertEmpty(document_problems(self.text, self.repository))

  def test_module_list_heads_name_modules(self):
    self.assertEmpty(module_list_problems(self.text, self.repository))

  def test_every_module_is_described(self):
    self.assertEmpty(unnamed_modules(self.text, self.repository))

  def test_links_into_it_name_its_headings(self):
    self.assertEmpty(anchor_problems(self.repository))

  def test_checks_many_names(self):
    # The patterns still match the document: a change of style that made
    # them match nothing would pass every test above vacuously.
    spans = _BACKTICKED.findall(self.text)
    dotted = [s for s in spans if _DOTTED.match(s)]
    paths = [s for s in spans if '/' in s or s.endswith(_SOURCE_EXTENSIONS)]
    plain = [s for s in spans if _PLAIN.match(s)]
    self.assertGreater(len(dotted), 10)
    self.assertGreater(len(paths), 5)
    self.assertGreater(len(plain), 30)

  def test_the_checks_catch_what_was_removed(self):
    # Names the document once carried that no longer hold, and made-up ones.
    stale = '\n'.join([
        'its `prioritized_replay_buffer._gather` holds the tree lock;',
        'the kernels `numba_kernels.NumbaKernels` and `numba_kernels`;',
        '`native/replay_numba.cc`, `replay_numba.h`, `fast_kernels.py`;',
        '`MADV_HUGEPAGE` and `guest_halt_poll_ns`;',
        '`storage.BufferPool.gather`, `BufferPool.gather()`;',
        '`python -m dopamine_per.native.compile`.',
    ])
    problems = document_problems(stale, self.repository)
    for name in ('prioritized_replay_buffer._gather', 'numba_kernels.',
                 'numba_kernels:', 'native/replay_numba.cc', 'replay_numba.h',
                 'fast_kernels.py', 'MADV_HUGEPAGE', 'guest_halt_poll_ns',
                 'storage.BufferPool.gather', 'BufferPool.gather',
                 'python -m dopamine_per.native.compile'):
      self.assertTrue(any(p.startswith(name) for p in problems),
                      (name, problems))
    self.assertLen(problems, 11, problems)
    # Ordinary words and other libraries' names are not checked.
    self.assertEmpty(document_problems(
        '`session.run`, `tf.numpy_function`, `sys.setprofile`, `Runner`, '
        '`statistics.jsonl`, `gs://`, `capacity <= 16`, `kernels=\'native\'`',
        self.repository))
    modules = ('## Modules\n\n`dopamine_per.replay_memory`:\n\n'
               '- `sum_tree`: the tree.\n- `numba_kernels`: removed.\n'
               '\n## Next\n')
    self.assertEqual(module_list_problems(modules, self.repository),
                     ['numba_kernels: not a module or file of '
                      'dopamine_per.replay_memory'])
    self.assertIn('dopamine_per.distributed.locking',
                  unnamed_modules('`sum_tree`', self.repository))

  def test_anchors_are_github_s(self):
    self.assertEqual(github_anchor("The sum tree's flat layout"),
                     'the-sum-trees-flat-layout')
    self.assertEqual(github_anchor('The path of a sampled batch'),
                     'the-path-of-a-sampled-batch')


if __name__ == '__main__':
  absltest.main()
