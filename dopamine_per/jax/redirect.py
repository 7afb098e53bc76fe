# coding=utf-8
"""Dopamine's JAX agents on our replay memory: one call before they load.

    from dopamine_per.jax import redirect
    redirect.install()

After `install()`, importing `dopamine.jax.replay_memory` or any of its
modules (`replay_buffer`, `samplers`, `accumulator`, `elements`,
`sum_tree`) gives ours, so Dopamine's agents (whose `_build_replay_buffer`
imports them), their gin bindings (`ReplayBuffer.max_capacity`, ...) and
their checkpoint calls use dopamine_per's memory unchanged. It must run
before anything imports Dopamine's modules: afterwards, objects already
bound to Dopamine's would stay Dopamine's, so it refuses.
"""

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any, Optional

__all__ = ['DOPAMINE_PACKAGE', 'install', 'installed', 'uninstall']

# Dopamine's package and ours, which takes its place.
DOPAMINE_PACKAGE = 'dopamine.jax.replay_memory'
_OURS = 'dopamine_per.jax.replay_memory'


class _Redirect(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Finds Dopamine's replay modules as ours (the same module objects)."""

  def find_spec(self, name: str, path: Any = None,
                target: Any = None) -> Optional[Any]:
    del path, target
    if name != DOPAMINE_PACKAGE and not name.startswith(DOPAMINE_PACKAGE +
                                                         '.'):
      return None
    return importlib.util.spec_from_loader(
        name, self, is_package=name == DOPAMINE_PACKAGE)

  def create_module(self, spec: Any) -> Any:
    return importlib.import_module(_OURS + spec.name[len(DOPAMINE_PACKAGE):])

  def exec_module(self, module: Any) -> None:
    del module  # Ours, already executed.


_FINDER = _Redirect()


def installed() -> bool:
  """Whether `install` is in effect."""
  return _FINDER in sys.meta_path


def install() -> None:
  """Makes `dopamine.jax.replay_memory` and its modules ours.

  Raises:
    RuntimeError: If Dopamine's own replay modules are already imported
      (call it before importing Dopamine's agents).
  """
  if installed():
    return
  loaded = sorted(name for name, module in sys.modules.items()
                  if (name == DOPAMINE_PACKAGE or
                      name.startswith(DOPAMINE_PACKAGE + '.')) and
                  not getattr(module, '__name__', '').startswith(_OURS))
  if loaded:
    raise RuntimeError(
        'dopamine_per.jax.redirect.install() must run before Dopamine\'s '
        'replay modules are imported; already imported: {}'.format(
            ', '.join(loaded)))
  sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
  """Undoes `install` (modules imported meanwhile stay ours)."""
  if installed():
    sys.meta_path.remove(_FINDER)
  for name in [name for name in sys.modules
               if name == DOPAMINE_PACKAGE or
               name.startswith(DOPAMINE_PACKAGE + '.')]:
    del sys.modules[name]
