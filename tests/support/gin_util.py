"""Test helper: hide Dopamine's gin configurables while a test runs.

The compatibility tests import Dopamine's replay memories, which register
``WrappedReplayBuffer`` and friends with gin under ``dopamine.tf...``. In the
same process the short names our gin files use
(``WrappedPrioritizedReplayBuffer.replay_capacity``) would then be ambiguous,
which never happens to a user who imports one of the two libraries.
`hide_dopamine_configurables` takes Dopamine's entries out of gin's registry
for one test and puts them back afterwards (keeping whatever the test
registered meanwhile).
"""

from gin import config as gin_config
from gin import selector_map

__all__ = ['hide_dopamine_configurables']

_PREFIX = 'dopamine.'


def hide_dopamine_configurables(test_case) -> None:
  """Hides ``dopamine.*`` configurables, and clears gin's bindings, after.

  Args:
    test_case: an absltest.TestCase (its addCleanup restores the registry).
  """
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
