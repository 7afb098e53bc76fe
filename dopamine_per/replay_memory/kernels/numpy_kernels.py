# coding=utf-8
"""The kernel interface, and its reference implementation in NumPy.

Every per-batch loop of the sum tree and the memories is a method of one
kernels object (docs/architecture.md#the-kernels). `NumpyKernels` here,
the reference, and `native_kernels.NativeKernels` (C++) give bit-identical
results because they share the arithmetic:

* A sum-tree parent is the pairwise ("halving") sum of its `fanout`
  children: adjacent pairs first, then pairs of those, and so on.
* A descent is docs/architecture.md#the-sum-trees-flat-layout's.
* Validity is docs/compat.md#which-transitions-are-valid's.
* A return is sum_j gamma^j r_{i+j} over the trajectory, computed as
  Dopamine does (float32 discounts times the rewards, summed by NumPy).
* A state holds the `stack` frames ending at its slot, frames last.
"""

import contextlib
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

__all__ = ['NumpyKernels', 'uniforms_from_words']

# (total, largest value written) from `set_leaves`, or None.
SetResult = Optional[Tuple[float, float]]
# (next_indices, is_terminal, returns) from `trajectories`.
Trajectories = Tuple[np.ndarray, np.ndarray, np.ndarray]
# (source name, at_next, out) of `transition_batch`.
RowGather = Tuple[str, bool, np.ndarray]


def uniforms_from_words(words: bytes) -> np.ndarray:
  """Turns pairs of 32-bit Mersenne Twister words into floats in [0, 1).

  `random.random()` builds each double from 27 bits of one word and 26 of
  the next; given the bytes of `random.getrandbits(64 * count)`
  (little-endian), this returns the float64s of `count` such calls.
  """
  words = np.frombuffer(words, dtype='<u4')
  high = (words[0::2] >> 5).astype(np.float64)
  low = (words[1::2] >> 6).astype(np.float64)
  return (high * 67108864.0 + low) * (1.0 / 9007199254740992.0)


def _halving_sums(rows: np.ndarray) -> np.ndarray:
  """Pairwise sums over the last axis (a power of two long)."""
  while rows.shape[-1] > 1:
    rows = rows[..., 0::2] + rows[..., 1::2]
  return rows[..., 0]


def _halving_sum(values: List[float]) -> float:
  """`_halving_sums` of one row, in Python floats (cheaper for one row)."""
  while len(values) > 1:
    values = [values[j] + values[j + 1] for j in range(0, len(values), 2)]
  return values[0]


def _halving_sum_16(v: List[float]) -> float:
  """`_halving_sum` of 16 floats, written out: a third of the loop's time
  (an add's whole tree update on these kernels)."""
  return ((((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])))
          + (((v[8] + v[9]) + (v[10] + v[11])) +
             ((v[12] + v[13]) + (v[14] + v[15]))))


class NumpyKernels(object):
  """The kernel interface, vectorized over the batch with NumPy.

  Tree arguments: `flat`, the float64 array of all levels, leaves first;
  `offsets`, int64, where each level starts (the last is len(flat));
  `fanout`, children per node (a power of two).

  Attributes:
    name: str, the name `choice.choose` knows these kernels by.
    compiled: bool, whether the loops are compiled.
  """

  name = 'numpy'
  compiled = False

  # ------------------------------------------------------------ sum tree

  def level_sums(self, blocks: np.ndarray) -> np.ndarray:
    """Sums of each row of `blocks` ([rows, fanout]) in the shared order."""
    return _halving_sums(blocks)

  def update_parents(self, flat: np.ndarray, offsets: np.ndarray,
                     fanout: int, leaves: np.ndarray) -> float:
    """Recomputes the ancestors of `leaves` (int64); returns the total."""
    nodes = leaves
    for level in range(len(offsets) - 2):
      children = flat[offsets[level]:offsets[level + 1]].reshape(-1, fanout)
      parents = flat[offsets[level + 1]:offsets[level + 2]]
      nodes = nodes // fanout
      parents[nodes] = _halving_sums(children[nodes])
    return float(_halving_sums(flat[offsets[-2]:offsets[-1]]))

  def update_leaf(self, flat: np.ndarray, offsets: np.ndarray, fanout: int,
                  leaf: int) -> float:
    """`update_parents` of one leaf (an int); returns the total."""
    row_sum = _halving_sum_16 if fanout == 16 else _halving_sum
    for level in range(len(offsets) - 2):
      leaf //= fanout
      start = offsets[level] + leaf * fanout
      flat[offsets[level + 1] + leaf] = row_sum(
          flat[start:start + fanout].tolist())
    return row_sum(flat[offsets[-2]:offsets[-1]].tolist())

  def set_leaves(self, flat: np.ndarray, offsets: np.ndarray, fanout: int,
                 capacity: int, leaves: np.ndarray, values: np.ndarray,
                 smallest: float, largest: float) -> SetResult:
    """Checks, writes and propagates float64 `values` at 1-D `leaves`.

    The last of repeated leaves wins. Returns (total, largest value
    written); None, with nothing written, if a leaf is outside [0,
    capacity) or a value is neither 0 nor in [smallest, largest].
    """
    if ((leaves < 0) | (leaves >= capacity)).any():
      return None
    if not (((values >= smallest) & (values <= largest)) |
            (values == 0.0)).all():
      return None
    flat[leaves] = values
    return (self.update_parents(flat, offsets, fanout,
                                leaves.astype(np.int64, copy=False)),
            max(0.0, float(values.max())))

  def get_leaves(self, leaves: np.ndarray, indices: np.ndarray
                ) -> Optional[np.ndarray]:
    """leaves[indices] (float64), or None if an index is out of range."""
    if len(indices) and (indices.min() < 0 or indices.max() >= len(leaves)):
      return None
    return leaves[indices]

  def descend(self, flat: np.ndarray, offsets: np.ndarray, fanout: int,
              targets: np.ndarray) -> np.ndarray:
    """The leaf (int64) holding each cumulative mass in `targets`."""
    remaining = np.array(targets, dtype=np.float64)
    nodes = np.zeros(len(remaining), dtype=np.int64)
    rows = np.arange(len(remaining))
    for level in range(len(offsets) - 2, -1, -1):
      blocks = flat[offsets[level]:offsets[level + 1]].reshape(-1, fanout)
      children = blocks[nodes]                       # [batch, fanout]
      running = np.cumsum(children, axis=1)
      chosen = (running <= remaining[:, None]).sum(axis=1)
      overflow = chosen == fanout
      if overflow.any():
        positive = children[overflow] > 0.0
        chosen[overflow] = fanout - 1 - np.argmax(positive[:, ::-1], axis=1)
      before = running[rows, chosen - 1]
      remaining -= np.where(chosen > 0, before, 0.0)
      nodes = nodes * fanout + chosen
    return nodes

  def descend_uniforms(self, flat: np.ndarray, offsets: np.ndarray,
                       fanout: int, uniforms: np.ndarray, lower: np.ndarray,
                       width: np.ndarray, scale: float) -> np.ndarray:
    """`descend` to the masses (lower + width * uniforms) * scale."""
    return self.descend(flat, offsets, fanout,
                        (lower + width * uniforms) * scale)

  def descend_draws(self, flat: np.ndarray, offsets: np.ndarray,
                    fanout: int, words: bytes, lower: np.ndarray,
                    width: np.ndarray, scale: float) -> np.ndarray:
    """`descend_uniforms` of `uniforms_from_words(words)`."""
    return self.descend_uniforms(flat, offsets, fanout,
                                 uniforms_from_words(words), lower, width,
                                 scale)

  # ------------------------------------------------------------ sampling

  def valid_mask(self, indices: np.ndarray, capacity: int, add_count: int,
                 horizon: int, stack: int, episode_end: np.ndarray,
                 terminal: np.ndarray) -> np.ndarray:
    """Whether each slot in `indices` (1-D int64, any values) is valid.

    `episode_end` (bool) and `terminal` (nonzero where terminal) are
    [capacity] arrays; `horizon` is n and `stack` the frames per state.
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

  def trajectories(self, indices: np.ndarray, capacity: int,
                   terminal: np.ndarray, rewards: np.ndarray,
                   discounts: np.ndarray) -> Trajectories:
    """The n-step trajectories of valid slots `indices` (1-D int64).

    `discounts` is float32 [n], gamma^j. Returns (next_indices,
    is_terminal, returns): int64 [batch], the slot after each trajectory
    (its next state's); bool [batch], whether it was cut at a terminal;
    [batch, *reward_shape] of the rewards' dtype.
    """
    horizon = len(discounts)
    trajectory = (indices[:, None] + np.arange(horizon)) % capacity
    ends = terminal[trajectory] != 0
    is_terminal = ends.any(axis=1)
    lengths = np.where(is_terminal, np.argmax(ends, axis=1) + 1, horizon)
    next_indices = (indices + lengths) % capacity
    return next_indices, is_terminal, _returns(rewards[trajectory], lengths,
                                               is_terminal, discounts)

  def gather_stacks(self, frames: np.ndarray, windows: np.ndarray,
                    out: np.ndarray) -> np.ndarray:
    """Fills and returns `out` [batch, *frame_shape, stack] (C-contiguous)
    with frames[windows[b]]; windows [batch, stack] are oldest first."""
    for position in range(windows.shape[1]):
      out[..., position] = frames[windows[:, position]]
    return out

  def stacks_ending_at(self, frames: np.ndarray, ends: np.ndarray,
                       stack: int, out: np.ndarray) -> np.ndarray:
    """`gather_stacks` of the `stack` slots ending at each of `ends`,
    wrapping around the end of `frames` (an array, or compressed frames:
    then the slots are read once, each block decoded once)."""
    windows = (ends[:, None] + np.arange(1 - stack, 1)) % len(frames)
    if not isinstance(frames, np.ndarray):
      slots, windows = np.unique(windows, return_inverse=True)
      frames = frames[slots]
      windows = windows.reshape(len(ends), stack)
    return self.gather_stacks(frames, windows, out)

  def transition_batch(self, frames: np.ndarray, stack: int,
                       terminal: np.ndarray, rewards: np.ndarray,
                       discounts: np.ndarray, indices: np.ndarray,
                       states: Optional[np.ndarray],
                       returns: Optional[np.ndarray],
                       is_terminal: Optional[np.ndarray],
                       indices_out: Optional[np.ndarray],
                       sources: Dict[str, np.ndarray],
                       rows: Tuple[RowGather, ...], lock: Any) -> None:
    """Fills every element of a batch of transitions (one call natively).

    The memory's sample in one kernel call: `trajectories`, the elements
    that are rows of an array at a transition's slot or at its next slot,
    then the states ending at both.

    Args:
      frames: the frame storage [capacity, *observation_shape].
      stack: frames per state.
      terminal, rewards, discounts: see `trajectories`.
      indices: int64 array [batch] of valid slots.
      states: None, or an array [2 * batch, *observation_shape, stack] for
        the states ending at `indices`, then at the next indices.
      returns, is_terminal, indices_out: None, or [batch] arrays for the
        n-step returns, whether each was cut, and the indices.
      sources: dict of the arrays `rows` name.

      rows: tuple of (name, at_next, out): fills out[b] with
        ``sources[name][indices[b]]``, or with the row at the next slot of
        transition b if at_next, cast to out's dtype.
      lock: None, or a lock held while the rows are copied (the sum
        tree's, for the priorities), not while the frames are.
    """
    next_indices, cut, sums = self.trajectories(indices, len(frames),
                                                terminal, rewards, discounts)
    for out, value in ((returns, sums), (is_terminal, cut),
                       (indices_out, indices)):
      if out is not None:
        out[...] = value
    with contextlib.nullcontext() if lock is None else lock:
      for name, at_next, out in rows:
        out[...] = sources[name][next_indices if at_next else indices]
    if states is not None:
      self.stacks_ending_at(frames, np.concatenate([indices, next_indices]),
                            stack, states)


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
