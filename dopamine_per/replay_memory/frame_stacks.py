# coding=utf-8
"""Gathering stacked states from a circular buffer of single frames.

The replay memories store each observation once and build a state, the last
`stack_size` observations with the frames on the last axis (Dopamine's
layout: [batch, height, width, stack]), at sample time. That copy is the
floor of an Atari sample (two stacks of 4 x 84 x 84 bytes per transition)
and its layout is awkward: consecutive output bytes come from different
frames.

`gather_stacks` (given each state's slots) and `gather_stacks_ending_at`
(given each state's last slot) do it in one of three ways, all giving the
same bytes:

* NumPy: one gather per frame position, written into place (the output's
  last axis is strided, so this runs at a fraction of memory speed);
* Numba (the default), generic: the frames of each state read once,
  written frame by frame;
* Numba, for 4 frames of 1 byte (Atari): each output pixel is built as one
  32-bit word from the 4 frames' bytes, which vectorizes; rows b and
  b + batch // 2 are built together, so a batch of states followed by their
  next states reads the frames they share once.

The compiled loops are in `numba_loops`. Outputs are 64-byte aligned (so
TensorFlow adopts them without a copy) and may come from a `BufferPool`,
which reuses an output's memory once nothing refers to it.
"""

import math
import sys
import threading
from typing import Any, List, Optional, Tuple

import numpy as np

from dopamine_per.replay_memory import kernels as kernels_lib

__all__ = ['BufferPool', 'DEFAULT_POOL_BYTES', 'gather_stacks',
           'gather_stacks_ending_at', 'compiled_4x8', 'empty_output']


# TensorFlow adopts a returned array's memory without copying it (from
# tf.numpy_function, i.e. the sampling op) only if it is 64-byte aligned;
# NumPy aligns to 16. For an Atari batch that saves a 1.8 MB copy.
_ALIGNMENT = 64

# What a BufferPool keeps at most, by default: 3 Atari batches of 2 * 512
# states of 84 x 84 x 4 bytes (29 MB each) fit. A larger output is handed
# out but not kept: a sweep over many large batch sizes held 750 MB before
# (issue 12).
DEFAULT_POOL_BYTES = 256 << 20


class BufferPool(object):
  """Reuses the memory of earlier outputs once nothing refers to them.

  Allocating a fresh 1.8 MB Atari batch cost ~20 us per sample here (in
  the allocator and the kernel). The pool keeps up to `size` buffers, of at
  most `max_bytes` together, and hands one out again only when no array (the
  output, a view of it, or a TensorFlow tensor that adopted it) still refers
  to it: a view counts as a reference to the buffer that owns the memory.
  To make room it drops a buffer nobody uses (of an earlier batch size)
  first, else the newest, so that a caller holding more than `size` outputs
  still gets the older ones back.
  """

  def __init__(self, size: int = 3, max_bytes: int = DEFAULT_POOL_BYTES):
    self._size = size
    self._max_bytes = max_bytes
    # [raw uint8 buffer, offset of its first aligned byte]
    self._buffers: List[List[Any]] = []
    self._held_bytes = 0
    self._lock = threading.Lock()

  @property
  def held_bytes(self) -> int:
    """The bytes of the buffers the pool keeps (in use or not)."""
    return self._held_bytes

  def empty(self, shape: Tuple[int, ...], dtype) -> np.ndarray:
    """Returns an uninitialized 64-byte aligned C-contiguous array."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    with self._lock:
      raw, offset = self._take(nbytes + _ALIGNMENT)
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)

  def _take(self, size: int) -> List[Any]:
    for entry in self._buffers:
      # References to a free buffer: the entry's and getrefcount's argument.
      if entry[0].nbytes == size and sys.getrefcount(entry[0]) == 2:
        return entry
    raw = np.empty(size, dtype=np.uint8)
    entry = [raw, -raw.ctypes.data % _ALIGNMENT]
    if self._size > 0 and size <= self._max_bytes:
      while self._buffers and (len(self._buffers) >= self._size or
                               self._held_bytes + size > self._max_bytes):
        self._held_bytes -= self._buffers.pop(self._victim())[0].nbytes
      self._buffers.append(entry)
      self._held_bytes += size
    return entry

  def _victim(self) -> int:
    """The position of the buffer to drop: a free one, else the newest."""
    for position, entry in enumerate(self._buffers):
      if sys.getrefcount(entry[0]) == 2:  # The entry's and the argument.
        return position
    return len(self._buffers) - 1


# Fresh aligned memory for every output: a pool that keeps nothing.
_UNPOOLED = BufferPool(size=0)


def gather_stacks(frames: np.ndarray, windows: np.ndarray,
                  kernels: kernels_lib.KernelsLike = None,
                  pool: Optional[BufferPool] = None) -> np.ndarray:
  """Returns the states made of `frames[windows[b]]`, frames last.

  Args:
    frames: array [capacity, *observation_shape], C-contiguous.
    windows: int64 array [batch, stack], the slots of each state's frames,
      oldest first.
    kernels: a `kernels.Kernels`, a name or None (see `kernels.choose`).
    pool: a BufferPool to take the output's memory from, or None for a new
      allocation.

  Returns:
    C-contiguous array [batch, *observation_shape, stack] of frames.dtype,
    64-byte aligned so that TensorFlow can take it without a copy.
  """
  batch, stack = windows.shape
  out = empty_output((batch,) + frames.shape[1:] + (stack,), frames.dtype,
                     pool)
  if not _compiled(frames, kernels) or batch == 0:
    for position in range(stack):
      out[..., position] = frames[windows[:, position]]
    return out
  loops = kernels_lib.numba_loops
  flat_frames = frames.reshape(len(frames), -1)
  if _packs_4x8(frames, stack):
    loops.gather_4x8(flat_frames.view(np.uint8), windows,
                     out.reshape(batch, -1).view(np.uint32))
  else:
    loops.gather_generic(flat_frames, windows, out.reshape(batch, -1))
  return out


def gather_stacks_ending_at(frames: np.ndarray, ends: np.ndarray, stack: int,
                            kernels: kernels_lib.KernelsLike = None,
                            pool: Optional[BufferPool] = None) -> np.ndarray:
  """`gather_stacks` of the `stack` slots ending at each of `ends`.

  The slots wrap around `len(frames)`: the state ending at slot e holds
  frames e - stack + 1, ..., e (modulo the capacity).

  Args:
    frames: array [capacity, *observation_shape], C-contiguous.
    ends: 1-D int64 array of slots, the last frame of each state.
    stack: int, frames per state.
    kernels: as for `gather_stacks`.
    pool: as for `gather_stacks`.

  Returns:
    As `gather_stacks`.
  """
  if len(ends) and compiled_4x8(frames, stack, kernels):
    out = empty_output((len(ends),) + frames.shape[1:] + (stack,),
                       frames.dtype, pool)
    kernels_lib.numba_loops.gather_4x8_ending_at(
        frames.reshape(len(frames), -1).view(np.uint8), ends,
        out.reshape(len(ends), -1).view(np.uint32))
    return out
  windows = (ends[:, None] + np.arange(1 - stack, 1)) % len(frames)
  return gather_stacks(frames, windows, kernels=kernels, pool=pool)


def empty_output(shape: Tuple[int, ...], dtype,
                 pool: Optional[BufferPool] = None) -> np.ndarray:
  """An aligned output array, from `pool` if given (see BufferPool)."""
  return (pool or _UNPOOLED).empty(shape, dtype)


def compiled_4x8(frames: np.ndarray, stack: int,
                 kernels: kernels_lib.KernelsLike = None) -> bool:
  """Whether `numba_loops.gather_4x8*` gathers these frames' states.

  Args:
    frames: the frame storage.
    stack: int, frames per state.
    kernels: as for `gather_stacks`.
  """
  return _packs_4x8(frames, stack) and _compiled(frames, kernels)


def _compiled(frames: np.ndarray, kernels: kernels_lib.KernelsLike) -> bool:
  """Whether Numba's gathers apply (chosen, and a plain C-contiguous array)."""
  return (kernels_lib.choose(kernels).compiled and frames.flags.c_contiguous
          and frames.dtype.kind in 'uifb')


def _packs_4x8(frames: np.ndarray, stack: int) -> bool:
  """Whether a state's pixel is 4 bytes, one per frame (Atari)."""
  return stack == 4 and frames.dtype.itemsize == 1 and np.little_endian
