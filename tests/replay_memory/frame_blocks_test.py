"""Tests of compressed frames: `frame_blocks.CompressedFrames` against an
array, and memories with `compress_observations=True` against the same
memories uncompressed (batches, snapshots, resident bytes). Their
checkpoints: frame_checkpoint_test.py."""

import ctypes
import os
import signal
import sys
import time
import warnings
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import gin
import lz4.block
import numpy as np

from dopamine_per.native import extension
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory.memory import frame_blocks
from tests.support import frame_cases



class CompressedFramesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    # 10 slots: blocks of 4, 4 and 2.
    self.frames = frame_blocks.CompressedFrames(10, frame_cases.SHAPE, np.uint8)
    self.expected = np.zeros((10,) + frame_cases.SHAPE, dtype=np.uint8)
    self.rng = np.random.default_rng(0)

  def _write(self, slot, step):
    frame = frame_cases.frame(self.rng, step)
    self.frames[slot] = frame
    self.expected[slot] = frame

  def _check_reads(self):
    np.testing.assert_array_equal(np.asarray(self.frames), self.expected)
    slots = self.rng.integers(-10, 10, (3, 5))
    np.testing.assert_array_equal(self.frames[slots], self.expected[slots])
    np.testing.assert_array_equal(self.frames[3], self.expected[3])
    np.testing.assert_array_equal(self.frames[2:9:3], self.expected[2:9:3])

  def test_reads_equal_an_array_written_alike_over_three_laps(self):
    self._check_reads()  # Nothing written: zeros.
    for step in range(30):
      self._write(step % 10, step)
      self._check_reads()
    self.assertEqual(self.frames.shape, (10,) + frame_cases.SHAPE)
    self.assertLen(self.frames, 10)

  def test_a_block_is_stored_when_its_last_slot_is_written(self):
    for slot in range(6):
      self._write(slot, slot)
    # Block 0 stored, block 1 open (slots 4 and 5 written), block 2 empty.
    self.assertEqual(int(self.frames.open_block[0]), 1)
    self.assertIsNotNone(self.frames.payload(0))
    self.assertIsNone(self.frames.payload(1))
    self.assertIsNone(self.frames.payload(2))
    np.testing.assert_array_equal(self.frames.open_frames[:2],
                                  self.expected[4:6])
    # Stored blocks are LZ4 blocks of the raw frames, found at `addresses`
    # (what native code reads).
    payload = self.frames.payload(0)
    raw = lz4.block.decompress(payload, uncompressed_size=4 * 120)
    self.assertEqual(raw, self.expected[:4].tobytes())
    self.assertEqual(int(self.frames.sizes[0]), len(payload))
    self.assertEqual(ctypes.string_at(int(self.frames.addresses[0]),
                                      len(payload)), payload)
    self.assertEqual(int(self.frames.addresses[1]), 0)
    # The short last block is stored at its last slot, 9.
    for slot in range(6, 10):
      self._write(slot, slot)
    self.assertEqual(int(self.frames.open_block[0]), -1)
    self.assertLen(lz4.block.decompress(self.frames.payload(2),
                                        uncompressed_size=2 * 120), 240)

  def test_rewriting_a_slot_keeps_its_blocks_other_frames(self):
    for slot in range(10):
      self._write(slot, slot)
    self._write(5, 99)  # Opens block 1 again, mid-block.
    self.assertEqual(int(self.frames.open_block[0]), 1)
    self._check_reads()
    self._write(0, 100)  # Stores block 1 (slots 4, 6, 7 as they were).
    self._check_reads()

  def test_nbytes_is_what_it_holds(self):
    empty = self.frames.nbytes
    for slot in range(8):
      self._write(slot, slot)
    stored = [self.frames.payload(b) for b in (0, 1)]
    self.assertEqual(
        self.frames.nbytes - empty,
        sum(len(p) + sys.getsizeof(b'') for p in stored))
    self.assertLess(self.frames.nbytes, self.expected.nbytes + empty)

  def test_from_array(self):
    for slot in range(7):
      self._write(slot, slot)
    copy = frame_blocks.CompressedFrames.from_array(self.expected)
    np.testing.assert_array_equal(np.asarray(copy), self.expected)
    self.assertIsNone(copy.payload(2))  # All zeros: left empty.

  def test_refuses_what_is_not_a_slot(self):
    with self.assertRaisesRegex(IndexError, 'slots'):
      self.frames[np.array([0.5])]  # pylint: disable=pointless-statement
    with self.assertRaisesRegex(IndexError, r'out of range \[0, 10\): 10'):
      self.frames[10]  # pylint: disable=pointless-statement

  def test_without_lz4_the_error_says_what_to_install(self):
    with mock.patch.dict(sys.modules, {'lz4': None, 'lz4.block': None}):
      with self.assertRaisesRegex(ImportError, r'dopamine_per\[compress\]'):
        frame_blocks.CompressedFrames(10, frame_cases.SHAPE, np.uint8)


class BackgroundCompressionTest(absltest.TestCase):
  """`background=True`: blocks stored as literals, compressed on the
  extension's thread (or the adding one's) and swapped in."""

  def setUp(self):
    super().setUp()
    # 40 slots: 10 blocks of 4.
    self.frames = frame_blocks.CompressedFrames(40, frame_cases.SHAPE,
                                                np.uint8, background=True)
    self.expected = np.zeros((40,) + frame_cases.SHAPE, dtype=np.uint8)
    self.rng = np.random.default_rng(0)
    self.literal_size = len(extension.load().BlockCompressor(1).submit(
        0, np.zeros((4,) + frame_cases.SHAPE, np.uint8)))

  def _write(self, slot, step):
    frame = frame_cases.frame(self.rng, step)
    self.frames[slot] = frame
    self.expected[slot] = frame

  def _stored(self):
    return [self.frames.payload(b) for b in range(self.frames.blocks)
            if self.frames.payload(b) is not None]

  def test_reads_equal_an_array_whatever_the_blocks_wait_for(self):
    for step in range(100):
      self._write(step % 40, step)
      slots = self.rng.integers(0, 40, 12)
      np.testing.assert_array_equal(self.frames[slots], self.expected[slots])
    self.frames.settle()
    np.testing.assert_array_equal(np.asarray(self.frames), self.expected)
    # Settled: every stored block compressed, none left as literals.
    stored = self._stored()
    self.assertLen(stored, 10)
    self.assertLess(max(map(len, stored)), self.literal_size / 2)
    for block, payload in enumerate(stored):
      raw = lz4.block.decompress(payload, uncompressed_size=4 * 120)
      self.assertEqual(raw, self.expected[4 * block:4 * block + 4].tobytes())

  def test_a_block_replaced_before_its_compression_keeps_the_new_frames(self):
    for slot in range(4):
      self._write(slot, slot)  # Block 0 queued, its literals stored.
    other = np.full((4,) + frame_cases.SHAPE, 3, np.uint8)
    self.frames.adopt([lz4.block.compress(other, store_size=False)] +
                      [None] * 9)
    self.frames.settle()  # Block 0's compression arrives: not swapped in.
    np.testing.assert_array_equal(self.frames[:4], other)

  def test_nbytes_counts_literals_then_blocks(self):
    empty = self.frames.nbytes
    for slot in range(4):
      self._write(slot, slot)
    self.assertLessEqual(self.frames.nbytes - empty,
                         self.literal_size + sys.getsizeof(b''))
    self.frames.settle()
    self.assertEqual(self.frames.nbytes - empty,
                     len(self.frames.payload(0)) + sys.getsizeof(b''))

  def test_a_forked_child_compresses_on_a_thread_of_its_own(self):
    for step in range(18):
      self._write(step, step)  # Blocks queued at the fork, one open.
    with warnings.catch_warnings():
      # JAX, if another test imported it, warns of any fork: the child
      # runs only this module's code.
      warnings.filterwarnings('ignore', 'os.fork', RuntimeWarning)
      pid = os.fork()
    if pid == 0:  # The child: its stores and reads, then its exit code.
      code = 1
      try:
        for step in range(18, 40):
          self._write(step, step)
        self.frames.settle()
        stored = self._stored()
        if (np.array_equal(np.asarray(self.frames), self.expected) and
            len(stored) == 10 and
            max(map(len, stored[5:])) < self.literal_size / 2):
          code = 0
      finally:
        os._exit(code)  # pylint: disable=protected-access
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
      if time.monotonic() > deadline:
        os.kill(pid, signal.SIGKILL)
        self.fail('the forked child hung')
      time.sleep(0.01)
    self.assertEqual(os.waitstatus_to_exitcode(done[1]), 0)
    self.frames.settle()  # The parent's thread finished its own.
    np.testing.assert_array_equal(np.asarray(self.frames)[:16],
                                  self.expected[:16])


class BlockCompressorTest(absltest.TestCase):
  """The extension's `BlockCompressor` (native/block_compressor.h)."""

  def test_every_block_comes_back_compressed_once(self):
    compressor = extension.load().BlockCompressor(6)
    rng = np.random.default_rng(1)
    blocks = [np.stack([frame_cases.frame(rng, 4 * k + i) for i in range(4)])
              for k in range(20)]
    literals = [compressor.submit(k, block) for k, block in
                enumerate(blocks)]
    for block, literal in zip(blocks, literals):  # Literals: readable now.
      self.assertEqual(lz4.block.decompress(
          literal, uncompressed_size=block.nbytes), block.tobytes())
    while compressor.help():  # This thread takes what is queued.
      pass
    compressor.wait()
    finished = compressor.finished()
    self.assertEqual(sorted(tag for tag, _, _ in finished), list(range(20)))
    for tag, literal, payload in finished:
      self.assertIs(literal, literals[tag])
      self.assertEqual(lz4.block.decompress(
          payload, uncompressed_size=blocks[tag].nbytes),
                       blocks[tag].tobytes())
    self.assertEqual(compressor.finished(), [])
    self.assertEqual(compressor.queued(), 0)

  def test_what_compresses_to_no_less_comes_back_as_none(self):
    compressor = extension.load().BlockCompressor(6)
    noise = np.random.default_rng(2).integers(0, 256, 4096, dtype=np.uint8)
    compressor.submit(5, noise)
    compressor.wait()
    self.assertEqual([(tag, payload) for tag, _, payload in
                      compressor.finished()], [(5, None)])

  def test_refuses_bad_arguments_naming_them(self):
    native = extension.load()
    with self.assertRaisesRegex(ValueError, 'level'):
      native.BlockCompressor(99)
    compressor = native.BlockCompressor(6)
    with self.assertRaisesRegex(ValueError, 'tag'):
      compressor.submit(-1, b'abc')
    with self.assertRaisesRegex(TypeError, 'frames'):
      compressor.submit(0, [1, 2, 3])
    self.assertEqual(compressor.queued(), 0)


class CompressedMemoryTest(parameterized.TestCase):

  @parameterized.product(prioritized=(False, True),
                         kernels=('native', 'numpy'))
  def test_batches_equal_the_uncompressed_memorys(self, prioritized,
                                                  kernels):
    # The native sampler's decoding, and NumPy's reference, of one format.
    plain, compressed = frame_cases.memories(prioritized, kernels)
    for adds in (60, 150, 290):  # Before, at and past wrapping around.
      frame_cases.add((plain, compressed), adds - int(plain.add_count), seed=adds)
      indices = plain.sample_index_batch(16)
      np.testing.assert_array_equal(compressed.sample_index_batch(16),
                                    indices)
      for got, want in zip(
          compressed.sample_transition_batch(16, indices=indices),
          plain.sample_transition_batch(16, indices=indices)):
        np.testing.assert_array_equal(got, want)
      # Drawn alike by equal generators.
      for got, want in zip(compressed.sample_transition_batch(),
                           plain.sample_transition_batch()):
        np.testing.assert_array_equal(got, want)
      np.testing.assert_array_equal(
          compressed.get_observation_stack(indices),
          plain.get_observation_stack(indices))

  def test_a_snapshot_shares_the_blocks_instead_of_keeping_rows(self):
    _, compressed = frame_cases.memories(False)
    frame_cases.add((compressed,), 250)
    before = np.asarray(compressed.storage.arrays['observation'])
    snapshot = compressed.storage.snapshot()
    frame_cases.add((compressed,), 90, seed=3)  # Overwrites 90 of 101 slots.
    self.assertEmpty(snapshot._kept['observation'])  # pylint: disable=protected-access
    self.assertGreater(snapshot.kept_rows, 0)  # Rows of the other arrays.
    np.testing.assert_array_equal(
        np.concatenate(list(snapshot.chunks('observation', 1000))), before)
    snapshot.release()

  def test_gin_turns_it_on(self):
    self.addCleanup(gin.clear_config)
    gin.bind_parameter(
        'dopamine_per.replay_memory.prioritized_replay_buffer.'
        'WrappedPrioritizedReplayBuffer.compress_observations', True)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with tf.Graph().as_default():
      wrapped = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
          observation_shape=frame_cases.SHAPE, stack_size=4, replay_capacity=101)
    self.assertIsInstance(wrapped.memory.storage.arrays['observation'],
                          frame_blocks.CompressedFrames)

  def test_resident_bytes_shrink(self):
    plain, compressed = frame_cases.memories(True, replay_capacity=4000)
    frame_cases.add((plain, compressed), 4000)
    self.assertLess(compressed.nbytes, plain.nbytes / 3)

  def test_the_native_sampler_reads_it(self):
    plain, compressed = frame_cases.memories(True)
    frame_cases.add((plain, compressed), 290)
    compressed.sample_transition_batch()
    self.assertIsNotNone(compressed._sampler)  # pylint: disable=protected-access
    # A block read after the memory wrapped around, and the open block.
    open_block = int(compressed.storage.arrays['observation'].open_block[0])
    self.assertGreaterEqual(open_block, 0)
    valid = [i for i in range(101) if plain.is_valid_transition(i)]
    # Transitions whose states (or next states) read the open block.
    reading_open = [i for i in valid
                    if abs(i - (4 * open_block + 1.5)) <= 5]
    self.assertNotEmpty(reading_open)
    indices = np.array(reading_open + valid[:3] + valid[-3:], np.int32)
    for got, want in zip(
        compressed.sample_transition_batch(len(indices), indices),
        plain.sample_transition_batch(len(indices), indices)):
      np.testing.assert_array_equal(got, want)

  def test_graph_mode_samples_it_through_the_native_op(self):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    graph = tf.Graph()
    with graph.as_default():
      wrapped = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
          observation_shape=frame_cases.SHAPE, stack_size=4, replay_capacity=101,
          batch_size=8, update_horizon=3, compress_observations=True)
      self.assertIsInstance(wrapped.memory.storage.arrays['observation'],
                            frame_blocks.CompressedFrames)
      op_types = {op.type for op in graph.get_operations()}
      self.assertIn('DopaminePerSampleTransitions', op_types)
      self.assertNotIn('PyFunc', op_types)
      frame_cases.add((wrapped.memory,), 120)
      with tf.compat.v1.Session(graph=graph) as session:
        state, indices = session.run([wrapped.states, wrapped.indices])
        np.testing.assert_array_equal(
            state, wrapped.memory.get_observation_stack(indices))
        # A block that does not decode fails the op, not the process.
        frames = wrapped.memory.storage.arrays['observation']
        for block in range(frames.blocks):
          if frames.payload(block) is not None:
            frames._set_payload(block, b'\x00' * 5)  # pylint: disable=protected-access
        with self.assertRaisesRegex(tf.errors.DataLossError, 'not decode'):
          session.run(wrapped.states)

  def test_staged_batches_decoded_later_equal_the_uncompressed_memorys(
      self):
    # With staging, the compressed states are decoded after the batch is
    # staged (native/deferred_states.h): in the background or by the op
    # awaiting them. Runs that add between them (a block closing, the
    # cursor moving past sampled slots) still give the batches sampled.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    plain, compressed = frame_cases.memories(True)
    frame_cases.add((plain, compressed), 150)
    runs = {}
    for name, memory in (('plain', plain), ('compressed', compressed)):
      graph = tf.Graph()
      with graph.as_default():
        wrapped = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
            observation_shape=frame_cases.SHAPE, stack_size=4,
            replay_capacity=frame_cases.CAPACITY, batch_size=16,
            update_horizon=3, use_staging=True, wrapped_memory=memory)
        op_types = {op.type for op in graph.get_operations()}
        self.assertIn('DopaminePerAwaitStates', op_types)
        update = wrapped.tf_set_priority(
            wrapped.indices, tf.cast(wrapped.indices % 7, tf.float32) + 1.0)
        runs[name] = []
        with tf.compat.v1.Session(graph=graph) as session:
          for step in range(12):
            batch, _ = session.run([wrapped.transition, update])
            runs[name].append(batch)
            frame_cases.add((memory,), 3, seed=step)
    for plain_batch, compressed_batch in zip(runs['plain'],
                                             runs['compressed']):
      for key, want in plain_batch.items():
        np.testing.assert_array_equal(compressed_batch[key], want, key)

  def test_a_corrupt_block_fails_the_run_that_awaits_it(self):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    graph = tf.Graph()
    with graph.as_default():
      wrapped = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
          observation_shape=frame_cases.SHAPE, stack_size=4,
          replay_capacity=101, batch_size=8, update_horizon=3,
          use_staging=True, compress_observations=True)
      frame_cases.add((wrapped.memory,), 120)
      with tf.compat.v1.Session(graph=graph) as session:
        # Stages a batch of sound blocks (a run reading only the states
        # stages nothing).
        session.run([wrapped.states, wrapped.indices])
        frames = wrapped.memory.storage.arrays['observation']
        for block in range(frames.blocks):
          if frames.payload(block) is not None:
            frames._set_payload(block, b'\x00' * 5)  # pylint: disable=protected-access
        # The staged batch was copied whole: it is still read; the one
        # staged now from the corrupt blocks fails the run taking it.
        state, indices = session.run([wrapped.states, wrapped.indices])
        self.assertEqual(state.shape, (8,) + frame_cases.SHAPE + (4,))
        with self.assertRaisesRegex(tf.errors.DataLossError, 'not decode'):
          session.run(wrapped.states)

  def test_a_corrupt_block_is_refused_out_of_the_graph(self):
    _, compressed = frame_cases.memories(False)
    frame_cases.add((compressed,), 150)
    frames = compressed.storage.arrays['observation']
    compressed.sample_transition_batch()
    for block in range(frames.blocks):
      payload = frames.payload(block)
      if payload is not None:  # One byte short: the last literal is lost.
        frames._set_payload(block, payload[:-1])  # pylint: disable=protected-access
    with self.assertRaisesRegex(ValueError, 'does not decode'):
      compressed.sample_transition_batch()

if __name__ == '__main__':
  absltest.main()
