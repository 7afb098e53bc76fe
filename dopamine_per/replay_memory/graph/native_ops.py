# coding=utf-8
"""The native TensorFlow ops on a memory, and whether to use them.

`binding` decides: the memory's `native_memory()` registration when
`use_native_ops` is on, the ops library builds and the memory is one the
ops sample as it samples itself; else None, after one warning per reason
saying why (the callers then build today's `tf.numpy_function` ops). The
other functions build the ops (dopamine_per/native/replay_ops.cc), which
run without the GIL, in sessions, `tf.function`s and tf.data alike. Bad
input is a `tf.errors.InvalidArgumentError` naming it; a memory that cannot
be sampled yet a `tf.errors.FailedPreconditionError`. XLA cannot compile
them (`jit_compile=True` fails naming the op).
"""

import threading
from typing import Any, List, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

from dopamine_per.native import build
from dopamine_per.native import core
from dopamine_per.native import native_memory

__all__ = ['DEQUEUE_TIMEOUT_S', 'FALLBACK_WARNING', 'binding', 'dequeue',
           'get_priority', 'load', 'queue_binding', 'queue_priorities',
           'sample', 'set_priority', 'total_priority', 'transitions_at']

# The warning logged (once per reason) when the Python ops are used instead.
FALLBACK_WARNING = ('dopamine_per: the replay memory samples through '
                    'tf.numpy_function (Python, under the GIL), not the '
                    'native ops: %s. use_native_ops=False silences this.')

# Seconds the dequeue op waits for a ready batch.
DEQUEUE_TIMEOUT_S = 300.0

_lock = threading.Lock()
_ops = None
_warned = set()


def load() -> Any:
  """The ops module (`tf.load_op_library`), built on first use.

  Raises:
    build.NativeBuildError: If the libraries cannot be built or loaded.
  """
  global _ops
  with _lock:
    if _ops is None:
      core.load()  # The ops link to it: one registry for both.
      path = build.ops_library()
      try:
        _ops = tf.load_op_library(path)
      except tf.errors.NotFoundError as e:
        raise build.NativeBuildError('the ops library {} does not load: '
                                     '{}'.format(path, e.message)) from e
    return _ops


def binding(memory: Any, use_native_ops: bool
           ) -> Optional[native_memory.NativeMemory]:
  """The memory's native registration, or None for the Python ops.

  Args:
    memory: an out-of-graph replay memory.
    use_native_ops: bool, False for the Python ops.

  Returns:
    native_memory.NativeMemory, or None (logged once per reason).
  """
  if not use_native_ops:
    return None
  if (getattr(memory, 'native_memory', None) is None and
      getattr(memory, 'native_batch_queue', None) is not None):
    return None  # A sharded memory: it samples through `dequeue`.
  try:
    load()
    register = getattr(memory, 'native_memory', None)
    if register is None:  # Not an AttributeError raised inside it.
      raise native_memory.UnsupportedMemoryError(
          '{} has no native_memory()'.format(type(memory).__name__))
    return register()
  except (build.NativeBuildError, native_memory.UnsupportedMemoryError) as e:
    reason = str(e)
    if reason not in _warned:
      _warned.add(reason)
      logging.warning(FALLBACK_WARNING, reason)
    return None


def queue_binding(memory: Any, use_native_ops: bool) -> Any:
  """A sharded memory's native batch queue (`native_batch_queue()`), or
  None for the Python ops (also logged once where the ops do not build).

  Args:
    memory: a replay memory; only one with `native_batch_queue` has one.
    use_native_ops: bool, False for the Python ops.
  """
  make = getattr(memory, 'native_batch_queue', None)
  if not use_native_ops or make is None:
    return None
  try:
    load()
    return make()
  except build.NativeBuildError as e:
    if str(e) not in _warned:
      _warned.add(str(e))
      logging.warning(FALLBACK_WARNING, e)
    return None


def dequeue(queue: Any, elements: Sequence[Any],
            timeout_s: float = DEQUEUE_TIMEOUT_S,
            name: Optional[str] = None) -> List[tf.Tensor]:
  """An op taking the oldest ready batch off a `batch_queue.BatchQueue`.

  It waits up to `timeout_s` for one (then DeadlineExceededError), raises
  a queued sampling error as its TensorFlow error, and fails with
  FailedPreconditionError once the queue is closed.

  Args:
    queue: the memory's BatchQueue.
    elements: list of ReplayElement, the batch's layout.
    timeout_s: float, seconds to wait for a batch.
    name: the op's name.

  Returns:
    list of tf.Tensor, one per element, with its static shape.
  """
  names = [element.name for element in elements]
  token = queue.token - 2**64 if queue.token >= 2**63 else queue.token
  return load().dopamine_per_dequeue_batch(
      queue_id=queue.id, queue_token=token,
      state_outputs=[names.index(n) if n in names else -1
                     for n in ('state', 'next_state')],
      timeout_s=float(timeout_s),
      Tout=[tf.as_dtype(element.type) for element in elements],
      output_shapes=[tf.TensorShape(element.shape) for element in elements],
      name=name)


def queue_priorities(queue: Any, capacity: int, indices: Any,
                     priorities: Any, name: Optional[str] = None
                    ) -> Optional[tf.Operation]:
  """An op queueing priority updates of a sharded memory of `capacity`
  global slots in its batch `queue`: checked as its `set_priority`
  checks them (InvalidArgumentError, nothing queued), sent with its next
  draw."""
  token = queue.token - 2**64 if queue.token >= 2**63 else queue.token
  op = load().dopamine_per_queue_priorities(
      indices=indices, priorities=priorities, queue_id=queue.id,
      queue_token=token, capacity=int(capacity), name=name)
  return op if isinstance(op, tf.Operation) else None


def _memory_attrs(native: native_memory.NativeMemory) -> dict:
  """The attributes naming an op's memory: its id and token (an int64)."""
  token = native.token - 2**64 if native.token >= 2**63 else native.token
  return dict(memory_id=native.id, memory_token=token)


def _transition_attrs(native: native_memory.NativeMemory,
                      elements: Sequence[Any]) -> dict:
  return dict(
      **_memory_attrs(native),
      elements=native_memory.element_codes(elements, native.storage_names),
      Tout=[tf.as_dtype(element.type) for element in elements],
      output_shapes=[tf.TensorShape(element.shape) for element in elements])


def sample(native: native_memory.NativeMemory, elements: Sequence[Any],
           name: Optional[str] = None) -> List[tf.Tensor]:
  """An op sampling a batch of `elements` (the memory's transition layout).

  Args:
    native: the memory's registration.
    elements: list of ReplayElement, `get_transition_elements(batch_size)`.
    name: the op's name.

  Returns:
    list of tf.Tensor, one per element, with its static shape.
  """
  tensors, _ = load().dopamine_per_sample_transitions(
      batch_size=elements[0].shape[0], name=name,
      **_transition_attrs(native, elements))
  return list(tensors)


def stage(native: native_memory.NativeMemory, elements: Sequence[Any],
          name: Optional[str] = None) -> Tuple[List[tf.Tensor], tf.Tensor]:
  """An op sampling a batch to stage, as `sample`, and the batch's ticket.

  A memory with compressed frames leaves the states to be decoded later
  (native/deferred_states.h): they may be read only through
  `await_states` with the ticket (an int64 scalar; 0 when nothing is
  left to decode).
  """
  tensors, ticket = load().dopamine_per_sample_transitions(
      batch_size=elements[0].shape[0], defer_states=True, name=name,
      **_transition_attrs(native, elements))
  return list(tensors), ticket


def await_states(ticket: tf.Tensor, states: Sequence[tf.Tensor],
                 name: Optional[str] = None) -> List[tf.Tensor]:
  """`states` (a staged batch's state tensors) once `ticket`'s deferred
  decode is done, the rows not yet decoded decoded by this op."""
  filled = load().dopamine_per_await_states(ticket=ticket, states=states,
                                            name=name)
  for tensor, state in zip(filled, states):
    tensor.set_shape(state.shape)
  return list(filled)


def transitions_at(native: native_memory.NativeMemory,
                   elements: Sequence[Any], indices: Any,
                   name: Optional[str] = None) -> List[tf.Tensor]:
  """An op gathering the transitions at valid slots `indices` ([n] int).

  `elements` is the layout of a batch of n; an invalid slot is an
  InvalidArgumentError naming it.
  """
  return load().dopamine_per_transitions_at(
      indices=indices, name=name, **_transition_attrs(native, elements))


def set_priority(native: native_memory.NativeMemory, indices: Any,
                 priorities: Any, name: Optional[str] = None
                ) -> tf.Operation:
  """An op setting `priorities` (float32/64) at `indices` (int32/64)."""
  op = load().dopamine_per_set_priority(indices=indices,
                                        priorities=priorities, name=name,
                                        **_memory_attrs(native))
  return op if isinstance(op, tf.Operation) else None


def get_priority(native: native_memory.NativeMemory, indices: Any,
                 name: Optional[str] = None) -> tf.Tensor:
  """A float32 tensor shaped like `indices`: their priorities."""
  return load().dopamine_per_get_priority(indices=indices, name=name,
                                          **_memory_attrs(native))


def total_priority(native: native_memory.NativeMemory,
                   name: Optional[str] = None) -> tf.Tensor:
  """A float64 scalar: the memory's total priority."""
  return load().dopamine_per_total_priority(name=name,
                                            **_memory_attrs(native))
