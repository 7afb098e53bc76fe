# coding=utf-8
"""Sharded memories whose shards store compressed frames (issue 33, item 4).

On a local Ray (loopback only, 2 CPUs), started once for the module.
"""

from absl.testing import absltest
import gin
import numpy as np
import ray

from dopamine_per.distributed import frame_shipping
from tests.support import fixtures
from tests.support import ray_util
from tests.support import sharded_memories

# sharded_memories' frame memories: 2 shards of 30 slots (7 blocks of 4
# frames, the last one short).
_SHAPE = sharded_memories.FRAME_SHAPE
_CAPACITY = 60
_ARGS = sharded_memories.FRAME_ARGS


def setUpModule():  # pylint: disable=invalid-name
  ray_util.start_local_ray()


def tearDownModule():  # pylint: disable=invalid-name
  ray.shutdown()


def _frame(stream: int, step: int) -> np.ndarray:
  """A frame unlike its neighbours': its stream, step and a gradient."""
  return sharded_memories.stream_frame(_SHAPE, stream, step)


def _write(memories, stream: int, steps: int) -> None:
  """The same `steps` transitions through stream `stream` of each memory:
  episodes of 9 steps, the last of each terminal, priorities varied."""
  writers = [memory.writer(stream) for memory in memories]
  for step in range(steps):
    values = (_frame(stream, step), step % 3, float(step % 5) - 1.0,
              int(step % 9 == 8), 1.0 + step % 4)
    for writer in writers:
      writer.add(*values)
  for writer in writers:
    writer.flush()


def _stored_blocks(memory):
  return ray.get([handle.stored_frame_blocks.remote()
                  for handle in memory.shard_handles],
                 timeout=fixtures.DEADLINE_S)


class CompressedShardsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.memories = []

  def tearDown(self):
    for memory in self.memories:
      memory.close()
    gin.clear_config()
    super().tearDown()

  def _new(self, **kwargs):
    arguments = dict(_ARGS)
    arguments.update(kwargs)
    memory = sharded_memories.small_memory(
        replay_capacity=_CAPACITY, batch_size=16, **arguments)
    self.memories.append(memory)
    return memory

  def _filled_pair(self, compressed):
    """(uncompressed, `compressed`) sharded memories holding the same
    transitions: more than a shard's capacity on stream 0 (it wrapped),
    fewer on stream 1."""
    plain = self._new(rng=5)
    _write([plain, compressed], 0, 47)
    _write([plain, compressed], 1, 22)
    return plain, compressed

  def test_memory_kwargs_compress_every_shard_and_batches_match(self):
    plain, compressed = self._filled_pair(
        self._new(rng=5, compress_observations=True))
    self.assertEqual(_stored_blocks(plain), [None, None])
    blocks = _stored_blocks(compressed)
    self.assertTrue(all(count and count >= 5 for count in blocks), blocks)
    indices = plain.sample_index_batch(64)
    self.assertGreater(len(np.unique(indices // 30)), 1)  # Both shards.
    sharded_memories.assert_batches_equal(
        self, compressed.sample_transition_batch(indices=indices),
        plain.sample_transition_batch(indices=indices))
    # In any order: a shard's rows of the batch scattered.
    shuffled = np.random.default_rng(0).permutation(indices)
    sharded_memories.assert_batches_equal(
        self, compressed.sample_transition_batch(indices=shuffled),
        plain.sample_transition_batch(indices=shuffled))
    # The shards ship their frames compressed: the blocks the stacks read.
    slots = indices[indices < 30]
    reply = ray.get(compressed.shard_handles[0].gather.remote(slots),
                    timeout=fixtures.DEADLINE_S)
    self.assertIsInstance(reply[0], frame_shipping.ShippedFrames)
    self.assertLess(reply[0].nbytes, 2 * plain.sample_transition_batch(
        indices=slots)[0].nbytes)
    # Sampled batches decode as the uncompressed memory's for their
    # indices.
    batch = sharded_memories.as_dict(
        compressed, compressed.sample_transition_batch())
    self.assertTrue(batch['state'].any())
    sharded_memories.assert_batches_equal(
        self, plain.sample_transition_batch(indices=batch['indices']),
        compressed.sample_transition_batch(indices=batch['indices']))

  def test_gin_binding_compresses_the_shards(self):
    gin.parse_config(
        'ShardedPrioritizedReplayBuffer.compress_observations = True')
    memory = self._new(rng=5)
    _write([memory], 0, 20)
    self.assertEqual(_stored_blocks(memory)[1], 0)  # Nothing written yet.
    self.assertGreaterEqual(_stored_blocks(memory)[0], 4)

  def test_checkpoint_round_trip_keeps_the_blocks(self):
    plain, compressed = self._filled_pair(
        self._new(rng=5, compress_observations=True))
    directory = fixtures.temp_dir(self)
    compressed.save(directory, 4)
    restored = self._new(rng=9, compress_observations=True)
    restored.load(directory, 4)
    self.assertEqual(_stored_blocks(restored), _stored_blocks(compressed))
    self.assertEqual(restored.shard_add_counts(),
                     compressed.shard_add_counts())
    everything = np.arange(_CAPACITY)
    np.testing.assert_array_equal(restored.get_priority(everything),
                                  plain.get_priority(everything))
    indices = plain.sample_index_batch(48)
    sharded_memories.assert_batches_equal(
        self, restored.sample_transition_batch(indices=indices),
        plain.sample_transition_batch(indices=indices))
    # Adds go on after the load, in the restored blocks (through a new
    # stream: unfinished episodes are not saved).
    _write([plain, restored], 3, 12)
    indices = plain.sample_index_batch(48)
    sharded_memories.assert_batches_equal(
        self, restored.sample_transition_batch(indices=indices),
        plain.sample_transition_batch(indices=indices))


if __name__ == '__main__':
  absltest.main()
