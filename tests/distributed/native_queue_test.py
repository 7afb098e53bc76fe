# coding=utf-8
"""The learner's native batch queue and its dequeue op (issue 33, item 4).

The queue and op alone (batches, errors, generations, closing), then a
sharded memory feeding it on a local Ray (loopback only, 2 CPUs, started
once for the module): the op's batches against `sample_transition_batch`
for the same draws, raw and compressed shards, with and without staging;
load and close dropping queued batches; sampling errors raised by the op.
"""

import threading

from absl.testing import absltest
import numpy as np
import ray
import tensorflow as tf

from dopamine_per.distributed import native_feed
from dopamine_per.native import batch_queue
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory.circular_replay_buffer import ReplayElement
from dopamine_per.replay_memory.graph import native_ops
from dopamine_per.replay_memory.memory import shipped_frames
from tests.support import fixtures
from tests.support import ray_util
from tests.support import sharded_memories

_SHAPE = sharded_memories.FRAME_SHAPE
_FRAMES = sharded_memories.FRAME_ARGS


def setUpModule():  # pylint: disable=invalid-name
  ray_util.start_local_ray()


def tearDownModule():  # pylint: disable=invalid-name
  ray.shutdown()


def _frame(stream: int, step: int, mark: int = 0) -> np.ndarray:
  return sharded_memories.stream_frame(_SHAPE, stream, step, mark)


def _write_frames(memory, stream: int, steps: int, mark: int = 0) -> None:
  """Episodes of 9 steps of distinct frames, priorities varied."""
  writer = memory.writer(stream)
  for step in range(steps):
    writer.add(_frame(stream, step, mark), step % 3, float(step % 5) - 1.0,
               int(step % 9 == 8), 1.0 + step % 4)
  writer.flush()


def _run(tensors):
  """Evaluates the op's tensors eagerly, as NumPy arrays."""
  return [tensor.numpy() for tensor in tensors]


class QueueAndOpTest(absltest.TestCase):
  """The queue and the op without a memory."""

  _ELEMENTS = [ReplayElement('reward', (3,), np.float32),
               ReplayElement('indices', (3,), np.int32)]

  def _batch(self, value):
    return batch_queue.ReadyBatch(
        [np.full(3, value, np.float32), np.arange(3, dtype=np.int32)], [])

  def test_batches_in_order_then_timeout(self):
    queue = batch_queue.BatchQueue(2)
    generation = queue.generation
    self.assertTrue(queue.push(self._batch(1.0), generation, 0.0))
    self.assertTrue(queue.push(self._batch(2.0), generation, 0.0))
    self.assertFalse(queue.push(self._batch(3.0), generation, 0.01))  # Full.
    self.assertLen(queue, 2)
    for value in (1.0, 2.0):
      reward, indices = _run(native_ops.dequeue(queue, self._ELEMENTS))
      np.testing.assert_array_equal(reward, [value] * 3)
      np.testing.assert_array_equal(indices, [0, 1, 2])
    with self.assertRaisesRegex(tf.errors.DeadlineExceededError,
                                'no replay batch was ready within'):
      native_ops.dequeue(queue, self._ELEMENTS, timeout_s=0.05)

  def test_error_is_raised_by_the_op(self):
    queue = batch_queue.BatchQueue(1)
    queue.push_error(batch_queue.INVALID_ARGUMENT, 'ValueError: bad draw',
                     queue.generation)
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                'ValueError: bad draw'):
      native_ops.dequeue(queue, self._ELEMENTS)

  def test_clear_drops_queued_and_stale_batches(self):
    queue = batch_queue.BatchQueue(4)
    old = queue.generation
    self.assertTrue(queue.push(self._batch(1.0), old, 0.0))
    new = queue.clear()
    self.assertNotEqual(new, old)
    self.assertLen(queue, 0)
    self.assertIsNone(queue.push(self._batch(2.0), old, 0.0))  # Stale.
    self.assertTrue(queue.push(self._batch(3.0), new, 0.0))
    reward, _ = _run(native_ops.dequeue(queue, self._ELEMENTS))
    np.testing.assert_array_equal(reward, [3.0] * 3)

  def test_close_wakes_a_waiting_op_and_fails_later_ones(self):
    queue = batch_queue.BatchQueue(1)
    errors = []

    def wait():
      try:
        native_ops.dequeue(queue, self._ELEMENTS, timeout_s=60.0)
      except tf.errors.FailedPreconditionError as e:
        errors.append(e)

    thread = threading.Thread(target=wait)
    thread.start()
    self.assertTrue(queue.wait_wanted(fixtures.DEADLINE_S))  # It waits.
    queue.close()
    thread.join(fixtures.DEADLINE_S)
    self.assertLen(errors, 1)
    self.assertIn('closed', str(errors[0]))
    self.assertIsNone(queue.push(self._batch(1.0), queue.generation, 0.0))
    with self.assertRaises(tf.errors.FailedPreconditionError):
      native_ops.dequeue(queue, self._ELEMENTS)

  def test_shipped_states_are_decoded_into_their_rows(self):
    memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
        replay_capacity=30, batch_size=6, compress_observations=True, rng=3,
        **_FRAMES)
    for step in range(41):
      memory.add(_frame(0, step), step % 3, 1.0, int(step % 9 == 8), 1.0)
    slots = memory.sample_index_batch(6)
    expected = memory.sample_transition_batch(indices=slots)
    shipped = memory.sample_transition_batch(indices=slots, ship_frames=True)
    elements = memory.get_transition_elements(6)
    names = [e.name for e in elements]
    frames = shipped[names.index('state')]
    self.assertIsInstance(frames, shipped_frames.ShippedFrames)
    arrays = [None if isinstance(a, shipped_frames.ShippedFrames) or a is None
              else a for a in shipped]
    blocks = batch_queue.Blocks(frames)
    # Two parts, rows scattered: stacks 0, 2, 4 and 1, 3, 5.
    parts = [(blocks, np.array([4, 0, 2]), frames.ends[[4, 0, 2]],
              frames.next_ends[[4, 0, 2]]),
             (blocks, np.array([1, 3, 5]), frames.ends[[1, 3, 5]],
              frames.next_ends[[1, 3, 5]])]
    queue = batch_queue.BatchQueue(1)
    self.assertTrue(queue.push(batch_queue.ReadyBatch(arrays, parts),
                               queue.generation, 0.0))
    sharded_memories.assert_batches_equal(
        self, _run(native_ops.dequeue(queue, elements)), expected)
    # A row no part fills is an error, not garbage.
    queue.push(batch_queue.ReadyBatch(arrays, parts[:1]), queue.generation,
               0.0)
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                'lacks the states of row'):
      native_ops.dequeue(queue, elements)
    with self.assertRaisesRegex(ValueError, 'out of range'):
      batch_queue.ReadyBatch(arrays, [(blocks, np.array([6]), frames.ends[:1],
                                       frames.next_ends[:1])])


class ShardedQueueTest(absltest.TestCase):
  """A sharded memory feeding the queue."""

  def setUp(self):
    super().setUp()
    self.memories = []

  def tearDown(self):
    for memory in self.memories:
      memory.close()
    super().tearDown()

  def _new(self, **kwargs):
    memory = sharded_memories.small_memory(
        replay_capacity=60, batch_size=16, rng=5, **kwargs)
    self.memories.append(memory)
    return memory

  def _check_op_batches(self, memory, count):
    """`count` batches of the op equal the memory's for their indices."""
    elements = memory.get_transition_elements()
    names = [e.name for e in elements]
    queue = memory.native_batch_queue()
    graph = tf.Graph()
    with graph.as_default():
      tensors = native_ops.dequeue(queue, elements)
    with tf.compat.v1.Session(graph=graph) as session:
      for _ in range(count):
        batch = session.run(tensors)
        indices = batch[names.index('indices')]
        sharded_memories.assert_batches_equal(
            self, batch, memory.sample_transition_batch(indices=indices))

  def test_raw_and_compressed_batches_equal_the_memorys(self):
    for kwargs in (dict(prefetch=4, batches_per_call=2), dict(prefetch=0),
                   dict(prefetch=2, compress_observations=True)):
      with self.subTest(**kwargs):
        memory = self._new(**_FRAMES, **kwargs)
        _write_frames(memory, 0, 47)  # Shard 0 wraps.
        _write_frames(memory, 1, 22)
        self._check_op_batches(memory, 5)

  def test_the_wrapper_samples_through_the_op_with_staging(self):
    for staging in (False, True):
      with self.subTest(staging=staging):
        memory = self._new(prefetch=2, compress_observations=True,
                           **_FRAMES)
        _write_frames(memory, 0, 47)
        _write_frames(memory, 1, 30)
        graph = tf.Graph()
        with graph.as_default():
          wrapper = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
              observation_shape=_SHAPE, stack_size=4, batch_size=16,
              update_horizon=3, gamma=0.9, observation_dtype=tf.uint8,
              wrapped_memory=memory, use_staging=staging)
          types = {op.type for op in graph.get_operations()}
          self.assertIn('DopaminePerDequeueBatch', types)
          self.assertNotIn('PyFunc', types)
          self.assertNotIn('PyFuncStateless', types)
          tensors = list(wrapper.transition.values())
          set_priority = wrapper.tf_set_priority(
              wrapper.transition['indices'],
              tf.fill([16], 2.0))
          types = {op.type for op in graph.get_operations()}
          self.assertIn('DopaminePerQueuePriorities', types)
          self.assertNotIn('PyFunc', types)
        with tf.compat.v1.Session(graph=graph) as session:
          for _ in range(4):
            batch = session.run(tensors + [set_priority])[:-1]
            indices = batch[list(wrapper.transition).index('indices')]
            expected = memory.sample_transition_batch(indices=indices)
            for name, a, b in zip(wrapper.transition, batch, expected):
              if name != 'sampling_probabilities':  # Set to 2 since.
                np.testing.assert_array_equal(a, b, err_msg=name)
          np.testing.assert_array_equal(
              memory.get_priority(indices), np.full(16, 2.0, np.float32))

  def test_load_drops_batches_of_the_memory_before(self):
    memory = self._new(prefetch=4, **_FRAMES)
    _write_frames(memory, 0, 30, mark=1)
    _write_frames(memory, 1, 30, mark=1)
    directory = fixtures.temp_dir(self)
    memory.save(directory, 1)
    # Every slot overwritten with frames marked 2.
    _write_frames(memory, 0, 36, mark=2)
    _write_frames(memory, 1, 36, mark=2)
    elements = memory.get_transition_elements()
    state = [e.name for e in elements].index('state')
    queue = memory.native_batch_queue()

    def marks():  # The newest frame of each state (never padding).
      return _run(native_ops.dequeue(queue, elements))[state][:, 1, 0, -1]

    np.testing.assert_array_equal(marks(), 2)
    fixtures.wait_until(lambda: len(queue) > 0)  # Batches queued ahead.
    memory.load(directory, 1)
    for _ in range(3):
      np.testing.assert_array_equal(marks(), 1)

  def test_close_drops_queued_batches(self):
    memory = self._new(prefetch=4, **_FRAMES)
    _write_frames(memory, 0, 30)
    elements = memory.get_transition_elements()
    queue = memory.native_batch_queue()
    _run(native_ops.dequeue(queue, elements))
    fixtures.wait_until(lambda: len(queue) > 0)
    memory.close()
    self.assertLen(queue, 0)
    with self.assertRaisesRegex(tf.errors.FailedPreconditionError, 'closed'):
      native_ops.dequeue(queue, elements)
    with self.assertRaisesRegex(RuntimeError, 'closed'):
      memory.native_batch_queue()

  def test_sampling_errors_are_raised_by_the_op_while_they_last(self):
    memory = self._new(prefetch=2, **_FRAMES)
    elements = memory.get_transition_elements()
    queue = memory.native_batch_queue()
    with self.assertRaisesRegex(tf.errors.FailedPreconditionError,
                                'RuntimeError: Cannot sample a batch'):
      native_ops.dequeue(queue, elements)
    _write_frames(memory, 0, 30)
    batch = _run(native_ops.dequeue(queue, elements))
    self.assertLen(batch[0], 16)
    memory.set_priority(np.arange(60), np.zeros(60))
    # Batches queued before the priorities were set may come first.
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                'ValueError: Cannot sample: every priority'):
      for _ in range(8):
        native_ops.dequeue(queue, elements)

  def test_priority_op_queues_checked_updates_in_order(self):
    memory = self._new(prefetch=2, **_FRAMES)
    _write_frames(memory, 0, 30)
    _write_frames(memory, 1, 30)
    queue = memory.native_batch_queue()
    native_ops.queue_priorities(queue, 60, np.array([3, 35, 3]),
                                np.array([5.0, 6.0, 7.0]))
    memory.set_priority(np.array([35]), np.array([8.0]))
    native_ops.queue_priorities(queue, 60, np.array([35], np.int32),
                                np.array([9.0], np.float32))
    # In order: the last update of a slot wins, as one set_priority's.
    np.testing.assert_array_equal(memory.get_priority(np.array([3, 35])),
                                  [7.0, 9.0])
    before = memory.get_priority(np.arange(60))
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                r'indices must be in \[0, 60\)'):
      native_ops.queue_priorities(queue, 60, np.array([1, 60]),
                                  np.array([1.0, 1.0]))
    for bad in (np.inf, -1.0, 1e39):  # 1e39: past float32's range.
      with self.assertRaises(ValueError) as python:
        memory.set_priority(np.array([1, 2]), np.array([1.0, bad]))
      with self.assertRaises(tf.errors.InvalidArgumentError) as native:
        native_ops.queue_priorities(queue, 60, np.array([1, 2]),
                                    np.array([1.0, bad]))
      self.assertIn(str(python.exception), native.exception.message)
    np.testing.assert_array_equal(memory.get_priority(np.arange(60)), before)
    memory.close()
    with self.assertRaisesRegex(tf.errors.FailedPreconditionError, 'closed'):
      native_ops.queue_priorities(queue, 60, np.array([1]), np.array([1.0]))

  def test_feeder_splits_a_draw_into_batches(self):
    elements = [ReplayElement('indices', (4,), np.int32),
                ReplayElement('reward', (4,), np.float32)]
    pieces = [(np.array([0, 3]), (np.array([7, 8], np.int32),
                                  np.array([1.0, 2.0], np.float32))),
              (np.array([1, 2]), (None, np.array([3.0, 4.0], np.float32)))]
    ready = native_feed.ready_batches(elements, 2, 2, np.arange(4), pieces)
    self.assertLen(ready, 2)
    np.testing.assert_array_equal(ready[0][0][0], [0, 1])
    np.testing.assert_array_equal(ready[1][0][1], [4.0, 2.0])
    self.assertEqual(ready[1][1], [])


if __name__ == '__main__':
  absltest.main()
