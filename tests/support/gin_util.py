"""Test helper: hide Dopamine's gin configurables while a test runs.

The compatibility tests import Dopamine, which registers
``WrappedReplayBuffer`` and friends with gin too: the short names our gin
files use would then be ambiguous, which never happens to a user who
imports one of the two libraries.
"""

from gin import config as gin_config
from gin import selector_map

__all__ = ['hide_dopamine_configurables']

_PREFIX = 'dopamine.'


def hide_dopamine_configurables(test_case) -> None:
  """Hides ``dopamine.*`` configurables for the test; clears gin's bindings
  after it and restores them (keeping what the test registered)."""
  original = gin_config._REGISTRY  # pylint: disable=protected-access
  filtered = selector_map.SelectorMap()
  for selector, value in original.items():
    if not selector.startswith(_PREFIX):
      filtered[selector] = value

  def restore():
    for selector, value in filtered.items():
      if selector not in original:
        original[selector] = value
    gin_config._REGISTRY = original  # pylint: disable=protected-access

  gin_config._REGISTRY = filtered  # pylint: disable=protected-access
  test_case.addCleanup(restore)
  # Cleanups run last-in first-out: the test's bindings go before the
  # registry is restored.
  test_case.addCleanup(gin_config.clear_config)
