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

from typing import Any, Dict, List, Optional, Tuple

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
    kind = type(value)
    # What agents pass, checked without NumPy: a bool into bools, an int
    # within an integer column's range, a float into float64.
    if kind is bool and spec.dtype.kind == 'b':
      return value
    if kind is int and spec.low is not None and (
        spec.low <= value <= spec.high):
      return value
    if kind is float and spec.dtype == np.float64:
      return value
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
    reward = transition.reward
    if type(reward) is not float:
      reward = np.asarray(reward)
      if reward.ndim or reward.dtype.kind not in 'biuf':
        raise ValueError('add(): reward must be a real number, got '
                         '{!r}'.format(transition.reward))
    return frame

  def check_span(self, span: accumulator.ElementSpan) -> Any:
    """`span`'s return as it will be stored (the first fixes its dtype);
    ValueError if it cannot be. Its action and terminal flag are a step's,
    which `check_step` checked."""
    return self._checked('reward', span.reward)

  def put(self, slot: int, span: accumulator.ElementSpan,
          reward: Any) -> None:
    """Stores the element `span` describes (its return from
    `check_span`)."""
    self._ends[slot] = span.end
    self._next_ends[slot] = span.next_end
    self._firsts[slot] = span.first
    columns = self._columns
    columns['action'][slot] = span.action
    columns['reward'][slot] = reward
    columns['is_terminal'][slot] = span.is_terminal

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

  # --------------------------------------------------------- checkpoints

  def state(self, oldest: int, newest: int, known: Any = ()
            ) -> Tuple[Dict[str, Any], List[frame_ring.FramePart]]:
    """The store's state (plain data and arrays, copied) and its frames of
    steps [oldest, newest] as parts (`frame_ring.FrameRing.parts`; those
    in `known` without data)."""
    state = {'ends': self._ends.copy(), 'next_ends': self._next_ends.copy(),
             'firsts': self._firsts.copy(),
             'columns': {name: column.copy()
                         for name, column in self._columns.items()}}
    parts = []
    if self._observation is not None:
      state['observation'] = {'shape': list(self._observation.shape),
                              'dtype': self._observation.dtype.str}
    if self._ring is not None and oldest <= newest:
      state['frames'] = {'oldest': oldest, 'newest': newest}
      parts = self._ring.parts(oldest, newest, known)
    return state, parts

  def restore(self, state: Dict[str, Any],
              parts: List[frame_ring.FramePart]) -> None:
    """Takes what `state` gave (with every part's data).

    Raises:
      ValueError: If it does not fit this store (nothing changed).
    """
    arrays = {}
    for name in ('ends', 'next_ends', 'firsts'):
      arrays[name] = _column(state[name], np.int64, self.capacity, name)
    columns = {name: _column(column, None, self.capacity, name)
               for name, column in dict(state['columns']).items()}
    if set(columns) - set(_SCALARS):
      raise ValueError('unknown element fields {}'.format(
          sorted(set(columns) - set(_SCALARS))))
    observation, ring = None, None
    if 'observation' in state:
      dtype = np.dtype(state['observation']['dtype'])
      if dtype.kind not in 'biuf':
        raise ValueError('frames of dtype {} are not numeric'.format(dtype))
      observation = add_checks.AddSpec(
          'observation', tuple(int(n) for n in state['observation']['shape']),
          dtype)
    if 'frames' in state:
      if observation is None:
        raise ValueError('frames without an observation shape')
      held = state['frames']
      oldest, newest = int(held['oldest']), int(held['newest'])
      if not 0 <= oldest <= newest or newest - oldest > 64 * self._ring_rows:
        raise ValueError('frames of steps [{}, {}]'.format(oldest, newest))
      ring = frame_ring.FrameRing(1, observation.shape, observation.dtype,
                                  self._compress)
      ring.restore(max(self._ring_rows, newest - oldest + 1 + _RING_SLACK),
                   oldest, newest, parts)
    self._ends, self._next_ends = arrays['ends'], arrays['next_ends']
    self._firsts = arrays['firsts']
    self._columns = columns
    self._specs = {name: add_checks.AddSpec(name, (), column.dtype)
                   for name, column in columns.items()}
    self._observation, self._ring = observation, ring


def _column(values: Any, dtype: Any, length: int, name: str) -> np.ndarray:
  """A saved column as an array of `length` (of `dtype` if given)."""
  array = np.array(values, dtype=dtype)
  if array.shape != (length,) or array.dtype.kind not in 'biuf':
    raise ValueError('element field {} has shape {} and dtype {}, expected '
                     '{} numbers'.format(name, array.shape, array.dtype,
                                         length))
  return array
