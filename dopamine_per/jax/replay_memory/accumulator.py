# coding=utf-8
"""Turning an episode's steps into replay elements, as Dopamine JAX's.

`TransitionAccumulator` keeps an episode's last `stack_size +
update_horizon` steps and, as each step comes, says which elements are
complete: the element whose n-step return ends at this step, and at a
terminal step every shorter one left (including, as Dopamine's does, the
oldest full-horizon element again, once per step dropped, its state losing
a frame each time). A step that ends an episode without terminating it
drops the shorter ones.

Each element is described by `ElementSpan`: its state's and next state's
last frames as step numbers (counted from the accumulator's first step),
the first step whose frame they show (frames before it are zeros), the
action, the discounted return and the terminal flag. The memory stores
those and each step's frame once; `accumulate` builds Dopamine's stacked
`ReplayElement`s from them for anyone who asks.
"""

import collections
import typing
from typing import Any, Dict, Iterable, List, Optional, Protocol

import numpy as np

from dopamine_per import errors
from dopamine_per.jax.replay_memory import elements

__all__ = ['Accumulator', 'ElementSpan', 'TransitionAccumulator']


@typing.runtime_checkable
class Accumulator(Protocol):
  """What a memory asks of its accumulator."""

  def accumulate(self, transition: elements.TransitionElement
                 ) -> Iterable[Any]:
    """The elements `transition` completes."""

  def clear(self) -> None:
    """Forgets the episode so far."""


class ElementSpan(typing.NamedTuple):
  """An element, its frames as step numbers.

  Attributes:
    first: the first step whose frame the stacks show (older: zeros).
    end: the step of the state's last frame (whose action it took).
    next_end: the step of the next state's last frame.
    action: the action taken at `end`.
    reward: the discounted return of the steps from `end` on.
    is_terminal: whether the episode terminates at `next_end`.
  """
  first: int
  end: int
  next_end: int
  action: Any
  reward: Any
  is_terminal: Any


class TransitionAccumulator(object):
  """Stacks frames and n-step returns over an episode's recent steps."""

  def __init__(self, stack_size: int, update_horizon: int, gamma: float):
    if update_horizon <= 0:
      raise errors.ArgumentError(
          'update_horizon must be positive, got {!r}.'.format(update_horizon))
    if stack_size <= 0:
      raise errors.ArgumentError(
          'stack_size must be positive, got {!r}.'.format(stack_size))
    self._stack_size = stack_size
    self._update_horizon = update_horizon
    self._gamma = gamma
    self._trajectory = collections.deque(maxlen=update_horizon + stack_size)
    # The step number of the next step, and so of the trajectory's end.
    self._steps = 0

  @property
  def stack_size(self) -> int:
    return self._stack_size

  @property
  def update_horizon(self) -> int:
    return self._update_horizon

  @property
  def steps(self) -> int:
    """How many steps have been accumulated (the next one's number)."""
    return self._steps

  @property
  def held_steps(self) -> int:
    """How many of the latest steps it holds (their frames are read by
    the elements still to come)."""
    return len(self._trajectory)

  def _span(self) -> Optional[ElementSpan]:
    """The element the trajectory completes now, if any."""
    steps = self._trajectory
    length, horizon = len(steps), self._update_horizon
    last = steps[-1]
    if length <= horizon and not (length > 1 and last.is_terminal):
      return None
    if last.is_terminal and length <= horizon:
      horizon = length - 1
    end = length - 1 - horizon
    reward = 0.0
    for t in range(end, min(end + self._update_horizon, length)):
      reward += steps[t].reward * (self._gamma**(t - end))
    first = self._steps - length
    return ElementSpan(first, first + end, first + length - 1,
                       steps[end].action, reward, last.is_terminal)

  def accumulate_spans(self, transition: elements.TransitionElement
                       ) -> List[ElementSpan]:
    """Takes one step (numbered `steps` before the call) and returns the
    elements it completes, in Dopamine's order."""
    self._trajectory.append(transition)
    self._steps += 1
    spans = []
    if transition.is_terminal:
      while (span := self._span()) is not None:
        spans.append(span)
        self._trajectory.popleft()
      self._trajectory.clear()
      return spans
    span = self._span()
    if span is not None:
      spans.append(span)
    if transition.episode_end:
      self._trajectory.clear()
    return spans

  def stack(self, end: int, first: int) -> np.ndarray:
    """The state whose last frame is step `end`'s (one of the trajectory's
    steps), frames before step `first` zeros: frames last."""
    offset = self._steps - len(self._trajectory)
    newest = self._trajectory[-1].observation
    state = np.zeros(np.shape(newest) + (self._stack_size,),
                     np.asarray(newest).dtype)
    start = end - self._stack_size + 1
    for step in range(max(start, first, offset), end + 1):
      state[..., step - start] = self._trajectory[step - offset].observation
    return state

  def accumulate(self, transition: elements.TransitionElement
                 ) -> Iterable[elements.ReplayElement]:
    """Takes one step; yields the `ReplayElement`s it completes."""
    self._trajectory.append(transition)
    self._steps += 1
    terminal = transition.is_terminal
    while (span := self._span()) is not None:
      yield elements.ReplayElement(
          state=self.stack(span.end, span.first), action=span.action,
          reward=span.reward, next_state=self.stack(span.next_end,
                                                    span.first),
          is_terminal=span.is_terminal, episode_end=span.is_terminal)
      if not terminal:
        break
      self._trajectory.popleft()
    if terminal or transition.episode_end:
      self._trajectory.clear()

  def clear(self) -> None:
    """Forgets the episode so far (step numbers go on)."""
    self._trajectory.clear()

  def to_state_dict(self) -> Dict[str, Any]:
    """The trajectory's steps (each as [observation, action, reward,
    is_terminal, episode_end]) and the step count: plain data."""
    return {'trajectory': [list(step) for step in self._trajectory],
            'steps': self._steps}

  def from_state_dict(self, state_dict: Dict[str, Any]) -> None:
    steps = [elements.TransitionElement(*step)
             for step in state_dict['trajectory']]
    if len(steps) > self._trajectory.maxlen:
      raise errors.ArgumentError(
          'the trajectory holds {} steps, more than stack_size + '
          'update_horizon = {}'.format(len(steps), self._trajectory.maxlen))
    self._trajectory.clear()
    self._trajectory.extend(steps)
    self._steps = int(state_dict.get('steps', len(steps)))
