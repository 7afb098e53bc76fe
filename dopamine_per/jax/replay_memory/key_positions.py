# coding=utf-8
"""A sampler's keys at positions 0..size-1, and each key's position.

Dopamine JAX keeps these as a Python list and a dict: an object or two per
transition (about 100 MB at 1M). `KeyPositions` keeps them in arrays: the
keys by position, and a hash table of positions by key (a key's cell is
the key modulo a power of two; a key whose cell another key holds goes to
a small dict beside it). A memory's keys are consecutive, so with the
table at least twice its capacity no key ever goes to the dict.

It behaves as Dopamine's pair does: `add` appends (a key added twice is at
two positions and maps to the later), `remove` moves the last key into the
removed one's position.
"""

import collections.abc
from typing import Any, Dict, Iterator, Tuple

import numpy as np

__all__ = ['KeyPositions']


class KeyPositions(object):
  """Keys by position and positions by key, in arrays.

  Attributes:
    size: int, how many positions are filled.
  """

  def __init__(self, capacity: int = 1024) -> None:
    """An empty index with room for about `capacity` keys before it grows."""
    self.size = 0
    self._keys = np.empty(max(int(capacity), 16), np.int64)
    cells = 1 << int(2 * len(self._keys) - 1).bit_length()
    self._cell_keys = np.empty(cells, np.int64)
    self._cell_positions = np.empty(cells, np.int64)
    self._cell_used = np.zeros(cells, bool)
    self._spilled: Dict[int, int] = {}

  # ---------------------------------------------------------------- views

  @property
  def keys(self) -> np.ndarray:
    """The keys by position (a read-only view)."""
    view = self._keys[:self.size]
    view.flags.writeable = False
    return view

  def mapping(self) -> 'PositionsByKey':
    """A read-only mapping key -> position over this index."""
    return PositionsByKey(self)

  # ------------------------------------------------------------- lookups

  def position(self, key: int) -> int:
    """`key`'s position; KeyError if it has none."""
    cell = key & (len(self._cell_keys) - 1)
    if self._cell_used[cell] and self._cell_keys[cell] == key:
      return int(self._cell_positions[cell])
    return self._spilled[key]

  def positions(self, keys: np.ndarray) -> np.ndarray:
    """The positions of an array of keys (int64); KeyError for a key that
    has none."""
    keys = np.asarray(keys, np.int64).reshape(-1)
    cells = keys & (len(self._cell_keys) - 1)
    found = self._cell_used[cells] & (self._cell_keys[cells] == keys)
    positions = self._cell_positions[cells]
    for i in np.flatnonzero(~found).tolist():
      positions[i] = self._spilled[int(keys[i])]
    return positions

  def __contains__(self, key: Any) -> bool:
    try:
      self.position(int(key))
    except (KeyError, TypeError, ValueError):
      return False
    return True

  def pairs(self) -> Tuple[np.ndarray, np.ndarray]:
    """Every key with a position, and that position: two int64 arrays."""
    used = np.flatnonzero(self._cell_used)
    spilled_keys = np.fromiter(self._spilled.keys(), np.int64,
                               len(self._spilled))
    spilled_positions = np.fromiter(self._spilled.values(), np.int64,
                                    len(self._spilled))
    return (np.concatenate([self._cell_keys[used], spilled_keys]),
            np.concatenate([self._cell_positions[used], spilled_positions]))

  def items(self) -> Iterator:
    """(key, position) pairs, in no particular order."""
    keys, positions = self.pairs()
    return zip(keys.tolist(), positions.tolist())

  # -------------------------------------------------------------- changes

  def add(self, key: int) -> int:
    """Appends `key` at the next position (its position from now on)."""
    key = int(key)
    if self.size == len(self._keys):
      self._grow()
    position = self.size
    self._keys[position] = key
    self.size += 1
    self._map(key, position)
    return position

  def remove(self, key: int) -> int:
    """Removes `key`: the last key moves to its position, which is
    returned. KeyError if `key` has none."""
    key = int(key)
    position = self.position(key)
    last = self.size - 1
    moved = int(self._keys[last])
    self._keys[position], self._keys[last] = moved, key
    self._map(moved, position)
    self.size -= 1
    self._unmap(key)
    return position

  def sort(self) -> None:
    """Puts the keys in increasing order, their positions following."""
    self._keys[:self.size].sort()
    self._rebuild(self._keys[:self.size].copy(),
                  np.arange(self.size, dtype=np.int64))

  def clear(self) -> None:
    """Removes every key."""
    self.size = 0
    self._cell_used[:] = False
    self._spilled.clear()

  def load(self, keys: Any, positions: Any) -> None:
    """Replaces the content with `keys` by position and `positions` by key
    (a mapping, or the two arrays `pairs` gives).

    Raises:
      ValueError: If a position is outside the keys (nothing changed).
    """
    keys = np.asarray(keys, np.int64).reshape(-1)
    if isinstance(positions, tuple):
      mapped, places = (np.asarray(a, np.int64).reshape(-1)
                        for a in positions)
    else:
      mapped = np.fromiter(positions.keys(), np.int64, len(positions))
      places = np.fromiter(positions.values(), np.int64, len(positions))
    if (len(mapped) != len(places) or
        ((places < 0) | (places >= len(keys))).any() or
        (keys[places] != mapped).any()):
      raise ValueError('the positions by key do not match the keys')
    self.clear()
    if len(keys) > len(self._keys):
      self._keys = np.empty(len(keys), np.int64)
    self._keys[:len(keys)] = keys
    self.size = len(keys)
    self._rebuild(mapped, places)

  def _map(self, key: int, position: int) -> None:
    cell = key & (len(self._cell_keys) - 1)
    if not self._cell_used[cell] or self._cell_keys[cell] == key:
      self._cell_used[cell] = True
      self._cell_keys[cell] = key
      self._cell_positions[cell] = position
      self._spilled.pop(key, None)
    else:
      self._spilled[key] = position

  def _unmap(self, key: int) -> None:
    cell = key & (len(self._cell_keys) - 1)
    if self._cell_used[cell] and self._cell_keys[cell] == key:
      self._cell_used[cell] = False
    else:
      self._spilled.pop(key, None)

  def _grow(self) -> None:
    keys = np.empty(2 * len(self._keys), np.int64)
    keys[:self.size] = self._keys[:self.size]
    self._keys = keys
    self._rebuild(*self.pairs(), cells=2 * len(self._cell_keys))

  def _rebuild(self, keys: np.ndarray, positions: np.ndarray,
               cells: int = 0) -> None:
    """Maps each of `keys` (distinct) to its position in `positions`: in
    its cell, or spilled where an earlier key of the list took the cell."""
    cells = cells or len(self._cell_keys)
    self._cell_keys = np.empty(cells, np.int64)
    self._cell_positions = np.empty(cells, np.int64)
    self._cell_used = np.zeros(cells, bool)
    slots = keys & (cells - 1)
    _, first = np.unique(slots, return_index=True)
    self._cell_used[slots[first]] = True
    self._cell_keys[slots[first]] = keys[first]
    self._cell_positions[slots[first]] = positions[first]
    spilled = np.ones(len(keys), bool)
    spilled[first] = False
    self._spilled = dict(zip(keys[spilled].tolist(),
                             positions[spilled].tolist()))


class PositionsByKey(collections.abc.Mapping):
  """Read-only key -> position view of a `KeyPositions` (what Dopamine's
  `_index_by_key` dict holds)."""

  def __init__(self, index: KeyPositions) -> None:
    self._index = index

  def __getitem__(self, key: Any) -> int:
    return self._index.position(int(key))

  def __contains__(self, key: Any) -> bool:
    return key in self._index

  def __iter__(self) -> Iterator[int]:
    return iter(sorted(key for key, _ in self._index.items()))

  def __len__(self) -> int:
    return sum(1 for _ in self._index.items())
