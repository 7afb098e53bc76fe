# coding=utf-8
"""A replay memory's entry in the native registry, shared with the ops.

Every memory made where the native library builds gets one (`create`):
its id, token and two locks, which the ops take too. `bind` registers the
memory's arrays, which the ops then read and write in place.
TensorFlow-free. The design: docs/architecture.md#native-ops.
"""

import contextlib
import ctypes
import hashlib
import random
import secrets
import threading
import types
import weakref
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from dopamine_per.native import build
from dopamine_per.native import core
from dopamine_per.native import extension

__all__ = ['NativeMemory', 'UnsupportedMemoryError', 'create',
           'element_codes', 'lock_of', 'raise_unavailable', 'sampler_of',
           'unsupported_reason']

# NumPy sums 8 or more terms pairwise; the native returns sum left to right.
_MAX_NATIVE_HORIZON = 7

# The package of the library's memories (circular_replay_buffer,
# prioritized_replay_buffer), whose classes the ops know.
_MEMORIES_PACKAGE = 'dopamine_per.replay_memory'


class UnsupportedMemoryError(ValueError):
  """The native ops cannot sample this memory as it samples itself."""


def _library_mro(cls: type) -> List[type]:
  """The classes of `cls`'s MRO defined in dopamine_per.replay_memory."""
  return [c for c in cls.__mro__
          if c.__module__.startswith(_MEMORIES_PACKAGE + '.')]


def unsupported_reason(memory: Any) -> Optional[str]:
  """Why the native ops cannot sample `memory`, or None if they can.

  They sample the library's two memories and subclasses overriding no
  method or property but `__init__` (the Python path calls an override,
  the ops could not), with float32 scalar rewards, an update horizon below
  8, bool or integer terminals and no object arrays.
  """
  library = _library_mro(type(memory))
  if not library:
    return '{} is not a dopamine_per out-of-graph memory'.format(
        type(memory).__name__)
  stock = library[0]  # The circular or the prioritized memory.
  methods = {name for cls in _library_mro(stock)
             for name, value in vars(cls).items()
             if isinstance(value, (types.FunctionType, property, staticmethod,
                                   classmethod)) and not name.startswith('__')}
  for name in sorted(methods):
    if (getattr(type(memory), name) is not getattr(stock, name) or
        name in vars(memory)):
      return ('{}.{} overrides the library\'s method (a memory whose class '
              'overrides any method but __init__ keeps the Python path, '
              'which calls it)'.format(type(memory).__name__, name))
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
  """The ops' generator seed, drawing nothing from any generator.

  A digest of the memory's add count and its generator's state or, without
  one, the states of NumPy's and Python's global generators (which the
  agent's exploration draws from, so they are not advanced): a run seeded
  as the Runner seeds it samples the same batches again, whatever the
  process did before, and a memory restored without a sampler state does
  not replay its run's first draws. Two memories without `rng` bound with
  the global generators in one state and the same add count draw alike.
  """
  if memory.rng is None:
    numpy_state = np.random.get_state()
    state = (numpy_state[1].tobytes(), numpy_state[2:], random.getstate())
  else:
    state = memory.rng.bit_generator.state
  digest = hashlib.sha256(repr((state, memory.storage.add_count)).encode())
  return int.from_bytes(digest.digest()[:8], 'little')


class NativeMemory(object):
  """A memory's entry in the native registry: its id, token and locks.

  Attributes:
    id: int, the memory's id in the registry (the ops' `memory_id`).
    token: int, a random 64-bit number the ops carry beside the id: an op
      from another process's graph never finds a memory of this one.
    lock: the storage's lock, the memory's `_lock`.
    tree_lock: the sum tree's lock (the prioritized memory's
      `_priority_lock`), taken after `lock` by whoever takes both.
    bound: bool, whether `bind` registered the memory's arrays.
  """

  def __init__(self):
    """Makes the registry entry, unbound (see `create`).

    Raises:
      dopamine_per.native.build.NativeBuildError: If a library cannot be
        built.
    """
    self._library = core.load()
    self._module = module = extension.load()
    handle = ctypes.c_void_p()
    self.token = secrets.randbits(64)
    self.id = self._library.per_memory_create(ctypes.byref(handle),
                                              self.token)
    self._handle = handle.value
    # The locks hold references of their own to the entry.
    self.lock = module.Lock(self._handle, False)
    self.tree_lock = module.Lock(self._handle, True)
    weakref.finalize(self, self._library.per_memory_release, self._handle)
    self._open = True
    self.bound = False
    self.storage_names: List[str] = []
    self._kept: List[Any] = []  # What the registered pointers point into.
    # `restore_sampler_state`'s, for the next bind.
    self._pending_sampler_state: Optional[str] = None

  def bind(self, memory: Any) -> None:
    """(Re-)registers the memory's arrays, under both locks (re-entrant).

    After `close`, does nothing.

    Raises:
      UnsupportedMemoryError: If the ops cannot sample the memory (see
        `unsupported_reason`), or its storage arrays are not C-contiguous.
    """
    reason = unsupported_reason(memory)
    if reason is not None:
      raise UnsupportedMemoryError(reason)
    with self.lock, self.tree_lock:
      if self._open:
        self._bind(memory)

  def _bind(self, memory: Any) -> None:
    self.storage_names = [e.name for e in memory.get_storage_signature()]
    arrays = memory.storage.arrays
    # Compressed frames (frame_blocks.CompressedFrames), or None.
    blocks = arrays['observation']
    if isinstance(blocks, np.ndarray):
      blocks = None
    columns = [blocks if name == 'observation' and blocks is not None else
               np.ascontiguousarray(arrays[name])
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
        size=ctypes.sizeof(core.PerLayout), version=core.LAYOUT_VERSION,
        capacity=memory.replay_capacity, stack=memory.stack_size,
        horizon=memory.update_horizon,
        max_sample_attempts=memory.max_sample_attempts,
        add_count=_address(memory.storage.counters),
        episode_end=_address(memory.storage.episode_end),
        observation=None if blocks is not None else _address(observation),
        pixels=int(np.prod(observation.shape[1:], dtype=np.int64)),
        observation_item=observation.dtype.itemsize,
        action=_address(action), action_bytes=action[0].nbytes,
        reward=_address(reward), terminal=_address(terminal),
        terminal_item=terminal.itemsize, extras=len(extras),
        extra_data=ctypes.cast(extra_data, ctypes.c_void_p),
        extra_bytes=ctypes.cast(extra_bytes, ctypes.c_void_p),
        discounts=_address(discounts), seed=_seed(memory))
    kept = [memory.storage.counters, memory.storage.episode_end, discounts,
            *columns]
    if blocks is not None:
      layout.block_frames = blocks.block_frames
      tables = (blocks.addresses, blocks.sizes, blocks.open_block,
                blocks.open_frames)
      (layout.block_addresses, layout.block_sizes, layout.open_block,
       layout.open_frames) = [_address(table) for table in tables]
      kept += tables
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
    # Old and new arrays stay referenced until the library points at the
    # new ones, whatever interrupts this.
    self._kept = self._kept + kept
    if self._library.per_memory_bind(self._handle, ctypes.byref(layout)):
      raise build.NativeBuildError(
          'the core library does not take this layout (size {}, version '
          '{}): it was built from other sources; rebuild it (python -m '
          'dopamine_per.native.build)'.format(ctypes.sizeof(layout),
                                              core.LAYOUT_VERSION))
    self._kept = kept
    self.bound = True
    if self._pending_sampler_state is not None:
      self._library.per_memory_set_sampler_state(
          self._handle, self._pending_sampler_state.encode('ascii'), 0)
      self._pending_sampler_state = None

  def batch_codes(self, names: Sequence[str]) -> bytes:
    """The codes of the ops' element names (`element_codes`), for `fill`.

    Raises:
      ValueError: If a name is not an element the native batch fills.
    """
    return self._module.element_codes(names)

  def valid_mask(self, indices: np.ndarray) -> np.ndarray:
    """Whether each slot of int64 `indices` is a valid transition.

    The caller holds `lock`; the memory is bound.
    """
    valid = np.empty(len(indices), bool)
    self._module.valid_mask(self.lock, indices, valid)
    return valid

  def fill(self, indices: np.ndarray, codes: bytes,
           outputs: Sequence[np.ndarray]) -> None:
    """Fills `outputs` with the batch at valid slots `indices` (int64).

    One C-contiguous output of len(indices) rows per element of `codes`
    (`batch_codes`), filled as the ops fill theirs: the rows under
    `tree_lock`, the frames without it. The caller holds `lock`; the memory
    is bound.
    """
    self._module.fill_batch(self.lock, self.tree_lock, indices, codes,
                            tuple(outputs))

  def sample(self, generator: Any, masked: bool, count: int, codes: bytes,
             outputs: Sequence[np.ndarray]) -> Tuple[np.ndarray, bool]:
    """Samples `count` valid slots and fills `outputs` with their batch.

    The ops' policy, drawing from the NumPy BitGenerator `generator` exactly
    as the memory's Python draws would (`masked`: as the legacy
    `RandomState.randint`), then `fill`. A prioritized memory without a
    generator passes for `generator` the words of Python's `random` its
    strata would draw (`sum_tree.python_random_words`): its redraws, if
    any, are left to it. The caller holds `lock`; the memory is bound.

    Returns:
      The slots, int64, and whether `outputs` were filled: False only for
      words, where a draw was invalid (the slots are the draws).

    Raises:
      RuntimeError: If too few transitions were added, or
        max_sample_attempts draws were invalid (nothing filled).
      ValueError: If every priority is zero.
    """
    indices = np.empty(count, np.int64)
    words = isinstance(generator, bytes)
    with self.tree_lock, (contextlib.nullcontext() if words else
                          generator.lock):
      filled = self._module.sample_batch(self.lock, self.tree_lock, generator,
                                         masked, indices, codes,
                                         tuple(outputs))
    return indices, filled

  def sampler_state(self) -> Optional[str]:
    """The sampling ops' generator state, for a checkpoint (text).

    Unbound: `restore_sampler_state`'s state, or None.
    """
    with self.lock:
      if not self.bound:
        return self._pending_sampler_state
      length = self._library.per_memory_sampler_state(self._handle, None, 0)
      text = ctypes.create_string_buffer(length + 1)
      self._library.per_memory_sampler_state(self._handle, text, length + 1)
      return text.value.decode('ascii')

  def check_sampler_state(self, state: Any) -> bool:
    """Whether `state` is a generator state `sampler_state` could return."""
    return (isinstance(state, str) and state.isascii() and
            '\0' not in state and
            not self._library.per_memory_set_sampler_state(
                self._handle, state.encode('ascii'), 1))

  def restore_sampler_state(self, state: Optional[str]) -> None:
    """Makes `state` (checked) the ops' generator state from the next bind.

    So a resumed run samples as an uninterrupted one. None: seed as usual.
    """
    self._pending_sampler_state = state

  def close(self) -> None:
    """Unbinds and unregisters the memory: its ops fail cleanly from now on.

    The memory keeps its locks and works on without the ops. Safe with
    either lock held by this thread, and from a finalizer (the library
    takes the locks this thread does not hold, uninterruptibly).
    """
    if not self._open:
      return
    self._library.per_memory_destroy(
        self.id, self._handle, not self.lock.held(),
        not self.tree_lock.held())
    self._open = False
    self.bound = False
    self._kept = []


def raise_unavailable() -> None:
  """Raises why a memory has no registry entry (`create` gave None).

  Raises:
    dopamine_per.native.build.NativeBuildError: The build's error, which
      the library remembers.
    UnsupportedMemoryError: If the library loads now (it did not when the
      memory was made).
  """
  core.load()
  extension.load()
  raise UnsupportedMemoryError(
      'the memory was made before the native library could be built')


def create(owner: Any) -> Optional[NativeMemory]:
  """A new memory's registry entry, closed when `owner` (the memory) goes.

  None where the library cannot be built (the memory then uses RLocks and
  `tf.numpy_function`).
  """
  try:
    native = NativeMemory()
  except build.NativeBuildError:
    return None
  # Not at exit: a daemon thread may still hold a lock then.
  weakref.finalize(owner, native.close).atexit = False
  return native


def lock_of(native: Optional[NativeMemory], tree: bool = False) -> Any:
  """The memory's storage lock (or `tree` lock): `native`'s, else an RLock."""
  if native is None:
    return threading.RLock()
  return native.tree_lock if tree else native.lock


def sampler_of(memory: Any, native: Optional[NativeMemory],
               compiled: bool) -> Optional[NativeMemory]:
  """`native`, bound, if it samples `memory` out of the graph; else None.

  It does where `native` exists, the kernels are `compiled` and the ops
  could sample the memory. Binds it unless bound (a bind would seed the
  ops' generator anew); the caller holds the memory's lock.
  """
  if native is None or not compiled:
    return None
  if not native.bound:
    try:
      native.bind(memory)
    except UnsupportedMemoryError:
      return None
  return native if native.bound else None
