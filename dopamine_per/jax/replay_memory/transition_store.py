# coding=utf-8
"""A memory's elements by slot, their frames stored once (issue 34).

Element slot i holds what `accumulator.ElementSpan` says of it: the steps
its state and next state end at, the first step they show, the action, the
return and the terminal flag, in one array per field (no Python object per
element). Frames live in a `frame_ring.FrameRing`, one row per step. A
batch is gathered by the native sampler: its stacks from the ring, its
scalars by NumPy indexing. Arguments are checked as the TF memories' `add`
checks them (`add_checks`): an observation of another shape, or a value
that the dtype fixed by the first one cannot hold exactly, is refused.
"""

from typing import Any, Optional

import numpy as np

from dopamine_per.jax.replay_memory import accumulator
from dopamine_per.jax.replay_memory import elements
from dopamine_per.jax.replay_memory import frame_ring
from dopamine_per.replay_memory.memory import add_checks

__all__ = ['TransitionStore']

# The fields of an element besides its frames, as ElementSpan names them.
_SCALARS = ('action', 'reward', 'is_terminal')
# Rows the ring holds beyond the capacity and the stacks at first.
_RING_SLACK = 64
# How much a ring that must grow grows, at least.
_GROWTH = 1.25


class TransitionStore(object):
  """Elements in `capacity` slots over a ring of frames.

  Attributes:
    capacity: int, the slots.
    stack_size: int, frames per state.
  """

  def __init__(self, capacity: int, stack_size: int, update_horizon: int,
               compress: bool) -> None:
    self.capacity = capacity
    self.stack_size = stack_size
    self._ring_rows = capacity + stack_size + update_horizon + _RING_SLACK
    self._compress = compress
    self._ring: Optional[frame_ring.FrameRing] = None
    self._observation: Optional[add_checks.AddSpec] = None
    self._specs = {}
    self._columns = {}
    self._ends = np.zeros(capacity, np.int64)
    self._next_ends = np.zeros(capacity, np.int64)
    self._firsts = np.zeros(capacity, np.int64)

  @property
  def nbytes(self) -> int:
    """The bytes held: frames, element arrays."""
    arrays = [self._ends, self._next_ends, self._firsts,
              *self._columns.values()]
    frames = self._ring.nbytes if self._ring is not None else 0
    return frames + sum(array.nbytes for array in arrays)

  def oldest_read(self, slot: int) -> int:
    """The oldest step whose frame element `slot` shows."""
    return max(int(self._ends[slot]) - self.stack_size + 1,
               int(self._firsts[slot]))

  def check_observation(self, observation: Any) -> np.ndarray:
    """`observation` as it will be stored; ValueError (naming it) if it
    cannot be stored exactly beside the first one."""
    if self._observation is None:
      value = np.asarray(observation)
      if value.dtype.hasobject or value.dtype.kind not in 'biuf':
        raise ValueError('add(): the observation must be numeric, got dtype '
                         '{}'.format(value.dtype))
      self._observation = add_checks.AddSpec(
          'observation', value.shape, add_checks.native_byte_order(
              value.dtype))
    return np.asarray(add_checks.check_value(self._observation, observation))

  def write_frame(self, step: int, frame: np.ndarray, keep_from: int) -> None:
    """Stores step `step`'s frame, keeping steps [keep_from, step)."""
    if self._ring is None:
      self._ring = frame_ring.FrameRing(
          self._ring_rows, self._observation.shape, self._observation.dtype,
          self._compress)
    held = step - keep_from + 1
    if held > self._ring.rows:
      self._ring.grow(max(held + _RING_SLACK, int(self._ring.rows * _GROWTH)),
                      keep_from, step - 1)
    self._ring.write(step, frame)

  def _checked(self, name: str, value: Any) -> Any:
    """`value` as field `name`'s column stores it (the first value fixes
    its dtype); ValueError (naming the field) if it cannot be."""
    spec = self._specs.get(name)
    if spec is None:
      dtype = np.asarray(value).dtype
      if dtype.hasobject or dtype.kind not in 'biuf' or np.ndim(value):
        raise ValueError('add(): {} must be a number, got {!r}'.format(
            name, value))
      spec = self._specs[name] = add_checks.AddSpec(name, (), dtype)
      self._columns[name] = np.zeros(self.capacity, dtype)
    return add_checks.check_value(spec, value)

  def check_step(self, transition: elements.TransitionElement) -> np.ndarray:
    """Checks a step before anything of it is kept: its observation (see
    `check_observation`, returned as stored), action and terminal flag
    (stored exactly as the first step's dtypes), reward (a real number).

    Raises:
      ValueError: Naming the field that cannot be stored.
    """
    frame = self.check_observation(transition.observation)
    self._checked('action', transition.action)
    self._checked('is_terminal', transition.is_terminal)
    reward = np.asarray(transition.reward)
    if reward.ndim or reward.dtype.kind not in 'biuf':
      raise ValueError('add(): reward must be a real number, got {!r}'.format(
          transition.reward))
    return frame

  def check_span(self, span: accumulator.ElementSpan) -> list:
    """`span`'s scalars as they will be stored (the first return fixes the
    reward's dtype); ValueError (naming the field) if one cannot be."""
    return [self._checked(name, getattr(span, name)) for name in _SCALARS]

  def put(self, slot: int, span: accumulator.ElementSpan,
          scalars: list) -> None:
    """Stores the element `span` describes (scalars from `check_span`)."""
    self._ends[slot] = span.end
    self._next_ends[slot] = span.next_end
    self._firsts[slot] = span.first
    for name, value in zip(_SCALARS, scalars):
      self._columns[name][slot] = value

  def batch(self, slots: np.ndarray) -> elements.ReplayElement:
    """The elements at `slots`, stacked (states frames last)."""
    shape = (len(slots),) + self._ring.frame_shape + (self.stack_size,)
    states = np.empty(shape, self._ring.dtype)
    next_states = np.empty(shape, self._ring.dtype)
    firsts = self._firsts[slots]
    self._ring.fill(self.stack_size, self._ends[slots], firsts,
                    self._next_ends[slots], firsts, states, next_states)
    terminal = self._columns['is_terminal'][slots]
    return elements.ReplayElement(
        state=states, action=self._columns['action'][slots],
        reward=self._columns['reward'][slots], next_state=next_states,
        is_terminal=terminal, episode_end=terminal.copy())

  def element(self, slot: int) -> elements.ReplayElement:
    """The element at `slot`, alone (no leading axis)."""
    batch = self.batch(np.asarray([slot], np.int64))
    return batch.replace(**{name: getattr(batch, name)[0]
                            for name in ('state', 'action', 'reward',
                                         'next_state', 'is_terminal',
                                         'episode_end')})
