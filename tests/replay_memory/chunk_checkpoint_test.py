"""Tests of chunked checkpoints (`chunk_checkpoint`): the frames' blocks
saved as they are, loaded by either memory, incremental saves sharing
packs, pruning by reference, bounded and checked reads."""

import gzip
import hashlib
import io
import os
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import gin
import numpy as np
import tensorflow as tf
import zstandard

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.replay_memory.checkpoint import chunk_checkpoint
from dopamine_per.replay_memory.memory import frame_blocks
from dopamine_per.replay_memory import prioritized_replay_buffer
from tests.support import fixtures
from tests.support import frame_cases
from tests.support import graph_util

_CHUNK_FILES = [gzip_files.checkpoint_filename('', name, 3)
                for name, _ in chunk_checkpoint.FILES]
_STATE = 'dopamine_per_state_ckpt.3.gz'


def _same_batches(test, memory, reference):
  """`memory` samples what `reference` samples at the same indices."""
  indices = reference.sample_index_batch(16)
  for got, want in zip(memory.sample_transition_batch(16, indices),
                       reference.sample_transition_batch(16, indices)):
    np.testing.assert_array_equal(got, want)
  test.assertEqual(int(memory.add_count), int(reference.add_count))


def _frames(memory):
  return np.asarray(memory.storage.arrays['observation'])


class ChunkCheckpointTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.plain, self.compressed = frame_cases.memories(True)
    frame_cases.add((self.plain, self.compressed), 250)
    # The newest block is open (250 adds and paddings: not a multiple
    # of 4 past the wrap).
    self.assertGreaterEqual(
        int(self.compressed.storage.arrays['observation'].open_block[0]), 0)
    self.plain_dir = fixtures.temp_dir(self)
    self.directory = fixtures.temp_dir(self)
    self.plain.save(self.plain_dir, 3)
    self.compressed.save(self.directory, 3)

  def test_two_files_replace_the_arrays_and_the_sum_tree(self):
    plain = fixtures.file_contents(self.plain_dir)
    compressed = fixtures.file_contents(self.directory)
    replaced = {name for name in plain
                if name.startswith('$store$_') or name.startswith('sum_tree')}
    self.assertLen(replaced, 5)
    self.assertEqual(sorted(compressed),
                     sorted((set(plain) - replaced) | set(_CHUNK_FILES)))
    for name in set(plain) & set(compressed) - {_STATE}:
      self.assertEqual(compressed[name], plain[name], name)

  def test_smaller_than_dopamines_files(self):
    # Gzip does well on these plain synthetic frames, and tables cost more
    # than a tiny memory saves: the real sizes are the benchmark's.
    plain, compressed = frame_cases.memories(True, replay_capacity=4000)
    frame_cases.add((plain, compressed), 4000)
    plain.save(self.plain_dir, 0)
    compressed.save(self.directory, 0)
    sizes = {name: os.path.getsize(os.path.join(directory, name))
             for directory in (self.plain_dir, self.directory)
             for name in os.listdir(directory) if name.endswith('.0.gz')}
    self.assertLess(
        sum(sizes[gzip_files.checkpoint_filename('', name, 0)]
            for name, _ in chunk_checkpoint.FILES),
        sum(size for name, size in sizes.items()
            if name.startswith(('$store$_', 'sum_tree'))))

  @parameterized.parameters(True, False)
  def test_either_memory_loads_either_format(self, compress):
    for directory in (self.directory, self.plain_dir):
      reference, _ = frame_cases.memories(True, rng=7)
      reference.load(self.plain_dir, 3)
      plain, compressed = frame_cases.memories(True, rng=7)
      memory = compressed if compress else plain
      memory.load(directory, 3)
      self.assertEqual(
          isinstance(memory.storage.arrays['observation'],
                     frame_blocks.CompressedFrames), compress)
      np.testing.assert_array_equal(_frames(memory), _frames(self.plain))
      _same_batches(self, memory, reference)
      frame_cases.add((memory, reference), 40, seed=5)
      _same_batches(self, memory, reference)

  def test_blocks_are_adopted_as_saved(self):
    _, loaded = frame_cases.memories(True, rng=7)
    loaded.load(self.directory, 3)
    frames = self.compressed.storage.arrays['observation']
    adopted = loaded.storage.arrays['observation']
    self.assertEqual(int(adopted.open_block[0]), -1)
    open_block = int(frames.open_block[0])
    for block in range(frames.blocks):
      if block != open_block:
        self.assertEqual(adopted.payload(block), frames.payload(block))
    self.assertIsNotNone(adopted.payload(open_block))

  def test_a_background_save_writes_what_a_save_then_would(self):
    directory = fixtures.temp_dir(self)
    with self.compressed._lock:  # pylint: disable=protected-access
      saving = self.compressed.save(directory, 3, background=True)
      frame_cases.add((self.compressed,), 90, seed=2)
    saving.result(timeout=60)
    self.assertEqual(fixtures.file_contents(directory),
                     fixtures.file_contents(self.directory))

  def test_saving_a_number_again_in_the_other_format_replaces_it(self):
    # Checkpoint 3 in chunks (setUp), then in Dopamine's files, and back:
    # each time the newest loads and no file of the other format is left.
    for memory, other in ((self.plain, self.compressed),
                          (self.compressed, self.plain)):
      frame_cases.add((self.plain, self.compressed), 20, seed=6)
      memory.save(self.directory, 3)
      names = set(os.listdir(self.directory))
      self.assertEqual(
          any(name.startswith('chunk_') for name in names),
          memory is self.compressed, names)
      self.assertEqual(any(name.startswith('$store$') for name in names),
                       memory is self.plain, names)
      _, loaded = frame_cases.memories(True, rng=7)
      loaded.load(self.directory, 3)
      _same_batches(self, loaded, other)

  def test_a_stale_checkpoint_of_the_other_format_is_pruned(self):
    _, compressed = frame_cases.memories(True, checkpoint_duration=1)
    frame_cases.add((compressed,), 20)
    compressed.save(self.plain_dir, 4)  # Checkpoint 3 is Dopamine's files.
    self.assertEqual(
        sorted(name for name in os.listdir(self.plain_dir)
               if name.endswith('_ckpt.3.gz')), [])

  def test_without_zstandard_the_error_says_what_to_install(self):
    with mock.patch.dict(sys.modules, {'zstandard': None}):
      with self.assertRaisesRegex(ImportError, r'dopamine_per\[compress\]'):
        self.compressed.save(fixtures.temp_dir(self), 5)




def _index(directory, iteration):
  with gzip.open(gzip_files.checkpoint_filename(
      directory, chunk_checkpoint.INDEX_NAME, iteration)) as f:
    return np.load(io.BytesIO(f.read()))


def _packs_named(directory, iteration):
  """The iterations of the packs checkpoint `iteration`'s index names."""
  index = _index(directory, iteration)
  return sorted(index[5:5 + 6 * int(index[2])].reshape(-1, 6)[:, 0].tolist())


def _pack_bytes(directory, iteration):
  return os.path.getsize(gzip_files.checkpoint_filename(
      directory, chunk_checkpoint.PACK_NAME, iteration))


def _packs(directory):
  return sorted(int(name.split('.')[1]) for name in os.listdir(directory)
                if name.startswith(chunk_checkpoint.PACK_NAME))


class IncrementalTest(absltest.TestCase):
  """A save names the chunks already on disk; pruning keeps what is named.

  Small chunks (8 blocks, 256 bytes) over a memory of 1,001 slots, so a
  few adds touch a few chunks of many.
  """

  def setUp(self):
    super().setUp()
    self.enter_context(mock.patch.object(chunk_checkpoint, 'GROUP_BLOCKS', 8))
    self.enter_context(
        mock.patch.object(chunk_checkpoint, 'ARRAY_CHUNK_BYTES', 256))
    self.plain, self.memory = frame_cases.memories(
        True, replay_capacity=1001, checkpoint_duration=2)
    frame_cases.add((self.plain, self.memory), 1100)
    self.directory = fixtures.temp_dir(self)
    self.memory.save(self.directory, 0)

  def _advance(self, count, seed):
    frame_cases.add((self.plain, self.memory), count, seed=seed)

  def _assert_loads(self, iteration):
    _, loaded = frame_cases.memories(True, replay_capacity=1001, rng=7)
    loaded.load(self.directory, iteration)
    np.testing.assert_array_equal(_frames(loaded), _frames(self.plain))
    for name in ('action', 'reward', 'terminal'):
      np.testing.assert_array_equal(loaded.storage.arrays[name],
                                    self.plain.storage.arrays[name])
    np.testing.assert_array_equal(loaded.sum_tree.nodes[-1],
                                  self.memory.sum_tree.nodes[-1])
    return loaded

  def test_a_save_after_a_few_adds_writes_a_few_chunks(self):
    self._advance(20, seed=1)
    self.memory.save(self.directory, 1)
    self.assertEqual(_packs_named(self.directory, 1), [0, 1])
    # 20 adds of 1,001 slots: about 2% of the frames, a sum tree leaf
    # chunk or two; the bound leaves room for the chunks' edges.
    self.assertLess(_pack_bytes(self.directory, 1),
                    0.2 * _pack_bytes(self.directory, 0))
    loaded = self._assert_loads(1)
    _same_batches(self, loaded, self.memory)

  def test_a_background_save_is_incremental_too(self):
    self._advance(20, seed=1)
    saved = int(self.memory.add_count)
    with self.memory._lock:  # pylint: disable=protected-access
      saving = self.memory.save(self.directory, 1, background=True)
      self._advance(30, seed=2)  # Not in the checkpoint.
    saving.result(timeout=60)
    self.assertEqual(_packs_named(self.directory, 1), [0, 1])
    _, loaded = frame_cases.memories(True, replay_capacity=1001, rng=7)
    loaded.load(self.directory, 1)
    self.assertEqual(int(loaded.add_count), saved)
    self.assertGreater(int(self.memory.add_count), saved)

  def test_a_pack_is_kept_while_a_retained_checkpoint_names_it(self):
    for iteration in range(1, 4):
      self._advance(20, seed=iteration)
      self.memory.save(self.directory, iteration)
    # checkpoint_duration=2: checkpoints 0 and 1 are pruned, their packs
    # kept as long as 2 or 3 names them.
    self.assertFalse(os.path.exists(os.path.join(
        self.directory, 'dopamine_per_state_ckpt.0.gz')))
    self.assertIn(0, _packs_named(self.directory, 3))
    self.assertEqual(_packs(self.directory),
                     sorted(set(_packs_named(self.directory, 2) +
                                _packs_named(self.directory, 3))))
    self._assert_loads(3)

  def test_a_pack_no_checkpoint_names_is_deleted(self):
    # Enough adds to replace everything: checkpoint 0's pack is named by
    # no retained checkpoint once checkpoint 0 is pruned.
    for iteration in range(1, 4):
      self._advance(1100, seed=iteration)
      self.memory.save(self.directory, iteration)
    self.assertEqual(_packs(self.directory), [2, 3])
    self._assert_loads(3)

  def test_an_old_pack_kept_for_little_is_written_again(self):
    # After 600 of 1,001 slots are replaced, less than half of pack 0's
    # bytes would be named: its remaining chunks are rewritten.
    self._advance(600, seed=1)
    self.memory.save(self.directory, 1)
    self.assertEqual(_packs_named(self.directory, 1), [1])
    self._assert_loads(1)

  def test_a_changed_older_pack_refuses_the_newer_checkpoint(self):
    self._advance(20, seed=1)
    self.memory.save(self.directory, 1)
    path = gzip_files.checkpoint_filename(self.directory,
                                          chunk_checkpoint.PACK_NAME, 0)
    packs = _read_pack(path)
    damaged = packs.copy()
    damaged[len(damaged) // 2] ^= 0xFF
    gzip_files.save_npy_gz(path, damaged)
    _, memory = frame_cases.memories(True, replay_capacity=1001, rng=7)
    with self.assertRaises(atomic_files.CheckpointError):
      memory.load(self.directory, 1)
    self.assertEqual(int(memory.add_count), 0)

  def test_a_missing_older_pack_is_reported_missing(self):
    self._advance(20, seed=1)
    self.memory.save(self.directory, 1)
    os.remove(gzip_files.checkpoint_filename(
        self.directory, chunk_checkpoint.PACK_NAME, 0))
    _, memory = frame_cases.memories(True, replay_capacity=1001, rng=7)
    with self.assertRaises((atomic_files.CheckpointError,
                            FileNotFoundError)):
      memory.load(self.directory, 1)

  def test_saving_again_a_pack_a_later_checkpoint_names_is_refused(self):
    for iteration, adds in ((1, 100), (2, 5)):
      self._advance(adds, seed=iteration)
      self.memory.save(self.directory, iteration)
    self.assertIn(1, _packs_named(self.directory, 2))
    before = fixtures.file_contents(self.directory)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                'checkpoint 2 holds chunks of its pack'):
      self.memory.save(self.directory, 1)
    self.assertEqual(fixtures.file_contents(self.directory), before)
    self._assert_loads(2)
    self.memory.save(self.directory, 3)  # Another number saves.
    self._assert_loads(3)

  def test_an_unreadable_previous_checkpoint_means_a_full_save(self):
    os.remove(os.path.join(self.directory, 'chunk_index_ckpt.0.gz'))
    self._advance(20, seed=1)
    with self.assertLogs(level='WARNING') as logs:
      self.memory.save(self.directory, 1)
    self.assertIn('in full', ''.join(logs.output))
    self.assertEqual(_packs_named(self.directory, 1), [1])
    self._assert_loads(1)


class CheckpointFormatTest(parameterized.TestCase):
  """`checkpoint_format`: either memory saves either format."""

  def test_a_compressed_memory_saves_dopamines_files(self):
    plain, _ = frame_cases.memories(True)
    _, compressed = frame_cases.memories(True, checkpoint_format='dopamine')
    frame_cases.add((plain, compressed), 250)
    self.assertEqual(compressed.checkpoint_format, 'dopamine')
    plain_dir, directory = fixtures.temp_dir(self), fixtures.temp_dir(self)
    plain.save(plain_dir, 3)
    compressed.save(directory, 3)
    # Byte for byte the uncompressed memory's: Dopamine reads them.
    self.assertEqual(fixtures.file_contents(directory),
                     fixtures.file_contents(plain_dir))

  def test_an_uncompressed_memory_saves_chunks_incrementally(self):
    self.enter_context(
        mock.patch.object(chunk_checkpoint, 'ARRAY_CHUNK_BYTES', 256))
    reference, _ = frame_cases.memories(True, replay_capacity=1001)
    plain, _ = frame_cases.memories(True, replay_capacity=1001,
                                    checkpoint_format='chunks')
    frame_cases.add((reference, plain), 1100)
    directory = fixtures.temp_dir(self)
    plain.save(directory, 0)
    frame_cases.add((reference, plain), 20, seed=1)
    plain.save(directory, 1)
    self.assertEqual(_packs_named(directory, 1), [0, 1])
    self.assertLess(_pack_bytes(directory, 1), 0.2 * _pack_bytes(directory, 0))
    for compress in (False, True):
      memory = frame_cases.memories(True, replay_capacity=1001,
                                    rng=7)[int(compress)]
      memory.load(directory, 1)
      np.testing.assert_array_equal(_frames(memory), _frames(reference))
      _same_batches(self, memory, reference)

  @parameterized.parameters('npz', 'Chunks', '', 3)
  def test_another_format_is_refused(self, value):
    with self.assertRaisesRegex(ValueError,
                                'checkpoint_format must be one of .*{}'.format(
                                    repr(value))):
      frame_cases.memories(True, checkpoint_format=value)

  def test_the_wrapped_memory_takes_it_from_gin(self):
    # The module named: Dopamine's class of the same name may be registered.
    gin.parse_config(
        'dopamine_per.replay_memory.prioritized_replay_buffer.'
        "WrappedPrioritizedReplayBuffer.checkpoint_format = 'chunks'")
    self.addCleanup(gin.clear_config)
    with tf.Graph().as_default():
      replay = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
          observation_shape=frame_cases.SHAPE, stack_size=4,
          replay_capacity=frame_cases.CAPACITY, batch_size=16)
    self.assertEqual(replay.memory.checkpoint_format, 'chunks')


class ResumeTest(graph_util.GraphTestCase):
  """A compressed memory resumed from an incremental checkpoint samples
  what the uninterrupted one samples, out of the graph and in it."""

  def test_out_of_graph(self):
    _, memory = frame_cases.memories(True, rng=11)
    frame_cases.add((memory,), 250)
    directory = fixtures.temp_dir(self)
    memory.save(directory, 0)
    frame_cases.add((memory,), 30, seed=1)
    memory.sample_transition_batch()
    memory.save(directory, 1)

    def run(replay):
      batches = []
      for _ in range(4):
        batch = replay.sample_transition_batch()
        replay.set_priority(batch[7], np.arange(1.0, 17.0))
        batches.append(batch)
      return batches

    uninterrupted = run(memory)
    _, resumed = frame_cases.memories(True, rng=99)
    resumed.load(directory, 1)
    for got, want in zip(run(resumed), uninterrupted):
      for got_array, want_array in zip(got, want):
        np.testing.assert_array_equal(got_array, want_array)

  def test_in_the_graph(self):
    def replay(seed):
      return prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
          observation_shape=frame_cases.SHAPE, stack_size=4,
          replay_capacity=frame_cases.CAPACITY, batch_size=16,
          update_horizon=3, compress_observations=True,
          rng=np.random.default_rng(seed))

    first = replay(5)
    frame_cases.add((first.memory,), 250)
    fetches = [first.indices, first.states]
    for _ in range(3):
      self.session.run(fetches)
    directory = fixtures.temp_dir(self)
    first.save(directory, 0)
    uninterrupted = [self.session.run(fetches) for _ in range(4)]
    resumed = replay(6)  # Its ops built before the load.
    resumed.load(directory, 0)
    for (indices, states), (want_indices, want_states) in zip(
        [self.session.run([resumed.indices, resumed.states])
         for _ in range(4)], uninterrupted):
      np.testing.assert_array_equal(indices, want_indices)
      np.testing.assert_array_equal(states, want_states)


def _read_pack(path):
  with gzip.open(path) as f:
    return np.load(io.BytesIO(f.read()))


def _rewrite(directory, index=None, pack=None):
  """Rewrites checkpoint 3's chunk files (and drops its state file, whose
  digests would refuse them first: the files' own checks are under test)."""
  os.remove(os.path.join(directory, _STATE))
  if index is not None:
    gzip_files.save_npy_gz(os.path.join(directory, _CHUNK_FILES[0]), index)
  if pack is not None:
    gzip_files.save_npy_gz(os.path.join(directory, _CHUNK_FILES[1]),
                           np.frombuffer(pack, np.uint8))


class CraftedFilesTest(parameterized.TestCase):
  """Each crafted file is refused with CheckpointError; nothing changes."""

  def setUp(self):
    super().setUp()
    _, self.saved = frame_cases.memories(False)
    frame_cases.add((self.saved,), 150)
    self.directory = fixtures.temp_dir(self)
    self.saved.save(self.directory, 3)
    self.index = _index(self.directory, 3)
    self.pack = _read_pack(os.path.join(self.directory,
                                        _CHUNK_FILES[1])).tobytes()
    packs, parts = int(self.index[2]), int(self.index[3])
    self.parts = 5 + 6 * packs
    self.chunks = self.parts + 3 * parts
    self.assertEqual((packs, parts), (1, 4))  # Frames, action, reward, terminal.

  def _refused(self, pattern, **rewrite):
    _rewrite(self.directory, **rewrite)
    _, memory = frame_cases.memories(False, rng=7)
    frame_cases.add((memory,), 30, seed=4)
    before = _frames(memory)
    with self.assertRaisesRegex(atomic_files.CheckpointError, pattern):
      memory.load(self.directory, 3)
    np.testing.assert_array_equal(_frames(memory), before)
    self.assertEqual(int(memory.add_count), 30 + 3)  # Padding included.

  def _chunk(self, row, field):
    return self.chunks + 6 * row + field

  def test_an_untouched_rewrite_loads(self):
    _rewrite(self.directory, index=self.index, pack=self.pack)
    _, memory = frame_cases.memories(False, rng=7)
    memory.load(self.directory, 3)
    np.testing.assert_array_equal(_frames(memory), _frames(self.saved))

  @parameterized.named_parameters(
      ('version', 0, 1, 'format 1'),
      ('iteration', 1, 2, 'checkpoint 2'),
      ('parts', 3, 5, '5 arrays'),
      ('chunks', 4, 1000, 'not a table'))
  def test_a_header_of_another_memory(self, position, value, pattern):
    index = self.index.copy()
    index[position] = value
    self._refused(pattern, index=index)

  @parameterized.named_parameters(
      ('count', 0, 99, 'in 99 chunks'),
      ('kind', 4, 1, 'of kind 1'),
      ('unit', 5, 1, 'chunks of 1'),
      ('huge_unit', 2, 1 << 40, 'chunks of'))
  def test_a_part_that_does_not_fit(self, field, value, pattern):
    index = self.index.copy()
    index[self.parts + field] = value
    self._refused(pattern, index=index)

  def test_an_own_pack_not_first(self):
    index = self.index.copy()
    index[5] = 2
    self._refused('own pack', index=index)

  @parameterized.named_parameters(
      ('pack_row', 0, 1, 'out of bounds'),
      ('offset', 1, -1, 'out of bounds'),
      ('packed', 2, (64 << 20) + 1, 'out of bounds'),
      ('raw', 3, 0, 'out of bounds'),
      ('outside', 1, 1 << 30, 'outside its pack'),
      ('digest', 4, 12345, 'digest'))
  def test_a_chunk_out_of_bounds(self, field, value, pattern):
    index = self.index.copy()
    index[self._chunk(0, field)] = value
    self._refused(pattern, index=index)

  def test_a_damaged_chunk(self):
    damaged = bytearray(self.pack)
    damaged[len(damaged) // 2] ^= 0xFF
    self._refused('chunk', pack=bytes(damaged))

  def test_a_bomb(self):
    # A chunk that decompresses to far more than its declared size.
    bomb = zstandard.ZstdCompressor(level=3).compress(b'\0' * (8 << 20))
    index = self.index.copy()
    index[self._chunk(0, 1)] = len(self.pack)
    index[self._chunk(0, 2)] = len(bomb)
    self._refused('chunk', index=index, pack=self.pack + bomb)

  def test_a_block_that_does_not_decode(self):
    # Well-formed zstd around LZ4 bytes that decode to nothing right, with
    # the digest of what they are.
    raw = int(self.index[self._chunk(0, 3)])
    blocks = frame_blocks.CompressedFrames(
        frame_cases.CAPACITY, frame_cases.SHAPE, np.uint8).blocks
    content = np.array([(raw - 4 * blocks) // blocks] * blocks,
                       '<u4').tobytes()
    content += b'\xff' * (raw - len(content))
    garbage = zstandard.ZstdCompressor(level=3).compress(content)
    index = self.index.copy()
    index[self._chunk(0, 1)] = len(self.pack)
    index[self._chunk(0, 2)] = len(garbage)
    index[self._chunk(0, 3)] = len(content)
    index[self._chunk(0, 4):self._chunk(0, 6)] = np.frombuffer(
        hashlib.sha256(content).digest()[:16], '<i8')
    self._refused('does not decode|does not hold',
                  index=index, pack=self.pack + garbage)


if __name__ == '__main__':
  absltest.main()
