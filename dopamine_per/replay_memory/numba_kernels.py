# coding=utf-8
"""The kernel interface compiled with Numba: `NumbaKernels`.

`NumbaKernels` runs every loop of `numpy_kernels.NumpyKernels` (the
interface and its reference) as one compiled call, with the same results,
and falls back to NumPy's for inputs its loops do not cover (returns
longer than 8 steps, non-scalar rewards, frames that are not a plain
C-contiguous array). The compiled functions live at module level so that
Numba's on-disk cache (`cache=True`) finds them again in every new process
instead of compiling them anew (it cannot for functions defined inside
others). `kernels.choose` imports this module where Numba is installed.
"""

from absl import logging
from llvmlite import ir
import numba
from numba.core import cgutils
from numba.extending import intrinsic
import numpy as np

from dopamine_per.replay_memory import numpy_kernels

jit = numba.njit(cache=True, nogil=True)
# Inlined where called, so that a constant fanout unrolls their loops.
inline_jit = numba.njit(cache=True, nogil=True, inline='always')


@intrinsic
def _prefetch(typingctx, array, index):
  """`prefetch(array, index)`: starts loading array[index]'s cache line.

  LLVM's prefetch intrinsic (a read, to keep in all cache levels): a
  descent requests the blocks of all its targets before it reads any.
  """
  del typingctx

  def codegen(context, builder, signature, args):
    data = context.make_array(signature.args[0])(context, builder, args[0])
    pointer = cgutils.get_item_pointer(context, builder, signature.args[0],
                                       data, [args[1]])
    byte_pointer = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    function = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]),
        'llvm.prefetch.p0i8')
    builder.call(function, [builder.bitcast(pointer, byte_pointer), i32(0),
                            i32(3), i32(1)])
    return context.get_dummy_value()

  return numba.types.void(array, index), codegen


@inline_jit
def _no_prefetch(array, index):  # pylint: disable=unused-argument
  return None


@numba.njit(cache=True)
def _probe_prefetch(array):
  _prefetch(array, 0)


def _choose_prefetch(probe=_probe_prefetch):
  """The prefetch intrinsic if this Numba/LLVM compiles it, else a no-op.

  Either way the loops give the same results; only the overlap is lost.
  """
  try:
    probe(np.zeros(1))
    return _prefetch
  except Exception:  # pylint: disable=broad-except
    logging.info('No prefetch in the compiled replay loops.')
    return _no_prefetch


prefetch = _choose_prefetch()


# ------------------------------------------------------------- sum tree

@jit
def halving_sum(flat, start, fanout, scratch):
  for j in range(fanout // 2):
    scratch[j] = flat[start + 2 * j] + flat[start + 2 * j + 1]
  width = fanout // 2
  while width > 1:
    width //= 2
    for j in range(width):
      scratch[j] = scratch[2 * j] + scratch[2 * j + 1]
  return scratch[0]

@jit
def halving_sum_16(flat, start):
  # halving_sum for 16 children, unrolled (same order, in registers).
  a = (flat[start] + flat[start + 1]) + (flat[start + 2] + flat[start + 3])
  b = ((flat[start + 4] + flat[start + 5]) +
       (flat[start + 6] + flat[start + 7]))
  c = ((flat[start + 8] + flat[start + 9]) +
       (flat[start + 10] + flat[start + 11]))
  d = ((flat[start + 12] + flat[start + 13]) +
       (flat[start + 14] + flat[start + 15]))
  return (a + b) + (c + d)

@jit
def update_parents_16(flat, offsets, leaves):
  top = len(offsets) - 2
  for b in range(len(leaves)):
    node = leaves[b]
    for level in range(top):
      node //= 16
      flat[offsets[level + 1] + node] = halving_sum_16(
          flat, offsets[level] + node * 16)
  return halving_sum_16(flat, offsets[top])

@jit
def update_one_leaf(flat, offsets, fanout, leaf):
  return update_parents(flat, offsets, fanout,
                        np.full(1, leaf, dtype=np.int64))

@jit
def update_parents(flat, offsets, fanout, leaves):
  if fanout == 16:
    return update_parents_16(flat, offsets, leaves)
  scratch = np.empty(max(fanout // 2, 1))
  top = len(offsets) - 2
  for b in range(len(leaves)):
    node = leaves[b]
    for level in range(top):
      node //= fanout
      flat[offsets[level + 1] + node] = halving_sum(
          flat, offsets[level] + node * fanout, fanout, scratch)
  return halving_sum(flat, offsets[top], fanout, scratch)

@inline_jit
def choose_child(flat, start, fanout, remaining):
  # Branch-free: the running sums never decrease, so the children whose
  # running sum is <= remaining are a prefix; count it and keep its last
  # sum. Without branches the scans of different targets overlap.
  running = 0.0
  before = 0.0
  chosen = 0
  for j in range(fanout):
    running += flat[start + j]
    below = running <= remaining
    chosen += below
    before = running if below else before
  if chosen == fanout:
    chosen = fanout - 1
    while flat[start + chosen] <= 0.0 and chosen > 0:
      chosen -= 1
    before = 0.0
    for j in range(chosen):
      before += flat[start + j]
  return chosen, before

@inline_jit
def descend_levels(flat, offsets, fanout, targets):
  # Level by level, so that the loads of different targets are independent
  # and overlap: a third faster than target by target on large trees.
  count = len(targets)
  nodes = np.zeros(count, dtype=np.int64)
  remaining = targets.copy()
  for level in range(len(offsets) - 2, -1, -1):
    if level < len(offsets) - 3:  # Below the root's row: request them all.
      for b in range(count):
        for j in range(0, fanout, 8):  # 8 floats: a 64-byte line.
          prefetch(flat, offsets[level] + nodes[b] * fanout + j)
    for b in range(count):
      chosen, before = choose_child(
          flat, offsets[level] + nodes[b] * fanout, fanout, remaining[b])
      if chosen > 0:
        remaining[b] -= before
      nodes[b] = nodes[b] * fanout + chosen
  return nodes

@jit
def descend(flat, offsets, fanout, targets):
  if fanout == 16:  # A constant: the child scan is unrolled.
    return descend_levels(flat, offsets, 16, targets)
  return descend_levels(flat, offsets, fanout, targets)

@inline_jit
def random_word(data, index):
  # The little-endian 32-bit word `index` of a bytes object.
  start = 4 * index
  return (np.uint32(data[start]) | (np.uint32(data[start + 1]) << 8) |
          (np.uint32(data[start + 2]) << 16) |
          (np.uint32(data[start + 3]) << 24))

@jit
def uniforms_and_descend(flat, offsets, fanout, uniforms, lower, width,
                         scale):
  targets = np.empty(len(lower))
  for i in range(len(lower)):
    targets[i] = (lower[i] + width[i] * uniforms[i]) * scale
  return descend(flat, offsets, fanout, targets)

@jit
def draws_and_descend(flat, offsets, fanout, words, lower, width, scale):
  uniforms = np.empty(len(lower))
  for i in range(len(lower)):
    high = np.float64(random_word(words, 2 * i) >> 5)
    low = np.float64(random_word(words, 2 * i + 1) >> 6)
    uniforms[i] = (high * 67108864.0 + low) * (1.0 / 9007199254740992.0)
  return uniforms_and_descend(flat, offsets, fanout, uniforms, lower, width,
                              scale)

@jit
def set_leaves(flat, offsets, fanout, capacity, leaves, values, smallest,
               largest):
  # Writes only if every leaf is in range and every value is 0 or in
  # [smallest, largest] (NaN fails both).
  for i in range(len(leaves)):
    if leaves[i] < 0 or leaves[i] >= capacity:
      return False, 0.0, 0.0
    value = values[i]
    if not (value >= smallest and value <= largest) and value != 0.0:
      return False, 0.0, 0.0
  largest = 0.0
  for i in range(len(leaves)):
    flat[leaves[i]] = values[i]
    largest = max(largest, values[i])
  return True, update_parents(flat, offsets, fanout, leaves), largest

@jit
def get_leaves(leaves, indices):
  out = np.empty(len(indices))
  for i in range(len(indices)):
    if indices[i] < 0 or indices[i] >= len(leaves):
      return False, out
    out[i] = leaves[indices[i]]
  return True, out


# ---------------------------------------------------------- frame stacks

@jit
def gather_generic(frames, windows, out):
  # frames: [capacity, pixels]; out: [batch, pixels * stack].
  stack = windows.shape[1]
  for b in range(windows.shape[0]):
    for position in range(stack):
      source = frames[windows[b, position]]
      for pixel in range(source.shape[0]):
        out[b, pixel * stack + position] = source[pixel]

@inline_jit
def pack_word(f0, f1, f2, f3, pixel):
  # Byte k of the (little-endian) word is frame k's pixel.
  return (np.uint32(f0[pixel]) | (np.uint32(f1[pixel]) << 8) |
          (np.uint32(f2[pixel]) << 16) | (np.uint32(f3[pixel]) << 24))

@jit
def gather_4x8(frames, windows, out):
  # frames: uint8 [capacity, pixels]; out: uint32 [rows, pixels]. Rows b
  # and b + rows // 2 are built in one pass: when they are a state and
  # its next state, their shared frames are read from memory once.
  rows = windows.shape[0]
  half = rows // 2
  for pair in range(half + rows % 2):
    # An odd last row pairs with itself.
    b, c = (pair, pair + half) if pair < half else (rows - 1, rows - 1)
    a0, a1 = frames[windows[b, 0]], frames[windows[b, 1]]
    a2, a3 = frames[windows[b, 2]], frames[windows[b, 3]]
    b0, b1 = frames[windows[c, 0]], frames[windows[c, 1]]
    b2, b3 = frames[windows[c, 2]], frames[windows[c, 3]]
    for pixel in range(a0.shape[0]):
      out[b, pixel] = pack_word(a0, a1, a2, a3, pixel)
      out[c, pixel] = pack_word(b0, b1, b2, b3, pixel)


@jit
def gather_4x8_ending_at(frames, ends, out):
  # gather_4x8 of the 4 slots ending at each of `ends` (modulo capacity).
  capacity = frames.shape[0]
  windows = np.empty((len(ends), 4), dtype=np.int64)
  for row in range(len(ends)):
    for k in range(4):
      windows[row, k] = (ends[row] - 3 + k) % capacity
  gather_4x8(frames, windows, out)


# ----------------------------------------------------------- transitions

@jit
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

@jit
def trajectories_loop(indices, capacity, terminal, rewards, discounts):
  # rewards: float32 [capacity]; the products and the left-to-right sum
  # in float32, as NumPy computes a short sum.
  count = len(indices)
  next_indices = np.empty(count, dtype=np.int64)
  is_terminal = np.zeros(count, dtype=np.bool_)
  returns = np.empty(count, dtype=np.float32)
  for b in range(count):
    slot = indices[b]
    total = np.float32(0.0)
    length = len(discounts)
    for k in range(len(discounts)):
      step = (slot + k) % capacity
      term = discounts[k] * rewards[step]
      total = term if k == 0 else total + term
      if terminal[step] != 0:
        is_terminal[b] = True
        length = k + 1
        break
    next_indices[b] = (slot + length) % capacity
    returns[b] = total
  return next_indices, is_terminal, returns


# ---------------------------------------------------------------- kernels

# NumPy sums fewer than this many numbers one after the other (more are
# summed pairwise, which `trajectories_loop` does not reproduce).
_SEQUENTIAL_SUM_LIMIT = 8


def _plain(frames: np.ndarray) -> bool:
  """Whether the gathers compile for these frames (plain, C-contiguous).

  Numba has no float16: such frames take NumPy's gathers.
  """
  return (frames.flags.c_contiguous and frames.dtype.kind in 'uifb' and
          frames.dtype != np.float16)


def _packs_4x8(frames: np.ndarray, stack: int) -> bool:
  """Whether a state's pixel is 4 bytes, one per frame (Atari)."""
  return (stack == 4 and frames.dtype.itemsize == 1 and np.little_endian and
          _plain(frames))


def _compiled_returns(terminal: np.ndarray, rewards: np.ndarray,
                      discounts: np.ndarray) -> bool:
  """Whether `trajectories_loop` gives NumPy's returns for these arrays."""
  return (terminal.ndim == 1 and rewards.ndim == 1 and
          rewards.dtype == np.float32 and discounts.dtype == np.float32 and
          len(discounts) < _SEQUENTIAL_SUM_LIMIT)


def _byte_rows(frames: np.ndarray) -> np.ndarray:
  """The frames as rows of bytes, one per slot."""
  return frames.reshape(len(frames), -1).view(np.uint8)


class NumbaKernels(numpy_kernels.NumpyKernels):
  """`NumpyKernels`' loops, compiled (see the module docstring)."""

  name = 'numba'
  compiled = True

  def update_parents(self, flat, offsets, fanout, leaves):
    return float(update_parents(flat, offsets, fanout,
                                leaves.astype(np.int64, copy=False)))

  def update_leaf(self, flat, offsets, fanout, leaf):
    return update_one_leaf(flat, offsets, fanout, leaf)

  def set_leaves(self, flat, offsets, fanout, capacity, leaves, values,
                 smallest, largest):
    ok, total, top = set_leaves(flat, offsets, fanout, capacity, leaves,
                                values, smallest, largest)
    return (total, top) if ok else None

  def get_leaves(self, leaves, indices):
    ok, values = get_leaves(leaves, indices)
    return values if ok else None

  def descend(self, flat, offsets, fanout, targets):
    return descend(flat, offsets, fanout,
                   np.ascontiguousarray(targets, dtype=np.float64))

  def descend_uniforms(self, flat, offsets, fanout, uniforms, lower, width,
                       scale):
    return uniforms_and_descend(flat, offsets, fanout, uniforms, lower,
                                width, scale)

  def descend_draws(self, flat, offsets, fanout, words, lower, width, scale):
    return draws_and_descend(flat, offsets, fanout, words, lower, width,
                             scale)

  def valid_mask(self, indices, capacity, add_count, horizon, stack,
                 episode_end, terminal):
    if terminal.ndim != 1:
      return super().valid_mask(indices, capacity, add_count, horizon, stack,
                                episode_end, terminal)
    return valid_mask_loop(indices, capacity, add_count, horizon, stack,
                           episode_end, terminal)

  def trajectories(self, indices, capacity, terminal, rewards, discounts):
    if not _compiled_returns(terminal, rewards, discounts):
      return super().trajectories(indices, capacity, terminal, rewards,
                                  discounts)
    return trajectories_loop(indices, capacity, terminal, rewards, discounts)

  def gather_stacks(self, frames, windows, out):
    batch = len(windows)
    if not (batch and _plain(frames)):
      return super().gather_stacks(frames, windows, out)
    rows = frames.reshape(len(frames), -1)
    if _packs_4x8(frames, windows.shape[1]):
      gather_4x8(rows.view(np.uint8), windows,
                 out.reshape(batch, -1).view(np.uint32))
    else:
      gather_generic(rows, windows, out.reshape(batch, -1))
    return out

  def stacks_ending_at(self, frames, ends, stack, out):
    if not (len(ends) and _packs_4x8(frames, stack)):
      return super().stacks_ending_at(frames, ends, stack, out)
    gather_4x8_ending_at(_byte_rows(frames), ends,
                         out.reshape(len(ends), -1).view(np.uint32))
    return out
