# coding=utf-8
"""The classic-control networks under the gin module name ``legacy_networks``.

Gin files written for Dopamine can bind ``@legacy_networks.CartpoleDQNNetwork``
and the other names below. Each class here is the `gym_lib` network of the
same name, subclassed only to be registered with gin under this module: same
constructor, variables and outputs, and an instance of the `gym_lib` class.
What Dopamine's module of this name holds instead, and how gin bindings of
the two modules interact: docs/compat.md#legacy_networks.
"""

import gin

from dopamine_per.discrete_domains import gym_lib

__all__ = [
    'CartpoleDQNNetwork', 'CartpoleRainbowNetwork', 'AcrobotDQNNetwork',
    'AcrobotRainbowNetwork', 'LunarLanderDQNNetwork', 'MountainCarDQNNetwork',
    'FourierDQNNetwork', 'CartpoleFourierDQNNetwork',
    'AcrobotFourierDQNNetwork',
]


def _registered(network_class):
  """Returns a subclass of a `gym_lib` network, gin-registered here."""
  return gin.configurable(type(network_class.__name__, (network_class,), {
      '__module__': __name__,
      '__doc__': '`gym_lib.{}` as ``legacy_networks.{}``.'.format(
          network_class.__name__, network_class.__name__)}))


CartpoleDQNNetwork = _registered(gym_lib.CartpoleDQNNetwork)
CartpoleRainbowNetwork = _registered(gym_lib.CartpoleRainbowNetwork)
AcrobotDQNNetwork = _registered(gym_lib.AcrobotDQNNetwork)
AcrobotRainbowNetwork = _registered(gym_lib.AcrobotRainbowNetwork)
LunarLanderDQNNetwork = _registered(gym_lib.LunarLanderDQNNetwork)
MountainCarDQNNetwork = _registered(gym_lib.MountainCarDQNNetwork)
FourierDQNNetwork = _registered(gym_lib.FourierDQNNetwork)
CartpoleFourierDQNNetwork = _registered(gym_lib.CartpoleFourierDQNNetwork)
AcrobotFourierDQNNetwork = _registered(gym_lib.AcrobotFourierDQNNetwork)
