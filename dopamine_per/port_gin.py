# coding=utf-8
r"""Ports Dopamine gin files to dopamine_per by rewriting their imports.

  python -m dopamine_per.port_gin my_config.gin > ported.gin
  python -m dopamine_per.port_gin --in_place configs/*.gin

Only ``import`` and ``from ... import`` statements change; comments,
bindings and all other text (spacing, line endings) are kept byte for byte:

  dopamine.tf.agents.PKG.MODULE      -> dopamine_per.agents.MODULE
  dopamine.agents.PKG.MODULE         -> dopamine_per.agents.MODULE
  dopamine.discrete_domains.MODULE   -> dopamine_per.discrete_domains.MODULE
  dopamine.tf.replay_memory.MODULE   -> dopamine_per.replay_memory.MODULE
  dopamine.replay_memory.MODULE      -> dopamine_per.replay_memory.MODULE
  gin.tf.external_configurables      -> dopamine_per.external_configurables

The gin names bound in the files (``RainbowAgent.num_atoms``,
``create_gym_environment.version``, ...) are the same in both packages.

An import of a Dopamine module that has no counterpart here (a JAX agent,
``dopamine.labs``, ...) is an error naming the file and line, and nothing is
written: left in place it would fail when gin loads the file, and dropped,
its bindings would. Exit status: 0 when every file was ported, 1 for such an
import, 2 for a usage error (a file that cannot be read).
"""

import argparse
import functools
import importlib.util
import io
import os
import re
import stat
import sys
import tokenize
from typing import List, Optional, Sequence

from dopamine_per.file_io import atomic_files

__all__ = ['PortError', 'port', 'port_module', 'main']

# (Dopamine module pattern, dopamine_per module), tried in order; the
# patterns must match the whole module path.
_RULES = (
    (re.compile(r'dopamine\.(?:tf\.)?agents\.\w+\.(\w+)'),
     r'dopamine_per.agents.\1'),
    (re.compile(r'dopamine\.discrete_domains\.(\w+)'),
     r'dopamine_per.discrete_domains.\1'),
    (re.compile(r'dopamine\.(?:tf\.)?replay_memory\.(\w+)'),
     r'dopamine_per.replay_memory.\1'),
    (re.compile(r'gin\.tf\.external_configurables'),
     'dopamine_per.external_configurables'),
)

# The statements gin accepts: `import a.b.c [as x]` and
# `from a.b import c [as x]`. `rest` keeps an alias and a trailing comment.
_IMPORT = re.compile(r'(?P<head>\s*import\s+)(?P<module>[\w.]+)(?P<rest>.*)',
                     re.DOTALL)
_FROM_IMPORT = re.compile(
    r'(?P<head>\s*from\s+)(?P<package>[\w.]+)(?P<middle>\s+import\s+)'
    r'(?P<name>\w+)(?P<rest>.*)', re.DOTALL)

# Tokens that may come before the first token of a statement.
_NOT_A_STATEMENT = frozenset([tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT,
                              tokenize.INDENT, tokenize.DEDENT,
                              tokenize.ENCODING])


class PortError(ValueError):
  """A gin file's line that cannot be ported.

  Attributes:
    line_number: int, the 1-based number of the line.
    reason: str, what is wrong with it.
  """

  def __init__(self, line_number: int, reason: str):
    super().__init__('line {}: {}'.format(line_number, reason))
    self.line_number = line_number
    self.reason = reason


def _exists(module: str) -> bool:
  """Whether a dopamine_per module can be imported (without importing it)."""
  try:
    return importlib.util.find_spec(module) is not None
  except ImportError:
    return False


def port_module(module: str) -> str:
  """Returns the dopamine_per module to import instead of `module`.

  Args:
    module: str, a dotted module path from a gin import.

  Returns:
    str, `module` itself when it is not Dopamine's (nor
    ``gin.tf.external_configurables``), else its dopamine_per counterpart.

  Raises:
    ValueError: If `module` is Dopamine's and has no counterpart here.
  """
  for pattern, replacement in _RULES:
    if pattern.fullmatch(module):
      ported = pattern.sub(replacement, module)
      if not _exists(ported):
        raise ValueError(
            '{} has no dopamine_per equivalent ({} does not exist)'.format(
                module, ported))
      return ported
  if module == 'dopamine' or module.startswith('dopamine.'):
    raise ValueError('{} has no dopamine_per equivalent'.format(module))
  return module


def _port_line(line: str) -> str:
  """Returns an import statement's line with its module ported."""
  match = _FROM_IMPORT.fullmatch(line)
  if match:
    full = '{}.{}'.format(match['package'], match['name'])
    package, name = port_module(full).rsplit('.', 1)
    return (match['head'] + package + match['middle'] + name +
            match['rest'])
  match = _IMPORT.fullmatch(line)
  if match:
    return match['head'] + port_module(match['module']) + match['rest']
  return line  # Not a one-line import (gin would reject it anyway).


def _import_line_numbers(lines: Sequence[str]) -> List[int]:
  """Returns the 0-based numbers of the lines that start an import.

  Gin files are read with Python's tokenizer (as gin does), so a line inside
  a multi-line string that happens to start with ``import`` is not one.
  """
  numbers = []
  at_statement_start = True
  tokens = tokenize.generate_tokens(functools.partial(next, iter(lines), ''))
  try:
    for token in tokens:
      if token.type in _NOT_A_STATEMENT:
        if token.type in (tokenize.NEWLINE, tokenize.NL):
          at_statement_start = True
        continue
      if (at_statement_start and token.type == tokenize.NAME and
          token.string in ('import', 'from')):
        numbers.append(token.start[0] - 1)
      at_statement_start = False
  except tokenize.TokenError as e:  # args: (message, (line, column))
    raise PortError(e.args[1][0], 'cannot be read as gin: {}'.format(
        e.args[0])) from e
  except SyntaxError as e:  # An inconsistent dedent.
    raise PortError(e.lineno, 'cannot be read as gin: {}'.format(
        e.msg)) from e
  return numbers


def port(text: str) -> str:
  """Returns a Dopamine gin file's text with its imports ported.

  Only the module paths of ``import`` and ``from ... import`` statements
  change (see the module docstring for the table); everything else is kept
  as it is, line endings included.

  Args:
    text: str, the content of a gin file.

  Returns:
    str, the content for dopamine_per.

  Raises:
    PortError: If an import of a Dopamine module has no counterpart here,
      or the text cannot be tokenized; it names the line.
  """
  # newline='' splits lines as the tokenizer counts them and keeps '\r\n'.
  lines = io.StringIO(text, newline='').readlines()
  for number in _import_line_numbers(lines):
    try:
      lines[number] = _port_line(lines[number])
    except ValueError as e:
      raise PortError(number + 1, str(e)) from e
  return ''.join(lines)


def _write_in_place(path: str, text: str) -> None:
  """Replaces `path`'s content atomically, keeping its permissions.

  A symbolic link is followed: the file it points to is replaced.
  """
  target = os.path.realpath(path)
  mode = stat.S_IMODE(os.stat(target).st_mode)
  atomic_files.atomic_write(target, lambda f: f.write(text.encode('utf-8')))
  # atomic_write gives a new file 0666 less the umask; keep the old mode.
  os.chmod(target, mode)


def _parser() -> argparse.ArgumentParser:
  doc = __doc__.split('\n\n')
  parser = argparse.ArgumentParser(
      prog='python -m dopamine_per.port_gin',
      description=doc[0] + '\n\n' + '\n\n'.join(doc[2:]),
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('files', nargs='+', metavar='FILE.gin',
                      help='Dopamine gin files to port.')
  parser.add_argument(
      '--in_place', action='store_true',
      help='Rewrite each file atomically (a temporary file, then '
      'os.replace) instead of printing the ported text to stdout. Files '
      'that need no change are not rewritten.')
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Ports the gin files named in `argv`; returns the exit status.

  Every file is read and ported before anything is printed or written, so
  an error in one file leaves all of them unchanged.

  Args:
    argv: the command-line arguments, without the program name (None:
      ``sys.argv[1:]``).

  Returns:
    int: 0 on success, 1 for an import that cannot be ported, 2 for a file
    that cannot be read (argparse also exits with 2 for bad arguments).
  """
  args = _parser().parse_args(argv)
  ported = []
  for path in args.files:
    try:
      with open(path, encoding='utf-8', newline='') as f:
        text = f.read()
    except (OSError, UnicodeDecodeError) as e:
      reason = e.strerror if isinstance(e, OSError) else str(e)
      print('port_gin: cannot read {}: {}'.format(path, reason),
            file=sys.stderr)
      return 2
    try:
      ported.append((path, text, port(text)))
    except PortError as e:
      print('port_gin: {}:{}: {}'.format(path, e.line_number, e.reason),
            file=sys.stderr)
      return 1
  for path, text, new_text in ported:
    if not args.in_place:
      sys.stdout.write(new_text)
    elif new_text != text:
      _write_in_place(path, new_text)
  return 0


if __name__ == '__main__':
  sys.exit(main())
