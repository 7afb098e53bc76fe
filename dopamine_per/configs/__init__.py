# coding=utf-8
"""The gin configs shipped with dopamine_per, found by name.

Their source is the repository's top-level ``configs/``, which setup.py
copies into this package for the wheel and the sdist; a checkout (and its
editable install, and Bazel's runfiles) finds them in ``configs/`` beside
the package. The trainer's ``--gin_files`` takes a shipped config by name
(`resolve`), also outside a checkout. ``python -m dopamine_per.configs``
lists them.
"""

import os
from typing import Dict, List, Optional

__all__ = ['EXTENSION', 'directory', 'listing', 'names', 'path', 'resolve']

EXTENSION = '.gin'

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Where a checkout keeps them: <repository>/configs, two levels up.
_CHECKOUT_DIR = os.path.join(os.path.dirname(os.path.dirname(_PACKAGE_DIR)),
                             'configs')


def _gin_files(folder: str) -> Dict[str, str]:
  """Returns {name: path} for the .gin files directly in `folder`."""
  try:
    entries = sorted(os.listdir(folder))
  except OSError:
    return {}
  return {entry[:-len(EXTENSION)]: os.path.join(folder, entry)
          for entry in entries
          if entry.endswith(EXTENSION) and
          os.path.isfile(os.path.join(folder, entry))}


def _stem(name: str) -> str:
  return name[:-len(EXTENSION)] if name.endswith(EXTENSION) else name


def directory() -> Optional[str]:
  """The directory holding the shipped configs, or None if there is none.

  Returns:
    str, this package's directory in an installed wheel or sdist, else the
    checkout's ``configs/``; None when neither holds a .gin file.
  """
  for folder in (_PACKAGE_DIR, _CHECKOUT_DIR):
    if _gin_files(folder):
      return folder
  return None


def names() -> List[str]:
  """The shipped configs' names (file names without .gin), sorted."""
  folder = directory()
  return list(_gin_files(folder)) if folder else []


def _shipped() -> str:
  shipped = names()
  if not shipped:
    return ('this installation has none: reinstall dopamine_per, or pass '
            'the path of a gin file')
  return 'shipped: ' + ', '.join(shipped)


def path(name: str) -> str:
  """Returns the file of the shipped config `name`.

  Args:
    name: str, a config's name, with or without the .gin extension
      (``'rainbow_cartpole'`` or ``'rainbow_cartpole.gin'``).

  Returns:
    str, the path of its .gin file.

  Raises:
    ValueError: If no shipped config has that name; the one-line message
      lists the shipped ones.
  """
  folder = directory()
  files = _gin_files(folder) if folder else {}
  if _stem(name) not in files:
    raise ValueError('no shipped gin config is named {!r} ({})'.format(
        name, _shipped()))
  return files[_stem(name)]


def resolve(gin_file: str) -> str:
  """Returns the file a --gin_files entry names.

  An existing file, or a path with a scheme (``gs://...``, read by
  ``tf.io.gfile``), is returned as is: a user's own file wins over a shipped
  config of the same name. Otherwise a bare name (no directory part) names
  a shipped config.

  Args:
    gin_file: str, a --gin_files entry.

  Returns:
    str, the path of the gin file to load.

  Raises:
    FileNotFoundError: If `gin_file` is neither an existing file nor the name
      of a shipped config; the one-line message starts
      ``gin file not found: <gin_file>`` and lists the shipped configs.
  """
  if '://' in gin_file or os.path.isfile(gin_file):
    return gin_file
  head, tail = os.path.split(gin_file)
  try:
    found = path(tail)
  except ValueError:
    found = None
  if found and not head:
    return found
  if found:  # A missing path whose file name is a shipped config's.
    raise FileNotFoundError(
        'gin file not found: {} (to use the shipped config of that name, '
        'pass --gin_files={})'.format(gin_file, _stem(tail)))
  if head:
    raise FileNotFoundError('gin file not found: {} (or pass a shipped '
                            'config by name; {})'.format(gin_file, _shipped()))
  raise FileNotFoundError('gin file not found: {}, and no shipped config has '
                          'that name ({})'.format(gin_file, _shipped()))


def listing() -> str:
  """The shipped configs' directory, then their names one per line."""
  folder = directory()
  if folder is None:
    return 'No shipped gin configs: ' + _shipped() + '.'
  shipped = names()
  example = 'rainbow_cartpole' if 'rainbow_cartpole' in shipped else shipped[0]
  lines = ['Shipped gin configs (in {}); pass one to the trainer by name, '
           'e.g. --gin_files={}:'.format(folder, example)]
  lines += ['  ' + name for name in shipped]
  return '\n'.join(lines)
