# coding=utf-8
"""Loads the kernels' Python extension module (building it once).

`load()` returns the module compiled from replay_python.cc
(`build.python_extension`), or raises `build.NativeBuildError` saying why
it cannot (no compiler, no Python headers, a failed build, a module that
does not import). `replay_memory.native_kernels` calls its functions.
"""

import importlib.machinery
import importlib.util
import threading
from types import ModuleType
from typing import Optional

from dopamine_per.native import build

__all__ = ['load']

_lock = threading.Lock()
_module: Optional[ModuleType] = None
_error: Optional[build.NativeBuildError] = None


def _import(path: str) -> ModuleType:
  """Imports the extension at `path` as `build.PYTHON_MODULE`."""
  loader = importlib.machinery.ExtensionFileLoader(build.PYTHON_MODULE, path)
  spec = importlib.util.spec_from_file_location(build.PYTHON_MODULE, path,
                                                loader=loader)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load() -> ModuleType:
  """The extension module, built on first use.

  Raises:
    build.NativeBuildError: If it cannot be built or imported.
  """
  global _module, _error
  with _lock:
    if _error is not None:  # Not rebuilt on every call.
      raise _error
    if _module is None:
      try:
        _module = _import(build.python_extension())
      except build.NativeBuildError as e:
        _error = e
        raise
      except ImportError as e:
        _error = build.NativeBuildError(
            'the Python extension does not import: {}'.format(e))
        raise _error from e
    return _module
