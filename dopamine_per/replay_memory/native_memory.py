# coding=utf-8
"""A replay memory shared with the native TensorFlow ops.

`NativeMemory` registers a memory's arrays with the native core library
(dopamine_per/native): its storage's arrays, add count and episode ends,
and the sum tree's flat levels and [total, max_recorded_priority]. The ops
(`native_ops`) read and write those very arrays: adds from Python are what
the next graph sample sees, priorities set in the graph are what
`get_priority` returns. Both sides take one lock, a mutex of the core
library: `NativeLock` is the Python side of it (re-entrant per thread,
waiting without the GIL); the ops take it without the GIL at all. The
registry outlives sessions and `tf.function`s; the memory's finalizer
unregisters it. The design: docs/architecture.md#native-ops.

TensorFlow-free: the core library is a separate shared object from the
ops library.
"""

import ctypes
import hashlib
import secrets
import threading
import weakref
from typing import Any, List, Optional, Sequence

import numpy as np

from dopamine_per.native import core

__all__ = ['NativeLock', 'NativeMemory', 'UnsupportedMemoryError',
           'element_codes', 'unsupported_reason']

# The methods that decide what a batch holds or what the priority ops do: a
# subclass overriding one samples (or sets priorities) otherwise than the
# ops would, and keeps the Python path.
_SAMPLING_METHODS = ('sample_transition_batch', 'sample_index_batch',
                     'set_priority', 'get_priority',
                     '_sample_indices', '_draw', '_redraw', '_valid_mask',
                     '_gather', '_transition_element', '_batch_plan',
                     '_row_elements', '_row_sources', '_row_lock',
                     'get_transition_elements', 'get_storage_signature')

# NumPy sums 8 or more terms pairwise; the native returns sum left to right.
_MAX_NATIVE_HORIZON = 7


class UnsupportedMemoryError(ValueError):
  """The native ops cannot sample this memory as it samples itself."""


class NativeLock(object):
  """The memory's lock, held in the native library (shared with the ops).

  Re-entrant for the thread holding it, as the memories' RLocks are: only
  the outermost acquire takes the native mutex, through ctypes, which
  releases the GIL while it waits. Owns `handle`, the native reference that
  keeps the mutex alive, also after the memory is unregistered.
  """

  def __init__(self, library: ctypes.CDLL, handle: int):
    self._lock = library.per_lock
    self._unlock = library.per_unlock
    self._handle = handle
    self._owner = None
    self._depth = 0
    # Not at exit: daemon threads may still take the lock then.
    weakref.finalize(self, library.per_memory_release, handle).atexit = False

  def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
    """Takes the lock (blocking only; the arguments are RLock's)."""
    del blocking, timeout
    me = threading.get_ident()
    if self._owner == me:
      self._depth += 1
      return True
    self._lock(self._handle)
    self._owner = me
    self._depth = 1
    return True

  def release(self) -> None:
    """Releases one level of the lock."""
    if self._owner != threading.get_ident():
      raise RuntimeError('cannot release un-acquired lock')
    self._depth -= 1
    if not self._depth:
      self._owner = None
      self._unlock(self._handle)

  __enter__ = acquire

  def __exit__(self, *unused_exc_info: Any) -> None:
    self.release()


def _stock_class(memory: Any) -> Optional[type]:
  """The library's memory class that `memory`'s class is or derives from.

  The nearest class of its MRO defined in dopamine_per.replay_memory (the
  circular or the prioritized memory), or None.
  """
  for cls in type(memory).__mro__:
    if cls.__module__.startswith(__package__ + '.'):
      return cls
  return None


def unsupported_reason(memory: Any) -> Optional[str]:
  """Why the native ops cannot sample `memory`, or None if they can.

  They sample the library's two memories (and subclasses that do not
  change sampling) whose rewards are float32 scalars, whose update horizon
  is below 8, whose terminals are bools or integers and whose elements are
  plain (not object) arrays.
  """
  stock = _stock_class(memory)
  if stock is None:
    return '{} is not a dopamine_per out-of-graph memory'.format(
        type(memory).__name__)
  for name in _SAMPLING_METHODS:
    if (getattr(type(memory), name, None) is not getattr(stock, name, None)
        or name in vars(memory)):
      return '{}.{} changes how batches are sampled or priorities set'.format(
          type(memory).__name__, name)
  elements = memory.get_storage_signature()
  reward, terminal = elements[2], elements[3]
  if tuple(reward.shape) or np.dtype(reward.type) != np.float32:
    return ('rewards of shape {} and dtype {} (the native returns are '
            'float32 scalars)'.format(tuple(reward.shape),
                                      np.dtype(reward.type).name))
  if memory.update_horizon > _MAX_NATIVE_HORIZON:
    return ('update_horizon {} (NumPy sums 8 or more terms pairwise, the '
            'native returns left to right)'.format(memory.update_horizon))
  if np.dtype(terminal.type).kind not in 'biu':
    return ('terminals of dtype {} (the native ops take bools and '
            'integers)'.format(np.dtype(terminal.type).name))
  for element in elements:
    if np.dtype(element.type).hasobject:
      return 'element {} of dtype object'.format(element.name)
  if not np.little_endian:
    return 'a big-endian machine'
  return None


def element_codes(elements: Sequence[Any], storage_names: Sequence[str]
                 ) -> List[str]:
  """The ops' names of transition elements: extras by storage position."""
  extras = {name: 'extra:{}'.format(k)
            for k, name in enumerate(storage_names[4:])}
  return [extras.get(element.name, element.name) for element in elements]


def _address(array: np.ndarray) -> int:
  return array.__array_interface__['data'][0]


def _seed(memory: Any) -> int:
  """The ops' generator seed, without drawing from the memory's generator.

  From the state of the memory's generator and its add count, so that a
  seeded run samples the same batches again, and a memory restored from a
  checkpoint does not replay the draws its run started with. Without a
  generator, from fresh entropy: each run (and each resume) draws its own
  stream, and Python's `random`, which the agent's exploration may use, is
  not advanced.
  """
  if memory.rng is None:  # Fresh entropy; Python's `random` is untouched.
    return secrets.randbits(64)
  state = repr((memory.rng.bit_generator.state,
                memory.storage.add_count)).encode()
  return int.from_bytes(hashlib.sha256(state).digest()[:8], 'little')


class NativeMemory(object):
  """A memory registered with the native library, for the ops.

  Attributes:
    id: int, the memory's id in the registry (the ops' `memory_id`).
    token: int, a random 64-bit number the ops carry beside the id.
    lock: NativeLock, the lock the memory and the ops share.
    storage_names: list of str, the storage elements' names, in order.
  """

  def __init__(self, memory: Any):
    """Registers `memory` (the caller then makes `lock` its lock).

    Raises:
      UnsupportedMemoryError: If the ops cannot sample it (see
        `unsupported_reason`).
      dopamine_per.native.build.NativeBuildError: If the core library
        cannot be built.
    """
    reason = unsupported_reason(memory)
    if reason is not None:
      raise UnsupportedMemoryError(reason)
    self._library = core.load()
    handle = ctypes.c_void_p()
    # Unguessable, beside the id (which counts from 1 in every process): an
    # op from another process's graph never finds a memory of this one.
    self.token = secrets.randbits(64)
    self.id = self._library.per_memory_create(ctypes.byref(handle),
                                              self.token)
    self._handle = handle.value
    self._registered = True
    self.lock = NativeLock(self._library, self._handle)
    self.storage_names = [e.name for e in memory.get_storage_signature()]
    self._kept: List[Any] = []  # What the registered pointers point into.
    try:
      self.bind(memory)
    except BaseException:
      self.close()
      raise
    self._finalizer = weakref.finalize(memory, self.close)

  def bind(self, memory: Any) -> None:
    """(Re-)registers the memory's arrays: after a load replaced them.

    The caller holds the memory's lock (or no op knows the id yet). After
    `close`, does nothing.
    """
    if not self._registered:
      return
    arrays = memory.storage.arrays
    columns = [np.ascontiguousarray(arrays[name])
               for name in self.storage_names]
    if any(column is not arrays[name]
           for column, name in zip(columns, self.storage_names)):
      raise UnsupportedMemoryError('storage arrays that are not '
                                   'C-contiguous')
    observation, action, reward, terminal = columns[:4]
    extras = columns[4:]
    extra_data = (ctypes.c_void_p * max(len(extras), 1))(
        *[_address(e) for e in extras])
    extra_bytes = (ctypes.c_int64 * max(len(extras), 1))(
        *[e[0].nbytes if len(e) else 0 for e in extras])
    discounts = np.ascontiguousarray(memory.discounts, dtype=np.float32)
    layout = core.PerLayout(
        capacity=memory.replay_capacity, stack=memory.stack_size,
        horizon=memory.update_horizon,
        max_sample_attempts=memory.max_sample_attempts,
        add_count=_address(memory.storage.counters),
        episode_end=_address(memory.storage.episode_end),
        observation=_address(observation),
        pixels=int(np.prod(observation.shape[1:], dtype=np.int64)),
        observation_item=observation.itemsize,
        action=_address(action), action_bytes=action[0].nbytes,
        reward=_address(reward), terminal=_address(terminal),
        terminal_item=terminal.itemsize, extras=len(extras),
        extra_data=ctypes.cast(extra_data, ctypes.c_void_p),
        extra_bytes=ctypes.cast(extra_bytes, ctypes.c_void_p),
        discounts=_address(discounts), seed=_seed(memory))
    kept = [memory.storage.counters, memory.storage.episode_end, discounts,
            *columns]
    tree = getattr(memory, 'sum_tree', None)
    if tree is not None:
      tree_layout = tree.native_layout()
      layout.flat = _address(tree_layout['flat'])
      layout.offsets = _address(tree_layout['offsets'])
      layout.levels = len(tree_layout['offsets']) - 1
      layout.fanout = tree_layout['fanout']
      layout.tree_scalars = _address(tree_layout['scalars'])
      layout.smallest = tree_layout['smallest']
      layout.largest = tree_layout['largest']
      kept += [tree_layout['flat'], tree_layout['offsets'],
               tree_layout['scalars']]
    self._library.per_memory_bind(self._handle, ctypes.byref(layout))
    self._kept = kept

  def close(self) -> None:
    """Unregisters the memory: its ops fail cleanly from now on.

    The memory keeps `lock` (and works on without the ops).
    """
    if self._registered:
      self._library.per_memory_destroy(self.id, self._handle)
      self._registered = False
      self._kept = []
