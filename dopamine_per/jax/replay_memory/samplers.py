# coding=utf-8
"""Which stored keys a batch samples, as Dopamine JAX's samplers.

Each sampler keeps its keys at positions (`key_positions.KeyPositions`:
arrays, not a list and a dict) and draws positions from its NumPy
Generator exactly as Dopamine JAX's do (`integers` for uniform draws,
`uniform` over the sum tree's total for prioritized ones, i.i.d.), so the
same seed gives the same keys.

One difference: a prioritized sampler whose `max_capacity` is a power of
two, in a memory of that capacity, no longer fails at the memory's first
eviction (Dopamine's tree has no leaf for the key added before the oldest
is removed; ours holds that key's priority beside the tree until the
removal gives it the oldest's leaf).
"""

import dataclasses
import typing
from typing import Any, Dict, Optional, Protocol

from absl import logging
import gin
import numpy as np
import numpy.typing as npt

from dopamine_per import errors
from dopamine_per.jax.replay_memory import elements
from dopamine_per.jax.replay_memory import key_positions
from dopamine_per.jax.replay_memory import sum_tree

__all__ = ['SampleMetadata', 'PrioritizedSampleMetadata',
           'SamplingDistribution', 'UniformSamplingDistribution',
           'PrioritizedSamplingDistribution',
           'SequentialSamplingDistribution']

ReplayItemID = elements.ReplayItemID


@dataclasses.dataclass(frozen=True)
class SampleMetadata:
  """The keys a batch sampled (int32)."""
  keys: npt.NDArray[np.int32]


@dataclasses.dataclass(frozen=True)
class PrioritizedSampleMetadata(SampleMetadata):
  """The keys and the probability each had of being drawn."""
  probabilities: npt.NDArray[np.float64]


@typing.runtime_checkable
class SamplingDistribution(Protocol):
  """What a memory asks of its sampler."""

  def add(self, key: ReplayItemID, **kwargs: Any) -> None:
    """Makes `key` sampleable."""

  def update(self, keys: Any, **kwargs: Any) -> None:
    """Changes how likely `keys` are."""

  def remove(self, key: ReplayItemID) -> None:
    """Makes `key` no longer sampleable."""

  def sample(self, size: int) -> SampleMetadata:
    """Draws `size` keys."""

  def clear(self) -> None:
    """Removes every key."""


def _int32_keys(keys: np.ndarray) -> np.ndarray:
  return np.asarray(keys, dtype=np.int32)


class UniformSamplingDistribution(object):
  """Draws keys uniformly, with replacement."""

  def __init__(self, seed: 'np.random.Generator | np.random.SeedSequence | '
               'int | None') -> None:
    self._rng = np.random.default_rng(seed)
    self._keys = key_positions.KeyPositions()

  @property
  def size(self) -> int:
    """How many keys can be sampled."""
    return self._keys.size

  @property
  def _key_by_index(self) -> np.ndarray:
    return self._keys.keys

  @property
  def _index_by_key(self) -> key_positions.PositionsByKey:
    return self._keys.mapping()

  def add(self, key: ReplayItemID, **kwargs: Any) -> None:
    if kwargs:
      logging.log_first_n(
          logging.WARNING, 'UniformSamplingDistribution.add ignores its '
          'keyword arguments, got %r', 1, kwargs)
    self._keys.add(key)

  def update(self, keys: Any, *args: Any, **kwargs: Any) -> None:
    del keys, args, kwargs
    logging.log_first_n(
        logging.WARNING, 'UniformSamplingDistribution.update is a no-op: '
        'every key is equally likely', 1)

  def remove(self, key: ReplayItemID) -> None:
    if key not in self._keys:
      raise ValueError(f'Key {key} not found.')
    self._keys.remove(key)

  def _check_sample(self, size: int) -> None:
    if not self._keys.size:
      raise ValueError('No keys to sample from.')
    if size <= 0:
      raise ValueError(f'Sample size must be positive, got size={size}.')

  def sample(self, size: int) -> SampleMetadata:
    self._check_sample(size)
    positions = self._rng.integers(self._keys.size, size=size)
    return SampleMetadata(keys=_int32_keys(self._keys.keys[positions]))

  def clear(self) -> None:
    self._keys.clear()

  def to_state_dict(self) -> Dict[str, Any]:
    """The keys by position, the positions by key and the Generator's
    state, under Dopamine's names (the positions by key as two arrays,
    {'keys', 'positions'}, not a dict of a Python int per key)."""
    keys, positions = self._keys.pairs()
    return {
        'key_by_index': self._keys.keys.copy(),
        'index_by_key': {'keys': keys, 'positions': positions},
        'rng_state': self._rng.bit_generator.state,
    }

  def from_state_dict(self, state_dict: Dict[str, Any]) -> None:
    """Takes what `to_state_dict` gave, or Dopamine's (a dict of positions
    by key); ValueError if they do not match, nothing changed."""
    positions = state_dict['index_by_key']
    if set(positions) == {'keys', 'positions'}:
      positions = (positions['keys'], positions['positions'])
    probe = type(self._rng.bit_generator)()  # Checks the state first.
    probe.state = state_dict['rng_state']
    self._keys.load(state_dict['key_by_index'], positions)
    self._rng.bit_generator.state = probe.state


@gin.configurable
class PrioritizedSamplingDistribution(UniformSamplingDistribution):
  """Draws keys in proportion to their priorities (to a power), i.i.d.

  Attributes:
    _sum_tree: the priorities, a `sum_tree.SumTree` (Dopamine's agents read
      its `max_recorded_priority`).
  """

  def __init__(self, seed: 'np.random.SeedSequence | int | None', *,
               priority_exponent: float = 1.0, max_capacity: int) -> None:
    super().__init__(seed)
    self._max_capacity = max_capacity
    self._priority_exponent = priority_exponent
    self._sum_tree = sum_tree.SumTree(max_capacity)
    self._keys = key_positions.KeyPositions(max_capacity + 1)
    # A key added where the tree has no leaf left: (position, priority),
    # until a removal gives it a leaf.
    self._held: Optional[tuple] = None

  def _power(self, priorities: Any) -> Any:
    return np.where(priorities == 0.0, 0.0,
                    priorities**self._priority_exponent)

  def add(self, key: ReplayItemID, *, priority: Optional[float]) -> None:
    if priority is None:
      priority = 0.0
    value = 0.0 if priority == 0.0 else priority**self._priority_exponent
    position = self._keys.size
    if position < self._sum_tree.leaves:
      self._keys.add(key)
      self._sum_tree.set(position, value)
      return
    if self._held is not None:
      raise errors.ArgumentError(
          'PrioritizedSamplingDistribution(max_capacity={}) holds {} keys: '
          'remove one before adding key {}'.format(
              self._max_capacity, self._keys.size, key))
    if not (np.isfinite(value) and value >= 0.0):
      raise errors.ArgumentError(
          'priority must be finite and >= 0, got {}'.format(priority))
    self._keys.add(key)
    self._held = (position, float(value))

  def update(self, keys: Any, *, priorities: Any) -> None:
    if not isinstance(keys, np.ndarray):
      keys = np.asarray([keys], dtype=np.int32)
    values = np.asarray(self._power(np.asarray(priorities)), np.float64)
    positions = self._keys.positions(keys)
    self._sum_tree.set(positions, values.reshape(positions.shape))

  def remove(self, key: ReplayItemID) -> None:
    position = self._keys.position(key)
    last = self._keys.size - 1
    if self._held is not None:
      held_position, value = self._held
      self._held = None
      if position != held_position:
        self._sum_tree.set(position, value)
    elif position == last:
      self._sum_tree.set(position, 0.0)
    else:
      self._sum_tree.set(np.asarray([position, last], np.int64),
                         np.asarray([self._sum_tree.get(last), 0.0]))
    super().remove(key)

  def sample(self, size: int) -> PrioritizedSampleMetadata:
    if self._sum_tree.root == 0.0:
      keys = super().sample(size).keys
      return PrioritizedSampleMetadata(
          keys=keys,
          probabilities=np.full_like(keys, 1.0 / self.size,
                                     dtype=np.float64))
    targets = self._rng.uniform(0.0, self._sum_tree.root, size=size)
    positions = self._sum_tree.query(targets)
    return PrioritizedSampleMetadata(
        keys=_int32_keys(self._keys.keys[positions]),
        probabilities=self._sum_tree.get(positions) / self._sum_tree.root)

  def clear(self) -> None:
    self._sum_tree.clear()
    self._held = None
    super().clear()

  def to_state_dict(self) -> Dict[str, Any]:
    if self._held is not None:
      raise errors.ArgumentError(
          'PrioritizedSamplingDistribution: a key added past max_capacity '
          'waits for a removal; its state cannot be saved now')
    return {'sum_tree': self._sum_tree.to_state_dict(),
            **super().to_state_dict()}

  def from_state_dict(self, state_dict: Dict[str, Any]) -> None:
    self._sum_tree.from_state_dict(state_dict['sum_tree'])
    super().from_state_dict(state_dict)


class SequentialSamplingDistribution(UniformSamplingDistribution):
  """Returns the first `size` keys (sorted first, unless asked not to)."""

  def __init__(self, seed: 'np.random.Generator | np.random.SeedSequence | '
               'int', sort_samples: bool = True) -> None:
    super().__init__(seed)
    self._sort_samples = sort_samples

  def sample(self, size: int) -> SampleMetadata:
    self._check_sample(size)
    if size > self._keys.size:
      raise ValueError('Sample size {} is more than the {} keys held.'.format(
          size, self._keys.size))
    if self._sort_samples:
      self._keys.sort()
    return SampleMetadata(keys=_int32_keys(self._keys.keys[:size]))
