# coding=utf-8
"""What goes into the replay memory and what comes out, as Dopamine JAX.

`TransitionElement` is one step an agent adds; `ReplayElement` a stored
transition (state, action, n-step reward, next state, terminal flags), and a
sampled batch of them. `compress` and `uncompress` are Dopamine's snappy
format of one array (a structured array of the bytes, the shape and the
dtype), which `ReplayElement.pack` uses and Dopamine JAX's compressed
checkpoints hold; our memory stores frames in its own blocks instead.
"""

import typing
from typing import Any, NewType, Optional, Protocol

from flax import struct
import numpy as np
import numpy.typing as npt

__all__ = ['ReplayItemID', 'TransitionElement', 'ReplayElementProtocol',
           'ReplayElement', 'compress', 'uncompress']

ReplayItemID = NewType('ReplayItemID', int)


class TransitionElement(typing.NamedTuple):
  """One step: the observation acted on, the action, the reward it got,
  whether the episode terminated, and whether it ended (terminated or cut
  short, e.g. by a time limit)."""
  observation: Optional[npt.NDArray[Any]]
  action: Any
  reward: Any
  is_terminal: Any
  episode_end: Any = False


@typing.runtime_checkable
class ReplayElementProtocol(Protocol):
  """A stored element that may be kept compressed."""

  def pack(self) -> 'ReplayElementProtocol':
    """The element with its large arrays compressed."""

  def unpack(self) -> 'ReplayElementProtocol':
    """The element with its arrays decompressed."""

  @property
  def is_compressed(self) -> bool:
    """Whether `pack` made it."""


def _snappy() -> Any:
  try:
    import snappy  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        'packed replay elements are snappy-compressed: pip install '
        '"dopamine_per[jax]" (python-snappy)') from e
  return snappy


def compress(buffer: npt.NDArray[Any]) -> np.ndarray:
  """`buffer` snappy-compressed, as a structured array of three fields:
  `data` (the compressed bytes), `shape` and `dtype` (its string)."""
  buffer = np.ascontiguousarray(buffer)
  data = np.frombuffer(_snappy().compress(buffer.tobytes()), np.uint8)
  dtype = buffer.dtype.str
  layout = [('data', 'u1', data.shape), ('shape', 'i4', (buffer.ndim,)),
            ('dtype', 'S{}'.format(len(dtype)))]
  return np.array((data, buffer.shape, dtype), dtype=layout)


def uncompress(compressed: np.ndarray) -> np.ndarray:
  """The array `compress` made `compressed` from."""
  shape = tuple(int(n) for n in compressed['shape'])
  dtype = np.dtype(compressed['dtype'].item())
  raw = _snappy().uncompress(compressed['data'].tobytes())
  return np.frombuffer(raw, dtype).reshape(shape)


class ReplayElement(ReplayElementProtocol, struct.PyTreeNode):
  """A transition, or a batch of them (each field with a leading axis).

  Attributes:
    state: the stacked frames acted on ([*observation shape, stack]).
    action: the action taken.
    reward: the discounted n-step return.
    next_state: the stacked frames n steps later (or at the episode's end).
    is_terminal: whether next_state ends the episode (no bootstrap).
    episode_end: as Dopamine JAX stores it, equal to is_terminal.
  """

  state: Any
  action: Any
  reward: Any
  next_state: Any
  is_terminal: Any
  episode_end: Any

  def pack(self) -> 'ReplayElement':
    return self.replace(state=compress(self.state),
                        next_state=compress(self.next_state))

  def unpack(self) -> 'ReplayElement':
    return self.replace(state=uncompress(self.state),
                        next_state=uncompress(self.next_state))

  @property
  def is_compressed(self) -> bool:
    return (self.state.dtype.names is not None and
            self.next_state.dtype.names is not None)
