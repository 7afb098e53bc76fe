# coding=utf-8
"""How a memory fills a sampled batch of one layout: one kernel call.

A `BatchPlan`, made once per layout (`get_transition_elements`), sorts the
elements by what fills them: the kernels' `transition_batch` (the states,
the n-step return, its terminal flag, the indices, and rows of an array at
a transition's slot or at its next slot) or the memory's
`_transition_element` hook (elements a subclass adds). `carve` lays a
batch's arrays out in one buffer, once; the memory's `storage.BufferPool`
hands them out again once nothing refers to them. Why one call:
docs/architecture.md#the-path-of-a-sampled-batch.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from dopamine_per.native import native_memory
from dopamine_per.replay_memory.memory import storage

__all__ = ['BatchPlan', 'PlanCache', 'RowElements', 'STATES', 'storage_rows']

# Element name -> (source name, at_next): the element holds, per
# transition, the source array's row at its slot or at its next slot.
RowElements = Mapping[str, Tuple[str, bool]]

# The elements `transition_batch` computes, in the order of its arguments.
_COMPUTED = ('reward', 'terminal', 'indices')
# The elements holding frame stacks.
STATES = ('state', 'next_state')


class BatchPlan(object):
  """Which arrays of a batch layout the kernel fills, and which a hook does.

  Attributes:
    elements: list of ReplayElement, the layout (batch dimension first).
    nbytes: int, the bytes `carve` lays the batch's arrays out in.
    own: list of (position, ReplayElement) the kernel does not fill.
    codes: the native memory's codes of the elements (bytes, see
      `native_memory.NativeMemory.fill`), or None: the memory sets them
      when its native memory fills its batches.
  """

  def __init__(self, elements: Sequence[Any], rows: RowElements):
    """Sorts the elements of a layout.

    Args:
      elements: list of ReplayElement (name, shape, type), the layout.
      rows: which elements are rows of a source array (see RowElements);
        the computed ones (states, reward, terminal, indices) win.
    """
    self.elements = list(elements)
    self.codes: Optional[bytes] = None
    positions = {e.name: p for p, e in enumerate(self.elements)}
    self._states = tuple(positions.get(name) for name in STATES)
    self._outputs = tuple(positions.get(name) for name in _COMPUTED)
    self._rows = [(rows[e.name][0], rows[e.name][1], p)
                  for p, e in enumerate(self.elements)
                  if e.name in rows and e.name not in _COMPUTED + STATES]
    filled = set(self._outputs) | {p for _, _, p in self._rows}
    self.own = [(p, e) for p, e in enumerate(self.elements)
                if p not in filled and e.name not in STATES]
    # (position or None for the states, shape, dtype, offset, bytes): each
    # piece starts on a 64-byte boundary, as the pool's outputs do.
    self._pieces = []
    self.nbytes = 0
    states = [p for p in self._states if p is not None]
    if states:
      element = self.elements[states[0]]
      self._add_piece(None, (2 * element.shape[0],) + tuple(
          element.shape[1:]), element.type)
    for p, e in enumerate(self.elements):
      if p in filled:
        self._add_piece(p, e.shape, e.type)

  def _add_piece(self, position: Optional[int], shape: Tuple[int, ...],
                 dtype: Any) -> None:
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    self._pieces.append((position, tuple(shape), dtype, self.nbytes, size))
    self.nbytes += -(-size // storage.ALIGNMENT) * storage.ALIGNMENT

  def carve(self, memory: np.ndarray) -> Tuple[Any, ...]:
    """Lays the batch's arrays out in `memory` (uint8, `nbytes`, aligned).

    Arrays of Python objects cannot live in raw memory: they are allocated
    on their own.

    Returns:
      (arrays, states, outputs, rows): the batch's arrays in layout order
      (None at the `own` positions); the kernel's `states` (None without
      states; the batch's state and next state are its halves), its
      returns, is_terminal and indices_out (None where the layout lacks
      them) and its rows, (source name, at_next, out) each.
    """
    arrays: List[Optional[np.ndarray]] = [None] * len(self.elements)
    states = None
    for position, shape, dtype, offset, size in self._pieces:
      if dtype.hasobject:
        array = np.empty(shape, dtype)
      else:
        array = memory[offset:offset + size].view(dtype).reshape(shape)
      if position is not None:
        arrays[position] = array
        continue
      states, count = array, len(array) // 2
      for half, state in zip((array[:count], array[count:]), self._states):
        if state is not None:
          arrays[state] = half
    outputs = tuple(None if p is None else arrays[p] for p in self._outputs)
    rows = tuple((name, at_next, arrays[p])
                 for name, at_next, p in self._rows)
    return tuple(arrays), states, outputs, rows


def storage_rows(storage_names: Sequence[str]) -> Dict[str, Tuple[str, bool]]:
  """The row elements of a circular memory with these storage arrays.

  Each stored element at the transition's slot (the action, extras), and
  the action and reward at its next slot.
  """
  rows = {name: (name, False) for name in storage_names}
  rows['next_action'] = ('action', True)
  rows['next_reward'] = ('reward', True)
  return rows


class PlanCache(dict):
  """A memory's batch plans by (batch size, with states): the newest 16.

  A plan is looked up with `get` (a dict's, no Python call on the sampling
  path) and made by `make` when missing.
  """

  _SIZE = 16

  def make(self, batch_size: int, states: bool, elements: Sequence[Any],
           storage_names: Sequence[str], row_elements: RowElements,
           sampler: Any) -> BatchPlan:
    """Makes, caches and returns the plan of a batch of `batch_size`.

    Args:
      batch_size: int, the batch's size.
      states: bool, whether the batch holds the states.
      elements: the memory's `get_transition_elements(batch_size)`.
      storage_names: the names of the memory's storage arrays.
      row_elements: the memory's row elements beyond the storage's.
      sampler: the memory's native sampler, or None; a plan it can fill
        whole gets its element codes.
    """
    if len(self) >= self._SIZE:
      del self[next(iter(self))]
    rows = storage_rows(storage_names)
    rows.update(row_elements)
    plan = self[batch_size, states] = BatchPlan(
        [e for e in elements if states or e.name not in STATES], rows)
    if sampler is not None and not plan.own:
      plan.codes = sampler.batch_codes(native_memory.element_codes(
          plan.elements, sampler.storage_names))
    return plan
