# coding=utf-8
"""Loads the kernels' Python extension module (building it once)."""

import importlib.machinery
import importlib.util
from types import ModuleType

from dopamine_per.native import build

__all__ = ['load']


def _import(path: str) -> ModuleType:
  """Imports the extension at `path` as `build.PYTHON_MODULE`."""
  loader = importlib.machinery.ExtensionFileLoader(build.PYTHON_MODULE, path)
  spec = importlib.util.spec_from_file_location(build.PYTHON_MODULE, path,
                                                loader=loader)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


# The extension module, built on first use (see `build.python_extension`);
# raises build.NativeBuildError if it cannot be built or imported.
load = build.Once(lambda: _import(build.python_extension()),
                  'the Python extension does not import', (ImportError,))
