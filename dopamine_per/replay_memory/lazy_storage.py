# coding=utf-8
"""Zeroed storage arrays that cost nothing until written, backed in chunks.

A million-slot Atari memory holds about 7 GB of frames. Allocated as
anonymous private mappings, its arrays take no memory until written, so the
memory is constructed in milliseconds; as the cursor advances, `populate`
backs the next chunk of slots with one madvise call instead of one page
fault per page (see `populate`). NumPy and the standard library only.
What differs from Dopamine's storage: docs/compat.md#lazy_storage.
"""

import mmap
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

__all__ = ['allocate', 'populate', 'zeros']

# Arrays of at least this many bytes are mapped, and backed _POPULATE_BYTES
# at a time ahead of the cursor (see `populate`).
_LAZY_MIN_BYTES = 64 << 20
_POPULATE_BYTES = 8 << 20
_MADV_POPULATE_WRITE = getattr(mmap, 'MADV_POPULATE_WRITE', 23)

# (mapping, bytes per slot) of one mapped array.
Mapping = Tuple[mmap.mmap, int]


def zeros(shape: Tuple[int, ...], dtype: Any) -> Tuple[np.ndarray, Any]:
  """Returns a zeroed array and, for a large one, the mapping behind it.

  A large array lives in an anonymous private mapping: nothing is resident
  until written (as with np.zeros), and `populate` can back chunks of it
  ahead of use. Small arrays, object arrays and systems without anonymous
  mappings get plain `np.zeros`.

  Args:
    shape: tuple of int.
    dtype: the array's dtype.

  Returns:
    (np.ndarray, mmap.mmap or None).
  """
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape)) * dtype.itemsize
  if (nbytes < _LAZY_MIN_BYTES or dtype.hasobject or
      not hasattr(mmap, 'MAP_ANONYMOUS')):
    return np.zeros(shape, dtype=dtype), None
  mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
  return np.frombuffer(mapping, dtype=dtype).reshape(shape), mapping


def allocate(elements: Sequence[Any], capacity: int
            ) -> Tuple[Dict[str, np.ndarray], List[Mapping]]:
  """Allocates one zeroed array of `capacity` slots per element.

  Args:
    elements: sequence of ReplayElement (name, per-slot shape, dtype).
    capacity: int, the number of slots.

  Returns:
    ({name: array}, [(mapping, bytes per slot)] of the mapped arrays, for
    `populate`).

  Raises:
    ValueError: If two elements have the same name.
  """
  names = [element.name for element in elements]
  duplicates = sorted({name for name in names if names.count(name) > 1})
  if duplicates:
    raise ValueError('Duplicate storage element names: {}'.format(
        duplicates))
  store = {}
  mappings = []
  for element in elements:
    array, mapping = zeros((capacity,) + tuple(element.shape), element.type)
    store[element.name] = array
    if mapping is not None:
      mappings.append((mapping, array.strides[0]))
  return store, mappings


def populate(mappings: List[Mapping], start: int, capacity: int) -> int:
  """Backs the slots from `start` on of the mapped arrays with memory.

  The first write to a fresh page faults, and on virtual machines a fault
  can cost several microseconds: an Atari frame spans two pages.
  MADV_POPULATE_WRITE (Linux 5.14+) backs a whole chunk of about
  _POPULATE_BYTES per array at once, about ten times cheaper per page.
  Where it is not supported, `mappings` is emptied and the pages fault in
  as usual.

  Args:
    mappings: list of (mapping, bytes per slot), from `allocate`; emptied
      in place if madvise fails.
    start: int, the first slot to back.
    capacity: int, the number of slots.

  Returns:
    int, the slot up to which the arrays are now backed (exclusive).
  """
  end = min(capacity, start + max(1, _POPULATE_BYTES // max(
      stride for _, stride in mappings)))
  try:
    for mapping, stride in mappings:
      first = start * stride // mmap.PAGESIZE * mmap.PAGESIZE
      stop = min(len(mapping), -(-end * stride // mmap.PAGESIZE) *
                 mmap.PAGESIZE)
      mapping.madvise(_MADV_POPULATE_WRITE, first, stop - first)
  except (OSError, ValueError):
    mappings.clear()
  return end
