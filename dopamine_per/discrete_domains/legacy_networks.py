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


@gin.configurable
class CartpoleDQNNetwork(gym_lib.CartpoleDQNNetwork):
  """`gym_lib.CartpoleDQNNetwork` as ``legacy_networks.CartpoleDQNNetwork``."""


@gin.configurable
class CartpoleRainbowNetwork(gym_lib.CartpoleRainbowNetwork):
  """`gym_lib.CartpoleRainbowNetwork` as ``legacy_networks.*``."""


@gin.configurable
class AcrobotDQNNetwork(gym_lib.AcrobotDQNNetwork):
  """`gym_lib.AcrobotDQNNetwork` as ``legacy_networks.AcrobotDQNNetwork``."""


@gin.configurable
class AcrobotRainbowNetwork(gym_lib.AcrobotRainbowNetwork):
  """`gym_lib.AcrobotRainbowNetwork` as ``legacy_networks.*``."""


@gin.configurable
class LunarLanderDQNNetwork(gym_lib.LunarLanderDQNNetwork):
  """`gym_lib.LunarLanderDQNNetwork` as ``legacy_networks.*``."""


@gin.configurable
class MountainCarDQNNetwork(gym_lib.MountainCarDQNNetwork):
  """`gym_lib.MountainCarDQNNetwork` as ``legacy_networks.*``."""


@gin.configurable
class FourierDQNNetwork(gym_lib.FourierDQNNetwork):
  """`gym_lib.FourierDQNNetwork` as ``legacy_networks.FourierDQNNetwork``."""


@gin.configurable
class CartpoleFourierDQNNetwork(gym_lib.CartpoleFourierDQNNetwork):
  """`gym_lib.CartpoleFourierDQNNetwork` as ``legacy_networks.*``."""


@gin.configurable
class AcrobotFourierDQNNetwork(gym_lib.AcrobotFourierDQNNetwork):
  """`gym_lib.AcrobotFourierDQNNetwork` as ``legacy_networks.*``."""
