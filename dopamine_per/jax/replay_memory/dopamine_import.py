# coding=utf-8
"""Reading Dopamine JAX's replay checkpoints into our memory (issue 34).

Dopamine JAX saves a `ReplayBuffer` with orbax as
`<checkpoint_dir>/<iteration>/replay/checkpoint.msgpack`: msgpack whose
arrays are maps of `dtype` (a Python literal), `shape` and `data`, and
whose stored elements are lists of leaves beside a pickled `PyTreeDef`.
Unpickling could run any code, so the pickles are never loaded: the leaves
are read as Dopamine's `ReplayElement` (state, action, reward, next state,
terminal, episode end) and `TransitionElement` (observation, action,
reward, terminal, episode end) lay them out, and anything else is refused.
Dtypes are parsed with `ast.literal_eval` and must be numeric, bool, or
the structured layout of Dopamine's snappy-packed states.

`convert` turns the checkpoint into the state our `ReplayBuffer` installs:
each element's stacked states become rows of single frames again, an
element continuing the rows of the one before where its frames match (so
an episode's frames are stored about once), its leading zero frames a
mask, its next state found among the rows that follow or else written.
"""

import ast
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from dopamine_per.file_io import atomic_files
from dopamine_per.jax.replay_memory import elements
from dopamine_per.jax.replay_memory import frame_ring

__all__ = ['read', 'convert', 'convert_elements']

# The most bytes a Dopamine checkpoint read may have.
_MAX_BYTES = 1 << 38
# How far after an element's state its next state is looked for.
_MAX_HORIZON = 64
_REPLAY_FIELDS = 6
_TRANSITION_FIELDS = 5


def _dtype(text: Any) -> np.dtype:
  """A dtype from Dopamine's repr: numeric or bool, or its packed layout."""
  described = ast.literal_eval(str(text))
  if isinstance(described, str):
    dtype = np.dtype(described)
    if dtype.kind in 'biuf' and not dtype.hasobject:
      return dtype
  elif isinstance(described, list):
    names = [field[0] for field in described]
    if names == ['data', 'shape', 'dtype']:
      dtype = np.dtype([tuple(field) for field in described])
      if not dtype.hasobject:
        return dtype
  raise ValueError('an array of dtype {!r}'.format(text))


def _hook(value: Dict[Any, Any]) -> Any:
  if set(value) in ({'dtype', 'shape', 'data'},
                    {'dtype', 'shape', 'data', 'order'}):
    dtype = _dtype(value['dtype'])
    shape = tuple(int(n) for n in value['shape'])
    data = value['data']
    if (not isinstance(data, bytes) or any(n < 0 for n in shape) or
        int(np.prod(shape, dtype=object)) * dtype.itemsize != len(data)):
      raise ValueError('an array of shape {} and {} bytes'.format(
          shape, len(data)))
    order = 'F' if value.get('order') == 'F' else 'C'
    return np.ndarray(shape, dtype, buffer=data, order=order).copy()
  if set(value) == {'integer'}:
    return int(value['integer'])
  return value


def read(checkpoint_dir: Any, iteration: int) -> Dict[str, Any]:
  """Dopamine JAX's replay checkpoint as plain data (pickles left unread).

  Raises:
    FileNotFoundError: If there is none.
    atomic_files.CorruptCheckpointError: If it cannot be read as one.
  """
  path = os.path.join(os.fspath(checkpoint_dir), str(int(iteration)),
                      'replay', 'checkpoint.msgpack')
  if not atomic_files.exists(path):
    raise atomic_files.not_found_error(
        'no Dopamine replay checkpoint of iteration {} in {}'.format(
            iteration, os.fspath(checkpoint_dir)), path)
  import msgpack  # pylint: disable=g-import-not-at-top
  size = os.path.getsize(path)
  if size > _MAX_BYTES:
    raise atomic_files.CorruptCheckpointError(
        '{}: {} bytes, more than any Dopamine checkpoint read ({})'.format(
            path, size, _MAX_BYTES))
  data = atomic_files.read_file(path, size, 'Dopamine checkpoint')
  try:
    state = msgpack.unpackb(data, raw=False, strict_map_key=False,
                            object_hook=_hook)
    if not isinstance(state, dict) or 'add_count' not in state:
      raise ValueError('no add_count')
  except Exception as e:  # msgpack's errors too.  pylint: disable=broad-except
    raise atomic_files.CorruptCheckpointError(
        '{}: not a Dopamine JAX replay checkpoint: {}'.format(path, e)) from e
  return state


def _stack_frames(state: np.ndarray) -> List[np.ndarray]:
  if state.dtype.names is not None:
    state = elements.uncompress(state)
  return [state[..., j] for j in range(state.shape[-1])]


class _Rows(object):
  """Frames as rows, built element by element."""

  def __init__(self) -> None:
    self.frames: List[np.ndarray] = []

  def fits(self, stack: List[np.ndarray], end: int
           ) -> Optional[Tuple[float, float]]:
    """The interval of `first`s for which the rows ending at `end` read as
    `stack` (frames before `first` zeros), or None if none does."""
    size = len(stack)
    start = end - size + 1
    if start < 0 or end >= len(self.frames):
      return None
    zeros = 0
    while zeros < size and not stack[zeros].any():
      zeros += 1
    shown = size  # Rows equal the stack from `shown` on.
    while shown > 0 and np.array_equal(stack[shown - 1],
                                       self.frames[start + shown - 1]):
      shown -= 1
    if shown > zeros:
      return None
    return (start + shown if shown else -np.inf, start + zeros)

  def append(self, stack: List[np.ndarray]) -> Tuple[int, Tuple[float,
                                                                 float]]:
    """New rows holding `stack`: where it ends, and its firsts."""
    self.frames.extend(stack)
    end = len(self.frames) - 1
    return end, self.fits(stack, end)

  def follow(self, stack: List[np.ndarray], end: int) -> None:
    """Adds the frames of `stack` missing after the last row, if `stack`
    is the stack ending at row `end` shifted by 1 to len(stack) - 1 steps
    (the rows after `end` already holding its first newer frames)."""
    size, last = len(stack), len(self.frames) - 1
    for shift in range(max(1, last - end), size):
      start = end - size + 1 + shift
      if all(np.array_equal(stack[j], self.frames[start + j])
             for j in range(last - start + 1)):
        self.frames.extend(stack[last - start + 1:])
        return

  def place(self, stack: List[np.ndarray], candidates: List[int],
            extend: bool = False) -> Tuple[int, Tuple[float, float]]:
    """Where `stack` ends: the first candidate row whose rows read as it,
    else (`extend`) its newest frame added to continue the last rows, else
    new rows."""
    for end in candidates:
      firsts = self.fits(stack, end)
      if firsts is not None:
        return end, firsts
    if extend and self.frames:
      self.frames.append(stack[-1])
      firsts = self.fits(stack, len(self.frames) - 1)
      if firsts is not None:
        return len(self.frames) - 1, firsts
      self.frames.pop()
    return self.append(stack)


def _element_leaves(values: Any) -> List[List[Any]]:
  values = list(values)
  for leaves in values:
    if not isinstance(leaves, list) or len(leaves) != _REPLAY_FIELDS:
      raise ValueError('a stored element is not a ReplayElement\'s six '
                       'leaves')
  return values


def convert(dopamine: Dict[str, Any], max_capacity: int, stack_size: int
            ) -> Tuple[Dict[str, Any], List[frame_ring.FramePart]]:
  """Our `ReplayBuffer`'s state (and frames) from Dopamine's `read`.

  Raises:
    ValueError: If it is not a checkpoint of such a memory.
  """
  keys = [int(key) for key in dopamine['memory']['keys']]
  values = _element_leaves(dopamine['memory']['values'])
  add_count = int(dopamine['add_count'])
  if (len(keys) != len(values) or len(keys) > max_capacity or
      keys != list(range(add_count - len(keys), add_count))):
    raise ValueError('its keys are not the last {} of add_count={}'.format(
        len(keys), add_count))
  rows = _Rows()
  ends = np.zeros(max_capacity, np.int64)
  next_ends, firsts = ends.copy(), ends.copy()
  columns: Dict[str, Any] = {}
  # First the states, in key order (an episode's continue one another's
  # rows), then the next states, found among those rows if they can be.
  placed, previous = [], None
  for leaves in values:
    frames = _stack_frames(np.asarray(leaves[0]))
    if len(frames) != stack_size:
      raise ValueError('a state of {} frames, not {}'.format(
          len(frames), stack_size))
    # The same end as the element before (Dopamine's repeats at a
    # terminal step), or the next.
    near = [] if previous is None else [previous, previous + 1]
    end, state_firsts = rows.place(frames, near, extend=True)
    next_frames = _stack_frames(np.asarray(leaves[3]))
    placed.append((end, state_firsts, next_frames))
    previous = end
    # Its next state's newer frames may follow it (an episode's last
    # steps' frames are in no state).
    rows.follow(next_frames, previous)
  for key, leaves, (end, state_firsts, next_frames) in zip(keys, values,
                                                           placed):
    next_end, next_firsts = rows.place(
        next_frames, list(range(end + 1, min(end + _MAX_HORIZON,
                                             len(rows.frames)))))
    if max(state_firsts[0], next_firsts[0]) > min(state_firsts[1],
                                                  next_firsts[1]):
      next_end, next_firsts = rows.append(next_frames)
    slot = key % max_capacity
    ends[slot], next_ends[slot] = end, next_end
    firsts[slot] = int(min(state_firsts[1], next_firsts[1]))
    for name, value in (('action', leaves[1]), ('reward', leaves[2]),
                        ('is_terminal', leaves[4])):
      if name not in columns:
        columns[name] = np.zeros(max_capacity, np.asarray(value).dtype)
      columns[name][slot] = value
  return _state(dopamine, rows, ends, next_ends, firsts, columns,
                max_capacity, stack_size)


def _state(dopamine: Dict[str, Any], rows: _Rows, ends: np.ndarray,
           next_ends: np.ndarray, firsts: np.ndarray,
           columns: Dict[str, Any], max_capacity: int, stack_size: int
           ) -> Tuple[Dict[str, Any], List[frame_ring.FramePart]]:
  """Our state: the rows, then the episode so far's observations."""
  steps = []
  for leaves in dopamine['transition_accumulator']['trajectory']:
    if not isinstance(leaves, list) or len(leaves) != _TRANSITION_FIELDS:
      raise ValueError("a trajectory step is not a TransitionElement's "
                       'five leaves')
    steps.append(leaves)
  for leaves in steps:
    rows.frames.append(np.asarray(leaves[0]))
  newest = len(rows.frames) - 1
  frames = np.stack(rows.frames) if rows.frames else None
  memory = {'ends': ends, 'next_ends': next_ends, 'firsts': firsts,
            'columns': columns}
  parts = []
  if frames is not None:
    memory['observation'] = {'shape': list(frames.shape[1:]),
                             'dtype': frames.dtype.str}
    memory['frames'] = {'oldest': 0, 'newest': newest}
    parts = [frame_ring.FramePart(frame_ring.PartKey(False, 0, newest),
                                  frames.tobytes())]
  sampler = dict(dopamine['sampling_distribution'])
  return {
      'add_count': int(dopamine['add_count']),
      'max_capacity': max_capacity,
      'stack_size': stack_size,
      'transition_accumulator': {'trajectory': steps,
                                 'steps': newest + 1},
      'sampling_distribution': sampler,
      'memory': memory,
  }, parts


def convert_elements(dopamine: Dict[str, Any], max_capacity: int
                     ) -> Dict[str, Any]:
  """Our state, for a memory storing another accumulator's elements as
  they are, from Dopamine's `read`."""
  values = []
  for leaves in _element_leaves(dopamine['memory']['values']):
    fields = list(leaves)
    for i in (0, 3):
      if np.asarray(fields[i]).dtype.names is not None:
        fields[i] = elements.uncompress(fields[i])
    values.append({'kind': 'replay_element', 'fields': fields})
  return {
      'add_count': int(dopamine['add_count']),
      'max_capacity': max_capacity,
      'transition_accumulator': dopamine['transition_accumulator'],
      'sampling_distribution': dict(dopamine['sampling_distribution']),
      'memory': {'keys': list(dopamine['memory']['keys']),
                 'values': values},
  }
