"""Tests of checkpoints of compressed frames (`frame_checkpoint`): the
blocks saved as they are, loaded by either memory, bounded and checked."""

import gzip
import io
import os
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import zstandard

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.replay_memory.checkpoint import frame_checkpoint
from dopamine_per.replay_memory.memory import frame_blocks
from tests.support import fixtures
from tests.support import frame_cases

_FRAME_FILES = [gzip_files.checkpoint_filename('', name, 3)
                for name, _ in frame_checkpoint.FILES]
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


class FrameCheckpointTest(parameterized.TestCase):

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

  def test_two_files_replace_the_observation_file(self):
    plain = fixtures.file_contents(self.plain_dir)
    compressed = fixtures.file_contents(self.directory)
    self.assertEqual(
        sorted(compressed),
        sorted((set(plain) - {'$store$_observation_ckpt.3.gz'}) |
               set(_FRAME_FILES)))
    for name in set(plain) & set(compressed) - {_STATE}:
      self.assertEqual(compressed[name], plain[name], name)

  def test_smaller_than_dopamines_array(self):
    # Gzip does well on these plain synthetic frames, and tables cost more
    # than a tiny memory saves: the real sizes are the benchmark's.
    plain, compressed = frame_cases.memories(True, replay_capacity=4000)
    frame_cases.add((plain, compressed), 4000)
    plain.save(self.plain_dir, 0)
    compressed.save(self.directory, 0)
    frame_bytes = sum(
        os.path.getsize(gzip_files.checkpoint_filename(self.directory, name, 0))
        for name, _ in frame_checkpoint.FILES)
    self.assertLess(frame_bytes, os.path.getsize(gzip_files.checkpoint_filename(
        self.plain_dir, '$store$_observation', 0)))

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


def _rewrite(directory, index=None, packs=None):
  """Rewrites the frame files of checkpoint 3 (and drops the state file,
  whose digests would refuse them first: the files' own checks are under
  test)."""
  os.remove(os.path.join(directory, _STATE))
  if index is not None:
    gzip_files.save_npy_gz(os.path.join(directory, _FRAME_FILES[0]), index)
  if packs is not None:
    gzip_files.save_npy_gz(os.path.join(directory, _FRAME_FILES[1]),
                           np.frombuffer(packs, np.uint8))


def _read(directory, name):
  with gzip.open(os.path.join(directory, name)) as f:
    return np.load(io.BytesIO(f.read()))


class CraftedFilesTest(parameterized.TestCase):
  """Each crafted file is refused with CheckpointError; nothing changes."""

  def setUp(self):
    super().setUp()
    _, self.saved = frame_cases.memories(False)
    frame_cases.add((self.saved,), 150)
    self.directory = fixtures.temp_dir(self)
    self.saved.save(self.directory, 3)
    self.index = _read(self.directory, _FRAME_FILES[0])
    self.packs = _read(self.directory, _FRAME_FILES[1]).tobytes()
    self.blocks = int(self.index[2])
    self.chunks = int(self.index[3])

  def _refused(self, pattern, **rewrite):
    _rewrite(self.directory, **rewrite)
    _, memory = frame_cases.memories(False, rng=7)
    frame_cases.add((memory,), 30, seed=4)
    before = _frames(memory)
    with self.assertRaisesRegex(atomic_files.CheckpointError, pattern):
      memory.load(self.directory, 3)
    np.testing.assert_array_equal(_frames(memory), before)
    self.assertEqual(int(memory.add_count), 30 + 3)  # Padding included.

  def test_an_untouched_rewrite_loads(self):
    _rewrite(self.directory, index=self.index, packs=self.packs)
    _, memory = frame_cases.memories(False, rng=7)
    memory.load(self.directory, 3)
    np.testing.assert_array_equal(_frames(memory), _frames(self.saved))

  @parameterized.named_parameters(
      ('version', 0, 2, 'format 2'),
      ('block_frames', 1, 8, 'blocks of 8 frames'),
      ('blocks', 2, 3, '3 blocks'),
      ('chunks', 3, 5, 'not .* for 5 chunks'))
  def test_a_header_of_another_memory(self, position, value, pattern):
    index = self.index.copy()
    index[position] = value
    self._refused(pattern, index=index)

  def test_block_sizes_out_of_bounds(self):
    for size in (-1, 1 << 20):
      index = self.index.copy()
      index[4] = size
      self._refused(r'block size is outside', index=index)
      self.saved.save(self.directory, 3)

  def test_chunk_sizes_that_do_not_add_up(self):
    index = self.index.copy()
    index[4 + self.blocks] += 1  # The first chunk's raw size.
    self._refused('the chunks hold', index=index)

  def test_a_chunk_claiming_too_much(self):
    index = self.index.copy()
    index[4 + self.blocks + self.chunks] = (64 << 20) + 1
    self._refused(r'chunk size is outside', index=index)

  def test_packs_of_another_length(self):
    self._refused('shape', packs=self.packs + b'\0')

  def test_a_damaged_chunk(self):
    damaged = bytearray(self.packs)
    damaged[len(damaged) // 2] ^= 0xFF
    self._refused('chunk', packs=bytes(damaged))

  def test_a_bomb(self):
    # A chunk that decompresses to far more than its declared size.
    bomb = zstandard.ZstdCompressor(level=3).compress(b'\0' * (8 << 20))
    self.assertEqual(self.chunks, 1)
    index = self.index.copy()
    index[4 + self.blocks + self.chunks] = len(bomb)
    self._refused('chunk', index=index, packs=bomb)

  def test_a_block_that_does_not_decode(self):
    # Well-formed zstd around LZ4 bytes that decode to nothing right.
    raw = int(self.index[4 + self.blocks])
    garbage = zstandard.ZstdCompressor(level=3).compress(b'\xff' * raw)
    index = self.index.copy()
    index[4 + self.blocks + self.chunks] = len(garbage)
    self._refused('block 0 does not decode', index=index, packs=garbage)


if __name__ == '__main__':
  absltest.main()
