# coding=utf-8
"""Which slots of a circular replay memory hold sampleable transitions.

`OutOfGraphReplayBuffer` checks every sampled slot (and redraws the invalid
ones), so this runs once or more per batch. A slot `i` is valid when

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

Two implementations give the same answer: `valid_mask_numpy` (vectorized,
a dozen NumPy calls) and a Numba loop from the `fast` extra (one call, about
ten times faster on a batch of 32). `valid_mask` picks one like the sum
tree's kernels (see `sum_tree_kernels.get_kernels`).
"""

from typing import Optional

import numpy as np

from dopamine_per.replay_memory import sum_tree_kernels

__all__ = ['valid_mask', 'valid_mask_numpy']


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


def _build_numba():
  """Compiles the Numba loop; returns it, or None without Numba."""
  if sum_tree_kernels.NumbaKernels is None:
    return None
  import numba  # pylint: disable=g-import-not-at-top

  @numba.njit(cache=True, nogil=True)
  def valid_mask_loop(indices, capacity, add_count, horizon, stack,
                      episode_end, terminal):
    valid = np.zeros(len(indices), dtype=np.bool_)
    cursor = add_count % capacity
    for b in range(len(indices)):
      slot = indices[b]
      if slot < 0 or slot >= capacity:
        continue
      if add_count >= capacity:
        if (slot - (cursor - horizon)) % capacity < horizon + stack:
          continue
      elif slot < stack - 1 or slot >= cursor - horizon:
        continue
      ok = True
      for k in range(1 - stack, 0):
        if episode_end[(slot + k) % capacity]:
          ok = False
      for k in range(horizon):
        step = (slot + k) % capacity
        if terminal[step] != 0:
          break  # The return is cut here: later slots do not matter.
        if episode_end[step]:
          ok = False
      valid[b] = ok
    return valid

  return valid_mask_loop


_VALID_MASK_NUMBA = _build_numba()


def valid_mask(indices: np.ndarray, capacity: int, add_count: int,
               horizon: int, stack: int, episode_end: np.ndarray,
               terminal: np.ndarray, kernels: Optional[str] = None
              ) -> np.ndarray:
  """`valid_mask_numpy`, compiled when Numba is installed.

  Args:
    indices, capacity, add_count, horizon, stack, episode_end, terminal: see
      `valid_mask_numpy`.
    kernels: 'numpy', 'numba' or None/'auto' (see
      `sum_tree_kernels.get_kernels`).

  Returns:
    bool array shaped like `indices`.
  """
  if (sum_tree_kernels.get_kernels(kernels) is sum_tree_kernels.NumpyKernels
      or terminal.ndim != 1):
    return valid_mask_numpy(indices, capacity, add_count, horizon, stack,
                            episode_end, terminal)
  return _VALID_MASK_NUMBA(indices, capacity, add_count, horizon, stack,
                           episode_end, terminal)
