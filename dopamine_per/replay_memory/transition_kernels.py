# coding=utf-8
"""The per-batch loops of a circular replay memory's sampling.

`valid_mask`: which slots hold sampleable transitions. `trajectories`: the
n-step trajectory of each sampled slot (where it ends, whether at a
terminal, and its discounted return).

Validity. `OutOfGraphReplayBuffer` checks every sampled slot (and redraws
the invalid ones), so this runs once or more per batch. A slot `i` is valid when

* it lies in [0, capacity);
* its n-step trajectory and next state are written and do not straddle the
  cursor: before the memory is full, `stack - 1 <= i < cursor - horizon`;
  once full, `i` is not among the `horizon` slots before the cursor or the
  `stack` slots from it;
* no episode ends inside its frame stack before its last frame (the
  `stack - 1` slots before `i`);
* no episode ends without a terminal inside its trajectory before the
  return is cut at the first terminal (the return would bootstrap across
  episodes).

Trajectories. The trajectory of slot `i` is slots i, ..., i + n - 1, cut
after the first terminal; its return is sum_j gamma^j r_{i+j} over the
slots kept, computed as Dopamine does (float32 discounts times the rewards,
summed by NumPy), so that returns are bit-identical to Dopamine's.

Each comes as a vectorized NumPy function (`*_numpy`, a dozen NumPy calls)
and a Numba loop (the default; one call, several times faster on a
batch of 32) with the same results; `valid_mask` and `trajectories` pick
one, as the sum tree does (see `kernels.choose`).
"""

from typing import Callable, Optional, Tuple

import numpy as np

from dopamine_per.replay_memory import frame_stacks
from dopamine_per.replay_memory import kernels as kernels_lib

__all__ = ['TransitionsAndStates', 'trajectories', 'trajectories_numpy',
           'valid_mask', 'valid_mask_function', 'valid_mask_numpy']


def valid_mask_numpy(indices: np.ndarray, capacity: int, add_count: int,
                     horizon: int, stack: int, episode_end: np.ndarray,
                     terminal: np.ndarray) -> np.ndarray:
  """Validity of each slot in `indices` (see the module docstring).

  Args:
    indices: 1-D int64 array of slots (any values).
    capacity: int, the memory's capacity.
    add_count: int, transitions written so far.
    horizon: int, the update horizon n.
    stack: int, frames per state.
    episode_end: bool array [capacity], whether each slot ends an episode.
    terminal: array [capacity], nonzero where a transition is terminal.

  Returns:
    bool array shaped like `indices`.
  """
  cursor = add_count % capacity
  valid = (indices >= 0) & (indices < capacity)
  indices = np.where(valid, indices, 0)
  if add_count >= capacity:
    valid &= (indices - (cursor - horizon)) % capacity >= horizon + stack
  else:
    valid &= (indices >= stack - 1) & (indices < cursor - horizon)
  if not valid.any():
    return valid
  if stack > 1:
    prior = (indices[:, None] + np.arange(1 - stack, 0)) % capacity
    valid &= ~episode_end[prior].any(axis=1)
  trajectory = (indices[:, None] + np.arange(horizon)) % capacity
  ends = terminal[trajectory] != 0
  cut_off = episode_end[trajectory] & ~ends
  if horizon > 1:
    cut_off &= ~np.logical_or.accumulate(ends, axis=1)
  valid &= ~cut_off.any(axis=1)
  return valid


def trajectories_numpy(indices: np.ndarray, capacity: int,
                       terminal: np.ndarray, rewards: np.ndarray,
                       discounts: np.ndarray
                      ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The n-step trajectories of valid slots (see the module docstring).

  Args:
    indices: 1-D int64 array of valid slots.
    capacity: int, the memory's capacity.
    terminal: array [capacity], nonzero where a transition is terminal.
    rewards: array [capacity, *reward_shape], the stored rewards.
    discounts: float32 array [n], gamma^j.

  Returns:
    (next_indices, is_terminal, returns): int64 [batch], the slot after each
    trajectory (its next state's); bool [batch], whether it was cut at a
    terminal; [batch, *reward_shape] of the rewards' dtype, the returns.
  """
  horizon = len(discounts)
  trajectory = (indices[:, None] + np.arange(horizon)) % capacity
  ends = terminal[trajectory] != 0
  is_terminal = ends.any(axis=1)
  lengths = np.where(is_terminal, np.argmax(ends, axis=1) + 1, horizon)
  next_indices = (indices + lengths) % capacity
  return next_indices, is_terminal, _returns(rewards[trajectory], lengths,
                                             is_terminal, discounts)


def _returns(rewards: np.ndarray, lengths: np.ndarray,
             is_terminal: np.ndarray, discounts: np.ndarray) -> np.ndarray:
  """Discounted sums of [batch, n, *reward_shape] rewards, cut at lengths.

  Per trajectory length, the same NumPy product and reduction as Dopamine.
  """
  returns = np.empty((len(lengths),) + rewards.shape[2:], dtype=rewards.dtype)
  trailing = (1,) * (rewards.ndim - 2)
  if not is_terminal.any():
    length = len(discounts)
    returns[...] = np.sum(
        discounts.reshape((length,) + trailing) * rewards, axis=1)
    return returns
  for length in np.unique(lengths).tolist():  # At most n lengths.
    rows = np.flatnonzero(lengths == length)
    returns[rows] = np.sum(
        discounts[:length].reshape((length,) + trailing) *
        rewards[rows, :length], axis=1)
  return returns


# NumPy sums fewer than this many numbers one after the other (more are
# summed pairwise, which the Numba loop does not reproduce).
_SEQUENTIAL_SUM_LIMIT = 8


def valid_mask(indices: np.ndarray, capacity: int, add_count: int,
               horizon: int, stack: int, episode_end: np.ndarray,
               terminal: np.ndarray, kernels: kernels_lib.KernelsLike = None
              ) -> np.ndarray:
  """`valid_mask_numpy`, compiled when Numba is installed.

  Args:
    indices, capacity, add_count, horizon, stack, episode_end, terminal: see
      `valid_mask_numpy`.
    kernels: a `kernels.Kernels`, a name or None (see `kernels.choose`).

  Returns:
    bool array shaped like `indices`.
  """
  return valid_mask_function(terminal, kernels)(
      indices, capacity, add_count, horizon, stack, episode_end, terminal)


def valid_mask_function(terminal: np.ndarray,
                        kernels: kernels_lib.KernelsLike = None
                       ) -> Callable[..., np.ndarray]:
  """The function `valid_mask` calls for this terminal array and kernels.

  A memory keeps it, to skip the choice on every sample.
  """
  if not kernels_lib.choose(kernels).compiled or terminal.ndim != 1:
    return valid_mask_numpy
  return kernels_lib.numba_loops.valid_mask_loop


def trajectories(indices: np.ndarray, capacity: int, terminal: np.ndarray,
                 rewards: np.ndarray, discounts: np.ndarray,
                 kernels: kernels_lib.KernelsLike = None
                ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`trajectories_numpy`, compiled when Numba is installed.

  The compiled loop covers scalar float32 rewards and horizons below 8
  (NumPy sums longer ones pairwise); anything else takes the NumPy path.

  Args:
    indices, capacity, terminal, rewards, discounts: see
      `trajectories_numpy`.
    kernels: a `kernels.Kernels`, a name or None (see `kernels.choose`).

  Returns:
    (next_indices, is_terminal, returns), see `trajectories_numpy`.
  """
  if _compiled_trajectories(terminal, rewards, discounts, kernels):
    return kernels_lib.numba_loops.trajectories_loop(
        indices, capacity, terminal, rewards, discounts)
  return trajectories_numpy(indices, capacity, terminal, rewards, discounts)


def _compiled_trajectories(terminal: np.ndarray, rewards: np.ndarray,
                           discounts: np.ndarray,
                           kernels: kernels_lib.KernelsLike) -> bool:
  return (kernels_lib.choose(kernels).compiled and terminal.ndim == 1 and
          rewards.ndim == 1 and rewards.dtype == np.float32 and
          discounts.dtype == np.float32 and
          len(discounts) < _SEQUENTIAL_SUM_LIMIT)


class TransitionsAndStates(object):
  """`trajectories`, and the states ending at the slots and at their ends.

  For 4 one-byte frames per state and float32 rewards, with Numba, one
  compiled call builds the trajectories and both stacks of a batch;
  otherwise `trajectories` then `frame_stacks.gather_stacks_ending_at`. A
  memory keeps one of these per storage, so that a sample does not redo the
  choice and the reshapes.
  """

  def __init__(self, frames: np.ndarray, stack: int, terminal: np.ndarray,
               rewards: np.ndarray, discounts: np.ndarray,
               kernels: kernels_lib.KernelsLike = None):
    """Chooses the path for one storage.

    Args:
      frames: array [capacity, *observation_shape], the frame storage.
      stack: int, frames per state.
      terminal, rewards, discounts: see `trajectories`.
      kernels: a `kernels.Kernels`, a name or None (see `kernels.choose`).
    """
    kernels = kernels_lib.choose(kernels)
    self._frames, self._stack, self._kernels = frames, stack, kernels
    self._arrays = (terminal, rewards, discounts)
    self.compiled = (frame_stacks.compiled_4x8(frames, stack, kernels) and
                     _compiled_trajectories(terminal, rewards, discounts,
                                            kernels))
    # The frames as rows of bytes, for the compiled call.
    self._frame_bytes = (frames.reshape(len(frames), -1).view(np.uint8)
                         if self.compiled else None)

  def __call__(self, indices: np.ndarray,
               pool: Optional[frame_stacks.BufferPool] = None
              ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Returns the trajectories of `indices` and the states at both ends.

    Args:
      indices: 1-D int64 array of valid slots.
      pool: as for `frame_stacks.gather_stacks`.

    Returns:
      (next_indices, is_terminal, returns, stacks): the first three as
      `trajectories`; stacks [2 * batch, *observation_shape, stack], the
      states ending at `indices`, then those ending at `next_indices`.
    """
    frames = self._frames
    if not (self.compiled and len(indices)):
      next_indices, is_terminal, returns = trajectories(
          indices, len(frames), *self._arrays, kernels=self._kernels)
      stacks = frame_stacks.gather_stacks_ending_at(
          frames, np.concatenate([indices, next_indices]), self._stack,
          kernels=self._kernels, pool=pool)
      return next_indices, is_terminal, returns, stacks
    rows = 2 * len(indices)
    stacks = frame_stacks.empty_output(
        (rows,) + frames.shape[1:] + (self._stack,), frames.dtype, pool)
    next_indices, is_terminal, returns = (
        kernels_lib.numba_loops.atari_transitions(
            self._frame_bytes, *self._arrays, indices,
            stacks.reshape(rows, -1).view(np.uint32)))
    return next_indices, is_terminal, returns, stacks

