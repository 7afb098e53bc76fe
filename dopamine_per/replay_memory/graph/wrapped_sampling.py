# coding=utf-8
"""The TensorFlow side of the replay memories: sampling and priority ops.

What the `Wrapped*` classes and `as_dataset` hand to TensorFlow, reached
through `wrapped_replay_buffer.tensorflow_side` on first use (the memories
are NumPy only): ops that sample a batch (with or without a staging area),
that set and get priorities, and a `tf.data.Dataset` of batches. Each is
the native op when the memory is registered with them (`native_binding`,
see `native_ops`), else a `tf.numpy_function`. What differs from
Dopamine's Wrapped* classes: docs/compat.md#wrapped_replay_buffer.
"""

import threading
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union
import weakref

import tensorflow as tf
from tensorflow.python.ops import data_flow_ops  # pylint: disable=g-direct-tensorflow-import

from dopamine_per.replay_memory.graph import native_ops
from dopamine_per.replay_memory.memory import validation

__all__ = ['dataset', 'get_priority_tensor', 'native_binding',
           'queue_binding', 'sampling_ops', 'set_priority_op']

# The memory's registration with the native ops, or None (Python ops).
native_binding = native_ops.binding
# A sharded memory's native batch queue, or None.
queue_binding = native_ops.queue_binding

# Transition elements a training step feeds its networks first; with staging
# they do not wait for the next batch to be staged (see `sampling_ops`).
_NETWORK_INPUTS = ('state', 'next_state')

# Graph -> the memories its native ops reach (by id only), kept alive while
# the graph lives as a py_func keeps its memory (a tf.function's or dataset
# function's graph too).
_GRAPH_MEMORIES = weakref.WeakKeyDictionary()
_GRAPH_MEMORIES_LOCK = threading.Lock()


def _keep_alive(memory: Any) -> None:
  """Keeps `memory` alive while the default graph lives (not eagerly)."""
  if tf.executing_eagerly():
    return  # The op runs now.
  graph = tf.compat.v1.get_default_graph()
  with _GRAPH_MEMORIES_LOCK:
    memories = _GRAPH_MEMORIES.setdefault(graph, [])
    if not any(kept is memory for kept in memories):
      memories.append(memory)


def _numpy_function(func: Callable[..., Any], inp: Sequence[Any],
                    out_types: Sequence[Any], name: str
                   ) -> Union[List[tf.Tensor], tf.Operation, None]:
  """`tf.numpy_function(func, inp, out_types, stateful=True, name=name)`.

  Stateful, so that each run calls `func` again. Returns a list of tensors,
  one per `out_types` entry (eagerly too); with no `out_types`, the
  tf.Operation (None eagerly).
  """
  out_types = list(out_types)
  result = tf.numpy_function(func, list(inp), out_types, stateful=True,
                             name=name)
  if tf.executing_eagerly() and len(out_types) == 1:
    return [result]  # tf.numpy_function returns a lone output bare eagerly.
  return result


def sampling_ops(memory: Any, use_staging: bool, native: Any = None,
                 queue: Any = None) -> Tuple[List[tf.Tensor], Optional[Any]]:
  """Builds the ops that sample batches of `memory` in graph mode.

  Without staging, the transition tensors are the outputs of one op that
  samples a batch: the native op with `native`, the op taking a ready
  batch off a sharded memory's native `queue`, else a `tf.numpy_function`.

  With staging, a `StagingArea` in the session holds the next batch. A run
  takes the staged batch (or samples one, when none is staged) and then
  samples the next one into the area, on another inter-op thread: `state`
  and `next_state` come straight from the area, the other elements are
  released once the next batch is staged, so the sampling overlaps with
  the networks' work on the states. A run that reads nothing but the
  states stages nothing. Through the native op, compressed states are
  decoded after the batch is staged (native/deferred_states.h): the area
  also holds the batch's ticket, and the states pass through the op that
  awaits it.

  Args:
    memory: an out-of-graph replay memory.
    use_staging: bool, prefetch the next batch while the graph trains.
    native: the memory's `native_binding`, or None.
    queue: a sharded memory's `queue_binding`, or None.

  Returns:
    (list of tf.Tensor in `memory.get_transition_elements()` order, with
    static shapes; the StagingArea, or None without staging).
  """
  elements = memory.get_transition_elements()
  with tf.name_scope('sample_replay'), tf.device('/cpu:*'):
    if not use_staging:
      return _sampling_op(memory, elements, 'replay_sample_py_func',
                          native, queue), None
    # The native op stages a ticket too: the states it left to decode
    # (native/deferred_states.h), awaited when the batch is taken.
    deferred = native is not None and queue is None
    area = data_flow_ops.StagingArea(
        [tf.as_dtype(e.type) for e in elements] + [tf.int64] * deferred,
        shapes=[e.shape for e in elements] + [[]] * deferred)

    def sample(name):
      if deferred:
        tensors, ticket = native_ops.stage(native, elements, name=name)
        return tensors + [ticket]
      return _sampling_op(memory, elements, name + '_py_func', native, queue)

    batch = tf.cond(area.size() > 0, area.get,
                    lambda: sample('replay_sample'))
    batch = list(batch) if isinstance(batch, (list, tuple)) else [batch]
    with tf.control_dependencies(batch):  # The area holds one batch at most.
      stage = area.put(sample('replay_stage'), name='stage_next_batch')
    if deferred:
      _keep_alive(memory)
      batch = _awaited(batch[:-1], batch[-1], elements)
    tensors = []
    for tensor, element in zip(batch, elements):
      if element.name not in _NETWORK_INPUTS:
        with tf.control_dependencies([stage]):
          tensor = tf.identity(tensor, name=element.name)
      tensors.append(tensor)
    return tensors, area


def _awaited(batch: List[tf.Tensor], ticket: tf.Tensor,
             elements: Sequence[Any]) -> List[tf.Tensor]:
  """`batch` with its states passed through the op awaiting `ticket`."""
  at = [i for i, e in enumerate(elements) if e.name in _NETWORK_INPUTS]
  if not at:
    return batch
  filled = native_ops.await_states(ticket, [batch[i] for i in at],
                                   name='await_states')
  batch = list(batch)
  for i, tensor in zip(at, filled):
    batch[i] = tensor
  return batch


def _sampling_op(memory: Any, elements: Sequence[Any], name: str,
                 native: Any, queue: Any = None) -> List[tf.Tensor]:
  """An op sampling one batch, its outputs' static shapes set.

  The native op with `native`, the dequeue op with `queue` (named `name`
  without its '_py_func'), else a py_func.
  """
  if native is not None or queue is not None:
    _keep_alive(memory)
    if queue is not None:
      return native_ops.dequeue(queue, elements,
                                name=name.replace('_py_func', ''))
    return native_ops.sample(native, elements,
                             name=name.replace('_py_func', ''))
  tensors = _numpy_function(
      memory.sample_transition_batch, [], [e.type for e in elements],
      name=name)
  for tensor, element in zip(tensors, elements):
    tensor.set_shape(element.shape)
  return tensors


def _native_indices(indices: Any) -> tf.Tensor:
  """`indices` as the native ops take them: other integers as int64."""
  indices = tf.convert_to_tensor(indices)
  if indices.dtype.is_integer and indices.dtype not in (tf.int32, tf.int64):
    indices = tf.cast(indices, tf.int64)  # As the memory takes any integer.
  return indices


def _native_priorities(priorities: Any) -> tf.Tensor:
  """`priorities` as the native ops take them: other numbers as float64."""
  priorities = tf.convert_to_tensor(priorities)
  if ((priorities.dtype.is_integer or priorities.dtype.is_floating) and
      priorities.dtype not in (tf.float32, tf.float64)):
    priorities = tf.cast(priorities, tf.float64)  # Exact for these.
  return priorities


def set_priority_op(memory: Any, indices: Any, priorities: Any,
                    native: Any = None, queue: Any = None) -> tf.Operation:
  """Returns an op setting `priorities` at `indices` in a prioritized memory.

  Args:
    memory: an out-of-graph prioritized replay memory.
    indices: int tensor of shape [n], memory indices.
    priorities: float tensor of shape [n].
    native: the memory's `native_binding`, or None.
    queue: a sharded memory's `queue_binding`, or None.

  Returns:
    A tf.Operation: the native op (with `queue`, the one queueing the
    update for the shards), or a py_func running `memory.set_priority`.
  """
  if queue is not None:
    _keep_alive(memory)
    return native_ops.queue_priorities(
        queue, memory.replay_capacity, _native_indices(indices),
        _native_priorities(priorities),
        name='prioritized_replay_set_priority')
  if native is not None:
    _keep_alive(memory)
    return native_ops.set_priority(native, _native_indices(indices),
                                   _native_priorities(priorities),
                                   name='prioritized_replay_set_priority')
  return _numpy_function(
      memory.set_priority, [indices, priorities], [],
      name='prioritized_replay_set_priority_py_func')


def get_priority_tensor(memory: Any, indices: Any, native: Any = None
                       ) -> tf.Tensor:
  """Returns a float32 tensor shaped like `indices`: their priorities.

  Args:
    memory: an out-of-graph prioritized replay memory.
    indices: int tensor of shape [n], memory indices.
    native: the memory's `native_binding`, or None.
  """
  indices = tf.convert_to_tensor(indices)
  if native is not None:
    _keep_alive(memory)
    return native_ops.get_priority(native, _native_indices(indices),
                                   name='prioritized_replay_get_priority')
  priorities, = _numpy_function(
      memory.get_priority, [indices], [tf.float32],
      name='prioritized_replay_get_priority_py_func')
  priorities.set_shape(indices.shape)
  return priorities


def dataset(memory: Any, batch_size: Optional[int], prefetch: int,
            use_native_ops: bool = True) -> tf.data.Dataset:
  """Returns an endless dataset of batches sampled from `memory`.

  The body of the memories' `as_dataset` (see there). Each element is a dict
  mapping the names of `memory.get_transition_elements(batch_size)` to
  tensors of their shapes and dtypes, sampled on tf.data's threads by the
  native op (see `native_binding`) or by `memory.sample_transition_batch`.

  Args:
    memory: an out-of-graph replay memory.
    batch_size: int, or None for the memory's batch size.
    prefetch: int >= 0, batches sampled ahead.
    use_native_ops: bool, False for `memory.sample_transition_batch`.

  Returns:
    tf.data.Dataset.

  Raises:
    ValueError: If batch_size is not a positive int.
  """
  if batch_size is not None:
    batch_size = validation.check_int('batch_size', batch_size, 1)
  elements = memory.get_transition_elements(batch_size)
  names = [element.name for element in elements]
  native = native_binding(memory, use_native_ops)

  def sample(unused_element):
    _keep_alive(memory)  # While the dataset's function lives.
    return dict(zip(names, native_ops.sample(native, elements)))

  def batches():
    while True:
      yield dict(zip(names, memory.sample_transition_batch(batch_size)))

  if native is not None:
    batches_dataset = tf.data.Dataset.from_tensors(0).repeat().map(sample)
  else:
    batches_dataset = tf.data.Dataset.from_generator(
        batches, output_signature={
            element.name: tf.TensorSpec(element.shape, element.type,
                                        name=element.name)
            for element in elements})
  return batches_dataset.prefetch(prefetch) if prefetch else batches_dataset
