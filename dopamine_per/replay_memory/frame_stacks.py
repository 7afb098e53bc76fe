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
  32-bit word from the 4 frames' bytes, which vectorizes.
"""

from typing import Optional

import numpy as np

from dopamine_per.replay_memory import sum_tree_kernels

__all__ = ['gather_stacks']


# TensorFlow adopts a returned array's memory without copying it (from
# tf.numpy_function, i.e. the sampling op) only if it is 64-byte aligned;
# NumPy aligns to 16. For an Atari batch that saves a 1.8 MB copy.
_ALIGNMENT = 64


def _aligned_empty(shape, dtype) -> np.ndarray:
  """np.empty whose data starts on a _ALIGNMENT-byte boundary."""
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape)) * dtype.itemsize
  raw = np.empty(nbytes + _ALIGNMENT, dtype=np.uint8)
  offset = -raw.ctypes.data % _ALIGNMENT
  return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def _gather_numpy(frames: np.ndarray, windows: np.ndarray,
                  out: np.ndarray) -> None:
  for position in range(windows.shape[1]):
    out[..., position] = frames[windows[:, position]]


def _build_numba():
  """Compiles the Numba gathers; returns them, or (None, None)."""
  if sum_tree_kernels.NumbaKernels is None:
    return None, None
  import numba  # pylint: disable=g-import-not-at-top

  jit = numba.njit(cache=True, nogil=True)

  @jit
  def gather_generic(frames, windows, out):
    # frames: [capacity, pixels]; out: [batch, pixels * stack].
    stack = windows.shape[1]
    for b in range(windows.shape[0]):
      for position in range(stack):
        source = frames[windows[b, position]]
        for pixel in range(source.shape[0]):
          out[b, pixel * stack + position] = source[pixel]

  @jit
  def gather_4x8(frames, windows, out):
    # frames: uint8 [capacity, pixels]; out: uint32 [batch, pixels]; byte k
    # of each (little-endian) word is frame k's pixel.
    for b in range(windows.shape[0]):
      f0 = frames[windows[b, 0]]
      f1 = frames[windows[b, 1]]
      f2 = frames[windows[b, 2]]
      f3 = frames[windows[b, 3]]
      for pixel in range(f0.shape[0]):
        out[b, pixel] = (np.uint32(f0[pixel]) |
                         (np.uint32(f1[pixel]) << 8) |
                         (np.uint32(f2[pixel]) << 16) |
                         (np.uint32(f3[pixel]) << 24))

  return gather_generic, gather_4x8


_GATHER_GENERIC, _GATHER_4X8 = _build_numba()


def gather_stacks(frames: np.ndarray, windows: np.ndarray,
                  kernels: Optional[str] = None) -> np.ndarray:
  """Returns the states made of `frames[windows[b]]`, frames last.

  Args:
    frames: array [capacity, *observation_shape], C-contiguous.
    windows: int64 array [batch, stack], the slots of each state's frames,
      oldest first.
    kernels: 'numpy', 'numba' or None/'auto', as for the sum tree (see
      `sum_tree_kernels.get_kernels`).

  Returns:
    C-contiguous array [batch, *observation_shape, stack] of frames.dtype,
    64-byte aligned so that TensorFlow can take it without a copy.
  """
  batch, stack = windows.shape
  out = _aligned_empty((batch,) + frames.shape[1:] + (stack,), frames.dtype)
  use_numba = (sum_tree_kernels.get_kernels(kernels) is not
               sum_tree_kernels.NumpyKernels and frames.flags.c_contiguous
               and frames.dtype.kind in 'uifb')
  if not use_numba or batch == 0:
    _gather_numpy(frames, windows, out)
    return out
  flat_frames = frames.reshape(len(frames), -1)
  if stack == 4 and frames.dtype.itemsize == 1 and np.little_endian:
    _GATHER_4X8(flat_frames.view(np.uint8), windows,
                out.reshape(batch, -1).view(np.uint32))
  else:
    _GATHER_GENERIC(flat_frames, windows, out.reshape(batch, -1))
  return out
