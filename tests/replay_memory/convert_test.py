"""Tests of `convert`: checkpoints between Dopamine's files and chunks.

Round trips byte for byte into Dopamine's files; what either direction
writes loads into either memory (and Dopamine's own) as the original;
bad arguments and checkpoints are refused, writing nothing.
"""

import os

from absl.testing import absltest
from absl.testing import parameterized
from dopamine.tf.replay_memory import prioritized_replay_buffer as dopamine_prb
import numpy as np

from dopamine_per.file_io import atomic_files
from dopamine_per.replay_memory.checkpoint import chunk_checkpoint
from dopamine_per.replay_memory.checkpoint import convert
from tests.support import fixtures
from tests.support import frame_cases


def _same_memory(test, memory, reference):
  """Equal arrays, add counts and batches at the same indices."""
  for name, array in reference.storage.arrays.items():
    np.testing.assert_array_equal(np.asarray(memory.storage.arrays[name]),
                                  np.asarray(array), name)
  test.assertEqual(int(memory.add_count), int(reference.add_count))
  indices = reference.sample_index_batch(16)
  for got, want in zip(memory.sample_transition_batch(16, indices),
                       reference.sample_transition_batch(16, indices)):
    np.testing.assert_array_equal(got, want)


class ConvertTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.plain, self.compressed = frame_cases.memories(True)
    frame_cases.add((self.plain, self.compressed), 250)
    self.source, self.chunks, self.back = (fixtures.temp_dir(self)
                                           for _ in range(3))

  @parameterized.parameters(True, False)
  def test_a_round_trip_gives_dopamines_files_byte_for_byte(self,
                                                            prioritized):
    memory = (self.plain if prioritized else
              frame_cases.memories(False)[0])
    if not prioritized:
      frame_cases.add((memory,), 250)
    memory.save(self.source, 3)
    convert.convert(self.source, 3, 'chunks', self.chunks)
    self.assertTrue(os.path.exists(os.path.join(
        self.chunks, 'chunk_index_ckpt.3.gz')))
    convert.convert(self.chunks, 3, 'dopamine', self.back)
    self.assertEqual(fixtures.file_contents(self.back),
                     fixtures.file_contents(self.source))

  @parameterized.parameters(True, False)
  def test_converted_chunks_load_into_either_memory(self, compress):
    self.plain.save(self.source, 3)
    convert.convert(self.source, 3, 'chunks', self.chunks)
    plain, compressed = frame_cases.memories(True, rng=7)
    memory = compressed if compress else plain
    memory.load(self.chunks, 3)
    _same_memory(self, memory, self.plain)

  def test_an_incremental_checkpoint_converts_for_dopamine(self):
    self.compressed.save(self.source, 3)
    frame_cases.add((self.plain, self.compressed), 20, seed=3)
    self.compressed.save(self.source, 4)
    convert.convert(self.source, 4, 'dopamine', self.back)
    self.assertFalse(any(name.startswith('chunk_')
                         for name in os.listdir(self.back)))
    plain, _ = frame_cases.memories(True, rng=7)
    plain.load(self.back, 4)
    _same_memory(self, plain, self.plain)
    # Dopamine itself reads it.
    theirs = dopamine_prb.OutOfGraphPrioritizedReplayBuffer(
        observation_shape=frame_cases.SHAPE, stack_size=4,
        replay_capacity=frame_cases.CAPACITY, batch_size=16,
        update_horizon=3)
    theirs.load(self.back, 4)
    np.testing.assert_array_equal(theirs._store['observation'],  # pylint: disable=protected-access
                                  np.asarray(
                                      self.plain.storage.arrays['observation']))
    np.testing.assert_array_equal(
        theirs.sum_tree.nodes[-1], self.plain.sum_tree.nodes[-1])

  def test_a_checkpoint_dopamine_saved_converts_to_chunks(self):
    theirs = dopamine_prb.OutOfGraphPrioritizedReplayBuffer(
        observation_shape=frame_cases.SHAPE, stack_size=4,
        replay_capacity=frame_cases.CAPACITY, batch_size=16,
        update_horizon=3)
    rng = np.random.default_rng(0)
    for step in range(150):
      theirs.add(frame_cases.frame(rng, step), step % 3, float(step),
                 step % 37 == 36, float(rng.random()) + 0.1)
    theirs.save(self.source, 2)
    convert.convert(self.source, 2, 'chunks', self.chunks)
    from_dopamine, _ = frame_cases.memories(True, rng=7)
    from_dopamine.load(self.source, 2)
    _, from_chunks = frame_cases.memories(True, rng=7)
    from_chunks.load(self.chunks, 2)
    _same_memory(self, from_chunks, from_dopamine)
    np.testing.assert_array_equal(from_chunks.sum_tree.nodes[-1],
                                  from_dopamine.sum_tree.nodes[-1])
    # And back, for Dopamine: the same arrays.
    convert.convert(self.chunks, 2, 'dopamine', self.back)
    again = dopamine_prb.OutOfGraphPrioritizedReplayBuffer(
        observation_shape=frame_cases.SHAPE, stack_size=4,
        replay_capacity=frame_cases.CAPACITY, batch_size=16,
        update_horizon=3)
    again.load(self.back, 2)
    for name, array in theirs._store.items():  # pylint: disable=protected-access
      np.testing.assert_array_equal(again._store[name], array, name)  # pylint: disable=protected-access

  def test_the_command_line(self):
    self.plain.save(self.source, 3)
    child = fixtures.run_python(
        ['-m', 'dopamine_per.replay_memory.checkpoint.convert',
         '--checkpoint_dir', self.source, '--iteration', '3', '--to',
         'chunks', '--output_dir', self.chunks], 120)
    self.assertEqual(child.returncode, 0, child.stderr)
    self.assertIn('chunk_pack', child.stdout)
    _, memory = frame_cases.memories(True, rng=7)
    memory.load(self.chunks, 3)
    _same_memory(self, memory, self.plain)

  def test_bad_arguments_are_refused_writing_nothing(self):
    self.plain.save(self.source, 3)
    self.compressed.save(self.chunks, 3)
    cases = [
        ((self.source, 3, 'npz', self.back), ValueError, 'to must be'),
        ((self.source, 3, 'chunks', self.source), ValueError,
         'must not be checkpoint_dir'),
        ((self.source, 3, 'dopamine', self.back), ValueError,
         'already in'),
        ((self.chunks, 3, 'chunks', self.back), ValueError, 'already in'),
        ((self.source, 4, 'chunks', self.back),
         atomic_files.CheckpointNotFoundError, 'No complete checkpoint 4'),
    ]
    for args, error, pattern in cases:
      with self.subTest(args=args[1:3]):
        with self.assertRaisesRegex(error, pattern):
          convert.convert(*args)
        self.assertEqual(os.listdir(self.back), [])

  def test_a_damaged_chunk_is_refused_writing_nothing(self):
    self.compressed.save(self.chunks, 3)
    path = os.path.join(self.chunks, 'chunk_pack_ckpt.3.gz')
    with open(path, 'r+b') as f:
      f.seek(os.path.getsize(path) // 2)
      byte = f.read(1)
      f.seek(-1, os.SEEK_CUR)
      f.write(bytes([byte[0] ^ 0xFF]))
    with self.assertRaises(atomic_files.CheckpointError):
      convert.convert(self.chunks, 3, 'dopamine', self.back)
    self.assertEqual(os.listdir(self.back), [])

  def test_chunks_without_their_layout_are_refused(self):
    self.compressed.save(self.chunks, 3)
    state = os.path.join(self.chunks, 'dopamine_per_state_ckpt.3.gz')
    os.remove(state)
    self.assertTrue(os.path.exists(os.path.join(
        self.chunks, chunk_checkpoint.INDEX_NAME + '_ckpt.3.gz')))
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                'records no Dopamine layout'):
      convert.convert(self.chunks, 3, 'dopamine', self.back)


if __name__ == '__main__':
  absltest.main()
