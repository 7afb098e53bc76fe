# coding=utf-8
"""Loads the kernels' Python extension module (building it once).

And calls its LZ4 block codec (`lz4_compress`, `lz4_decompress`).
"""

import importlib.machinery
import importlib.util
from types import ModuleType

from dopamine_per.native import build

__all__ = ['load', 'lz4_compress', 'lz4_decompress']


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


def lz4_compress(data, level: int = 9) -> bytes:
  """Compresses `data` into one LZ4 block (lz4_block.h, without Python).

  The block has no size in front: as `lz4.block.compress(data,
  store_size=False)`, which decodes it, as does `lz4_decompress`.

  Args:
    data: a bytes-like object (C-contiguous) of up to 1 GiB.
    level: 0 or 1, greedy and fastest; 2 to 12 search 2**(level - 1)
      earlier positions per byte for longer matches (9: about lz4's HC 9).

  Raises:
    TypeError: If `data` is not bytes-like or `level` not an int.
    ValueError: If `data` is over 1 GiB or `level` outside [0, 12].
    dopamine_per.native.build.NativeBuildError: If the extension cannot be
      built or imported here.
  """
  return load().lz4_compress(data, level)


def lz4_decompress(data, size: int) -> bytes:
  """The `size` bytes that the LZ4 block `data` decodes to.

  The block has no size in front (`lz4.block.compress(...,
  store_size=False)`, `lz4_compress`). The GIL is released while it
  decodes.

  Args:
    data: a bytes-like object (C-contiguous) of up to 1 GiB.
    size: the decoded size, in [0, 1 GiB].

  Raises:
    TypeError: If `data` is not bytes-like or `size` not an int.
    ValueError: If `data` is corrupt (it does not decode to exactly `size`
      bytes, using all of it), over 1 GiB, or `size` out of range.
    dopamine_per.native.build.NativeBuildError: If the extension cannot be
      built or imported here.
  """
  return load().lz4_decompress(data, size)
