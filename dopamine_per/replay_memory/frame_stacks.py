# coding=utf-8
"""Gathering stacked states from a circular buffer of single frames.

The replay memories store each observation once and build a state, the last
`stack_size` observations with the frames on the last axis (Dopamine's
layout: [batch, height, width, stack]), at sample time. That copy is the
floor of an Atari sample (two stacks of 4 x 84 x 84 bytes per transition)
and its layout is awkward: consecutive output bytes come from different
frames.

`gather_stacks` does it in one of three ways, all giving the same bytes:

* NumPy: one gather per frame position, written into place (the output's
  last axis is strided, so this runs at a fraction of memory speed);
* Numba (the `fast` extra), generic: the frames of each state read once,
  written frame by frame;
* Numba, for 4 frames of 1 byte (Atari): each output pixel is built as one
  32-bit word from the 4 frames' bytes, which vectorizes; rows b and
  b + batch // 2 are built together, so a batch of states followed by their
  next states reads the frames they share once.
"""

import math
import sys
import threading
from typing import List, Optional, Tuple

import numpy as np

from dopamine_per.replay_memory import sum_tree_kernels

__all__ = ['BufferPool', 'gather_stacks']


# TensorFlow adopts a returned array's memory without copying it (from
# tf.numpy_function, i.e. the sampling op) only if it is 64-byte aligned;
# NumPy aligns to 16. For an Atari batch that saves a 1.8 MB copy.
_ALIGNMENT = 64


def _aligned_empty(shape, dtype) -> np.ndarray:
  """np.empty whose data starts on a _ALIGNMENT-byte boundary."""
  nbytes = math.prod(shape) * np.dtype(dtype).itemsize
  return _aligned_view(np.empty(nbytes + _ALIGNMENT, dtype=np.uint8), shape,
                       dtype)


class BufferPool(object):
  """Reuses the memory of earlier outputs once nothing refers to them.

  Allocating a fresh 1.8 MB Atari batch cost ~20 us per sample here (in
  the allocator and the kernel). The pool keeps up to `size` buffers and
  hands one out again only when no array (the output, a view of it, or a
  TensorFlow tensor that adopted it) still refers to it: a view counts as a
  reference to the buffer that owns the memory.
  """

  def __init__(self, size: int = 3):
    self._size = size
    self._buffers: List[np.ndarray] = []
    self._lock = threading.Lock()

  def empty(self, shape: Tuple[int, ...], dtype) -> np.ndarray:
    """Returns an uninitialized 64-byte aligned C-contiguous array."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize + _ALIGNMENT
    with self._lock:
      raw = self._take(nbytes)
    return _aligned_view(raw, shape, dtype)

  def _take(self, nbytes: int) -> np.ndarray:
    for index in range(len(self._buffers)):
      # References: the list's and getrefcount's argument.
      if (self._buffers[index].nbytes == nbytes and
          sys.getrefcount(self._buffers[index]) == 2):
        return self._buffers[index]
    raw = np.empty(nbytes, dtype=np.uint8)
    if len(self._buffers) < self._size:
      self._buffers.append(raw)
    elif self._buffers:
      self._buffers[-1] = raw  # All in use, or the batch size changed.
    return raw


def _aligned_view(raw: np.ndarray, shape, dtype) -> np.ndarray:
  """The _ALIGNMENT-aligned array of `shape` inside the bytes of `raw`."""
  dtype = np.dtype(dtype)
  nbytes = math.prod(shape) * dtype.itemsize
  offset = -raw.ctypes.data % _ALIGNMENT
  return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def _gather_numpy(frames: np.ndarray, windows: np.ndarray,
                  out: np.ndarray) -> None:
  for position in range(windows.shape[1]):
    out[..., position] = frames[windows[:, position]]


def gather_stacks(frames: np.ndarray, windows: np.ndarray,
                  kernels: Optional[str] = None,
                  pool: Optional[BufferPool] = None) -> np.ndarray:
  """Returns the states made of `frames[windows[b]]`, frames last.

  Args:
    frames: array [capacity, *observation_shape], C-contiguous.
    windows: int64 array [batch, stack], the slots of each state's frames,
      oldest first.
    kernels: 'numpy', 'numba' or None/'auto', as for the sum tree (see
      `sum_tree_kernels.get_kernels`).
    pool: a BufferPool to take the output's memory from, or None for a new
      allocation.

  Returns:
    C-contiguous array [batch, *observation_shape, stack] of frames.dtype,
    64-byte aligned so that TensorFlow can take it without a copy.
  """
  batch, stack = windows.shape
  shape = (batch,) + frames.shape[1:] + (stack,)
  out = (pool.empty(shape, frames.dtype) if pool is not None else
         _aligned_empty(shape, frames.dtype))
  use_numba = (sum_tree_kernels.get_kernels(kernels) is not
               sum_tree_kernels.NumpyKernels and frames.flags.c_contiguous
               and frames.dtype.kind in 'uifb')
  if not use_numba or batch == 0:
    _gather_numpy(frames, windows, out)
    return out
  loops = sum_tree_kernels.numba_loops
  flat_frames = frames.reshape(len(frames), -1)
  if stack == 4 and frames.dtype.itemsize == 1 and np.little_endian:
    loops.gather_4x8(flat_frames.view(np.uint8), windows,
                     out.reshape(batch, -1).view(np.uint32))
  else:
    loops.gather_generic(flat_frames, windows, out.reshape(batch, -1))
  return out
