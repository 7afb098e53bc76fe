# coding=utf-8
"""Tests for fetching ahead and for RainbowAgent over a sharded memory.

`prefetch.BatchPrefetcher` alone (no Ray), then, on one local Ray (2 CPUs,
loopback only, 4-8 s to start) for the module: the sharded memory's
`prefetch`, `WrappedPrioritizedReplayBuffer(wrapped_memory=<sharded>)` with
staging, and RainbowAgent training steps from a sharded memory built by gin.
"""

import threading
import time

from absl.testing import absltest
import gin
import numpy as np
import ray
import tensorflow as tf

from dopamine_per.agents import dqn_agent
from dopamine_per.agents import rainbow_agent
from dopamine_per.discrete_domains import gym_lib
from dopamine_per.distributed import prefetch
from dopamine_per.distributed import replay
from dopamine_per.replay_memory import prioritized_replay_buffer
from tests.support import fixtures
from tests.support import gin_util
from tests.support import ray_util
from tests.support import sharded_memories


def setUpModule():  # pylint: disable=invalid-name
  ray_util.start_local_ray()


def tearDownModule():  # pylint: disable=invalid-name
  ray.shutdown()


def _thread_alive(name):
  return any(thread.name == name and thread.is_alive()
             for thread in threading.enumerate())


class _Counter(object):
  """sample(): call k returns [k] (`per_call` 3: [3k, 3k + 1, 3k + 2]).

  Call `fail_at` raises ValueError.
  """

  def __init__(self, fail_at=None, per_call=1):
    self.calls = 0
    self.fail_at = fail_at
    self.per_call = per_call

  def __call__(self):
    call, self.calls = self.calls, self.calls + 1
    if call == self.fail_at:
      raise ValueError('sample {} failed'.format(call))
    return list(range(call * self.per_call, (call + 1) * self.per_call))


class _SlotWatch(object):
  """Stands in for a prefetcher's slot semaphore; notes when none is free.

  The background thread takes a slot before each `sample()` call, trying for
  at most `prefetch._POLL_S` at a time, and a `get()` frees one. A refusal
  means that the thread found every slot taken: until a `get()`, it cannot
  sample again.
  """

  def __init__(self, prefetcher):
    self._slots = prefetcher._slots  # pylint: disable=protected-access
    self._refused = threading.Event()
    prefetcher._slots = self  # pylint: disable=protected-access

  def acquire(self, *args, **kwargs):
    taken = self._slots.acquire(*args, **kwargs)
    if not taken:
      self._refused.set()
    return taken

  def release(self):
    self._slots.release()

  def wait_for_refusal(self, test_case):
    """Returns once the thread is refused a slot after this call."""
    self._refused.clear()
    test_case.assertTrue(self._refused.wait(fixtures.DEADLINE_S),
                         'the prefetch thread never waited for a slot')


class BatchPrefetcherTest(absltest.TestCase):

  def _new(self, sample, depth):
    prefetcher = prefetch.BatchPrefetcher(sample, depth, name='test_prefetch')
    self.addCleanup(prefetcher.close)
    return prefetcher

  def test_depth_must_be_positive(self):
    with self.assertRaisesRegex(ValueError, 'depth'):
      prefetch.BatchPrefetcher(_Counter(), 0)

  def test_starts_at_first_get_and_keeps_depth_batches_ready(self):
    counter = _Counter()
    prefetcher = self._new(counter, depth=3)
    slots = _SlotWatch(prefetcher)
    # Nothing before the first get: no thread to sample.
    self.assertFalse(_thread_alive('test_prefetch'))
    self.assertEqual(counter.calls, 0)
    self.assertEqual(prefetcher.get(), 0)
    # One batch returned, three waiting, the thread waiting for a slot.
    fixtures.wait_until(lambda: prefetcher.ready == 3)
    slots.wait_for_refusal(self)
    self.assertEqual(counter.calls, 4)
    self.assertEqual([prefetcher.get() for _ in range(5)], [1, 2, 3, 4, 5])
    self.assertGreaterEqual(prefetcher.batches_sampled, 6)

  def test_hands_out_lists_batch_by_batch(self):
    # Depth 1 and 3 batches per list: the list being handed out, one more
    # ready; the thread samples the third list when the second is started.
    counter = _Counter(per_call=3)
    prefetcher = self._new(counter, depth=1)
    slots = _SlotWatch(prefetcher)
    self.assertEqual(prefetcher.get(), 0)
    fixtures.wait_until(lambda: prefetcher.ready == 5)  # 1 and 2; 3, 4 and 5.
    slots.wait_for_refusal(self)
    self.assertEqual(counter.calls, 2)
    self.assertEqual([prefetcher.get() for _ in range(2)], [1, 2])
    self.assertEqual(counter.calls, 2)  # List 2 not started yet.
    self.assertEqual(prefetcher.get(), 3)
    fixtures.wait_until(lambda: counter.calls == 3)
    self.assertEqual([prefetcher.get() for _ in range(5)], [4, 5, 6, 7, 8])
    self.assertEqual(prefetcher.batches_sampled % 3, 0)

  def test_error_reaches_the_caller_then_sampling_resumes(self):
    prefetcher = self._new(_Counter(fail_at=2), depth=2)
    self.assertEqual([prefetcher.get(), prefetcher.get()], [0, 1])
    with self.assertRaisesRegex(ValueError, 'sample 2 failed'):
      prefetcher.get()
    self.assertEqual(prefetcher.get(), 3)  # A new thread.

  def test_discard_drops_earlier_batches(self):
    prefetcher = self._new(_Counter(), depth=2)
    self.assertEqual(prefetcher.get(), 0)
    fixtures.wait_until(lambda: prefetcher.ready == 2)
    prefetcher.discard()
    self.assertGreater(prefetcher.get(), 2)  # Batches 1 and 2 were dropped.

  def test_close_stops_the_thread_and_later_gets_raise(self):
    prefetcher = self._new(_Counter(), depth=1)
    prefetcher.get()
    self.assertTrue(_thread_alive('test_prefetch'))
    prefetcher.close()
    self.assertFalse(_thread_alive('test_prefetch'))
    self.assertEqual(prefetcher.ready, 0)
    with self.assertRaisesRegex(RuntimeError, 'closed'):
      prefetcher.get()
    prefetcher.close()  # Idempotent.

  def test_close_wakes_a_waiting_get(self):
    sampling, release = threading.Event(), threading.Event()

    def sample():
      sampling.set()
      return [release.wait(fixtures.DEADLINE_S)]

    prefetcher = self._new(sample, depth=1)
    raised = []

    def waiting_get():
      try:
        prefetcher.get()
      except RuntimeError as error:
        raised.append(error)

    getter = threading.Thread(target=waiting_get)
    getter.start()
    # The get started the thread, whose sample call blocks: the get waits.
    self.assertTrue(sampling.wait(fixtures.DEADLINE_S))
    closer = threading.Thread(target=prefetcher.close)
    closer.start()
    # Once closed, lets the sample call in progress return (before, the get
    # could take its batch and return).
    fixtures.wait_until(prefetcher._stop.is_set)
    release.set()
    closer.join(fixtures.DEADLINE_S)
    getter.join(fixtures.DEADLINE_S)
    self.assertLen(raised, 1)
    self.assertFalse(_thread_alive('test_prefetch'))


def _write(memory):
  """Two streams (one per shard) of 20 steps, in episodes of 5."""
  for stream in (0, 1):
    sharded_memories.write_episodes(memory.writer(stream), stream, 20, 5)


def _sample(memory, **kwargs):
  """memory.sample_transition_batch(**kwargs) as {element name: array}."""
  return sharded_memories.as_dict(memory,
                                  memory.sample_transition_batch(**kwargs))


class ShardedPrefetchTest(absltest.TestCase):

  def test_batches_come_from_the_prefetcher(self):
    memory = sharded_memories.small_memory(prefetch=2)
    self.addCleanup(memory.close)
    _write(memory)
    prefetcher = memory._prefetcher
    slots = _SlotWatch(prefetcher)
    batch = _sample(memory)
    np.testing.assert_array_equal(batch['state'][:, 1, 0], batch['action'])
    fixtures.wait_until(lambda: prefetcher.ready == 2)
    sampled = prefetcher.batches_sampled  # 3: the one returned, 2 ready.
    self.assertEqual(sampled, 3)
    for _ in range(4):
      memory.sample_transition_batch()
      memory.sample_transition_batch(batch_size=8)  # The default: prefetched.
    fixtures.wait_until(lambda: prefetcher.batches_sampled == sampled + 8)
    # Other sizes and explicit indices are sampled there and then.
    self.assertLen(memory.sample_transition_batch(batch_size=3)[0], 3)
    memory.sample_transition_batch(indices=batch['indices'])
    slots.wait_for_refusal(self)  # Still every slot taken: nothing drawn.
    self.assertEqual(prefetcher.batches_sampled, sampled + 8)

  def test_errors_reach_the_learner_and_close_stops_the_thread(self):
    memory = sharded_memories.small_memory(prefetch=1)
    self.addCleanup(memory.close)
    with self.assertRaisesRegex(RuntimeError, 'no shard holds'):
      memory.sample_transition_batch()  # Empty: raised from the thread.
    _write(memory)
    self.assertLen(memory.sample_transition_batch()[0], 8)  # Recovered.
    self.assertTrue(_thread_alive('sharded_replay_prefetch'))
    memory.close()
    self.assertFalse(_thread_alive('sharded_replay_prefetch'))
    with self.assertRaisesRegex(RuntimeError, 'closed'):
      memory.sample_transition_batch()

  def test_load_discards_the_batches_fetched_before_it(self):
    memory = sharded_memories.small_memory(prefetch=1)
    self.addCleanup(memory.close)
    _write(memory)
    checkpoint_dir = fixtures.temp_dir(self)
    memory.save(checkpoint_dir, 0)  # Both shards hold mass 20.
    shard0 = np.arange(memory.shard_capacity)
    memory.set_priority(shard0, np.zeros(len(shard0)))
    capacity = memory.shard_capacity
    self.assertTrue(np.all(_sample(memory)['indices'] >= capacity))
    # The batch ready is from shard 1 only.
    fixtures.wait_until(lambda: memory._prefetcher.ready == 1)
    memory.load(checkpoint_dir, 0)
    # Stratified over two equal masses (slots 0-19 of each shard): strata
    # 0-2 fall on shard 0's slots 0-14. Stratum 3 may hit slot 19, which
    # the cursor blocks (update_horizon 1), and be redrawn anywhere.
    indices = _sample(memory)['indices']
    np.testing.assert_array_equal(indices[:3] < capacity, True)

  def test_set_priority_does_not_wait_for_a_draw_in_progress(self):
    memory = sharded_memories.small_memory(prefetch=1)
    self.addCleanup(memory.close)
    _write(memory)
    drawing, done = threading.Event(), threading.Event()

    def draw_in_progress():  # Holds the memory's lock, as a draw does.
      with memory._lock:
        drawing.set()
        done.wait(fixtures.DEADLINE_S)

    holder = threading.Thread(target=draw_in_progress)
    holder.start()
    drawing.wait(fixtures.DEADLINE_S)
    started = time.monotonic()
    memory.set_priority(np.array([0, memory.shard_capacity]), [2.0, 3.0])
    self.assertLess(time.monotonic() - started, fixtures.DEADLINE_S / 2)
    done.set()
    holder.join(fixtures.DEADLINE_S)
    np.testing.assert_allclose(
        memory.get_priority(np.array([0, memory.shard_capacity])), [2.0, 3.0])


class WrappedShardedMemoryTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)
    self.memory = sharded_memories.small_memory(prefetch=2)
    self.addCleanup(self.memory.close)
    _write(self.memory)

  def _wrap(self, use_staging):
    wrapped = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
        observation_shape=(2,), stack_size=1, use_staging=use_staging,
        batch_size=8, wrapped_memory=self.memory,
        observation_dtype=np.float32)
    self.assertIs(wrapped.memory, self.memory)
    return wrapped

  def test_staged_batches_match_the_memory_elements(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      wrapped = self._wrap(use_staging=True)
      elements = self.memory.get_transition_elements()
      self.assertEqual(list(wrapped.transition), [e.name for e in elements])
      for _ in range(3):
        batch = sess.run(wrapped.transition)
        for element in elements:
          self.assertEqual(batch[element.name].shape, element.shape)
          self.assertEqual(batch[element.name].dtype, element.type)
        # observation (stream, step): action == step, stream == shard.
        np.testing.assert_array_equal(batch['state'][:, 1, 0],
                                      batch['action'])
        np.testing.assert_array_equal(
            batch['state'][:, 0, 0],
            batch['indices'] // self.memory.shard_capacity)
        np.testing.assert_allclose(batch['sampling_probabilities'], 1.0)

  def test_priority_ops_reach_the_shards_with_global_indices(self):
    capacity = self.memory.shard_capacity
    indices = np.array([0, 3, capacity + 1, capacity + 4], np.int32)
    priorities = np.array([0.5, 2.0, 3.0, 4.5], np.float32)
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      wrapped = self._wrap(use_staging=False)
      indices_ph = tf.compat.v1.placeholder(tf.int32, [None])
      priorities_ph = tf.compat.v1.placeholder(tf.float32, [None])
      set_op = wrapped.tf_set_priority(indices_ph, priorities_ph)
      get_tensor = wrapped.tf_get_priority(indices_ph)
      sess.run(set_op, {indices_ph: indices, priorities_ph: priorities})
      np.testing.assert_allclose(sess.run(get_tensor, {indices_ph: indices}),
                                 priorities)
    handles = self.memory.shard_handles
    np.testing.assert_allclose(
        ray.get(handles[0].get_priority.remote(np.array([0, 3]))), [0.5, 2.0])
    np.testing.assert_allclose(
        ray.get(handles[1].get_priority.remote(np.array([1, 4]))), [3.0, 4.5])


class RainbowFromShardedMemoryTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)
    gin.clear_config()
    self.addCleanup(gin.clear_config)
    # Dopamine's way to hand the agent another memory: gin. The wrapper's
    # batch size must equal the memory's.
    gin.parse_config("""
        WrappedPrioritizedReplayBuffer.batch_size = 8
        WrappedPrioritizedReplayBuffer.wrapped_memory = \\
            @ShardedPrioritizedReplayBuffer()
        ShardedPrioritizedReplayBuffer.num_shards = 2
        ShardedPrioritizedReplayBuffer.replay_capacity = 200
        ShardedPrioritizedReplayBuffer.batch_size = 8
        ShardedPrioritizedReplayBuffer.prefetch = 2
        ShardedPrioritizedReplayBuffer.num_cpus_per_shard = 0.25
        ShardedPrioritizedReplayBuffer.flush_every = 8
        ShardedPrioritizedReplayBuffer.observation_shape = (4, 1)
        ShardedPrioritizedReplayBuffer.stack_size = 1
        ShardedPrioritizedReplayBuffer.update_horizon = 3
        ShardedPrioritizedReplayBuffer.gamma = 0.99
    """)
    gin.bind_parameter('ShardedPrioritizedReplayBuffer.observation_dtype',
                       np.float64)

  def test_training_steps_run_and_set_priorities_on_the_shards(self):
    agent = rainbow_agent.RainbowAgent(
        None, 2, observation_shape=(4, 1), observation_dtype=tf.float64,
        stack_size=1,
        network=lambda *a, **k: gym_lib.CartpoleRainbowNetwork(
            *a, hidden_units=(16,), **k),
        num_atoms=11, update_horizon=3, min_replay_history=20,
        update_period=1, target_update_period=5, use_staging=True,
        epsilon_fn=dqn_agent.identity_epsilon,
        optimizer=tf.compat.v1.train.AdamOptimizer(0.01))
    memory = agent._replay.memory
    self.addCleanup(memory.close)
    self.addCleanup(agent._sess.close)
    self.assertIsInstance(memory, replay.ShardedPrioritizedReplayBuffer)
    rng = np.random.default_rng(0)
    for stream in (0, 1):  # CartPole-shaped episodes, as actors write them.
      writer = memory.writer(stream)
      for step in range(50):
        writer.add(rng.normal(size=(4, 1)), step % 2, 1.0,
                   int(step % 25 == 24), None)
      writer.flush()
    every = np.arange(memory.replay_capacity)
    self.assertEqual(set(memory.get_priority(every)), {0.0, 1.0})
    for _ in range(10):  # The learner's loop: no acting.
      agent._train_step()
    self.assertEqual(agent.training_steps, 10)
    # Through the native queue's op, fed by the fetch-ahead's draws.
    self.assertIn('DopaminePerDequeueBatch',
                  {op.type for op in agent._sess.graph.get_operations()})
    self.assertGreaterEqual(memory._feeder.batches_pushed, 10)
    updated = memory.get_priority(every)
    # Losses replaced the initial priority 1 of the trained transitions.
    self.assertGreater(np.sum((updated != 1.0) & (updated != 0.0)), 8)
    # The agent also acts, storing through stream 0 with the shard's largest
    # priority (it has no sum tree of its own to read it from).
    before = memory.add_count
    agent.begin_episode(rng.normal(size=(4, 1)))
    for _ in range(4):
      agent.step(1.0, rng.normal(size=(4, 1)))
    agent.end_episode(1.0)
    self.assertEqual(memory.add_count, before + 5)


if __name__ == '__main__':
  absltest.main()
