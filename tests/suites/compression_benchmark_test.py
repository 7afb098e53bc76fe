"""Smoke tests for benchmarks/compression_benchmark.py and atari_frames.py.

Every configuration must give back the frames it stored, byte for byte,
whole and through a sampled batch; a batch decodes exactly the blocks its
frames lie in; the frames cache collects once and reads back the same.
"""

import os
import tempfile

from absl.testing import absltest
import numpy as np

from benchmarks import atari_frames
from benchmarks import compression_benchmark as benchmark


def smooth_frames(count, seed=0):
  """Synthetic [count, 84, 84] frames: a fixed backdrop and moving boxes.

  Like an Atari screen they are mostly flat and change a little from one
  frame to the next, so any codec must compress them.
  """
  rng = np.random.default_rng(seed)
  backdrop = np.zeros((84, 84), np.uint8)
  backdrop[10:14, :] = 87
  backdrop[70:74, :] = 87
  frames = np.repeat(backdrop[None], count, axis=0)
  for i in range(count):
    x = (3 * i) % 76
    y = 20 + (i % 40)
    frames[i, y:y + 6, x:x + 4] = 236
    frames[i, 40:44, (80 - x) % 80:(80 - x) % 80 + 2] = 147
  # A little noise in one corner, so that deltas are not all zero.
  frames[:, :2, :2] = rng.integers(0, 4, size=(count, 2, 2), dtype=np.uint8)
  return frames


class BlockStoreTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    # 301 frames: every block length leaves a short last block.
    self.frames = smooth_frames(301)
    self.dictionary = benchmark.train_dictionary(
        self.frames, 4096, 100, np.random.default_rng(0))

  def test_every_configuration_round_trips(self):
    configs = benchmark.default_configs()
    self.assertLen(configs, 45)
    self.assertEqual({c.codec for c in configs}, set(benchmark.CODECS))
    self.assertEqual({c.block for c in configs}, {1, 4, 16, 64})
    batches = benchmark.draw_batches(len(self.frames), 6,
                                     np.random.default_rng(1))
    # A batch reading the last, short block too.
    batches.append(np.arange(len(self.frames) - 7,
                             len(self.frames))[None].repeat(2, axis=0))
    for config in configs:
      with self.subTest(config=config.label()):
        store = benchmark.BlockStore(self.frames, config, self.dictionary)
        decoded = np.zeros_like(self.frames)
        store.decode_all(decoded)
        np.testing.assert_array_equal(decoded, self.frames)
        for indices in batches:
          gathered, _ = store.gather(indices)
          np.testing.assert_array_equal(gathered, self.frames[indices])
        ratio = self.frames.nbytes / store.stored_bytes
        if config.codec == 'none':
          self.assertLess(ratio, 1.0)  # The index costs a little.
        else:
          self.assertGreater(ratio, 5.0, config.label())

  def test_batch_decodes_the_blocks_it_touches(self):
    config = benchmark.Config('lz4', 16, False, False)
    store = benchmark.BlockStore(self.frames, config)
    # Frames 13..19 span blocks 0 and 1; 30..36 blocks 1 and 2; block 1
    # is decoded once.
    indices = np.array([np.arange(13, 20), np.arange(30, 37)])
    _, touched = store.gather(indices)
    self.assertEqual(touched, 3)
    # With a delta, blocks are decoded one call each: count the calls.
    delta = benchmark.BlockStore(self.frames, config._replace(delta=True))
    delta_blocks = []
    delta_decode = delta.decode_block
    delta.decode_block = lambda index, out: (delta_blocks.append(index),
                                             delta_decode(index, out))
    gathered, touched = delta.gather(indices)
    self.assertEqual(touched, 3)
    self.assertEqual(delta_blocks, [0, 1, 2])
    np.testing.assert_array_equal(gathered, self.frames[indices])

  def test_batches_read_seven_consecutive_frames(self):
    batches = benchmark.draw_batches(100, 50, np.random.default_rng(0))
    for indices in batches:
      self.assertEqual(indices.shape, (benchmark.BATCH_SIZE, 7))
      np.testing.assert_array_equal(np.diff(indices, axis=1), 1)
      self.assertGreaterEqual(indices.min(), 0)
      self.assertLess(indices.max(), 100)

  def test_delta_and_dictionary_change_the_bytes(self):
    plain = benchmark.BlockStore(self.frames,
                                 benchmark.Config('zstd:1', 4, False, False))
    delta = benchmark.BlockStore(self.frames,
                                 benchmark.Config('zstd:1', 4, True, False))
    with_dictionary = benchmark.BlockStore(
        self.frames, benchmark.Config('zstd:1', 1, False, True),
        self.dictionary)
    self.assertNotEqual(plain.blocks, delta.blocks)
    # The dictionary's bytes are counted once.
    self.assertEqual(
        with_dictionary.stored_bytes,
        sum(map(len, with_dictionary.blocks)) + len(self.dictionary) +
        benchmark.INDEX_BYTES_PER_BLOCK * len(self.frames))


class CacheSimulationTest(absltest.TestCase):

  def test_hit_rates(self):
    for prioritized in (False, True):
      # A cache holding the whole memory hits almost always; one block
      # almost never.
      everything = benchmark.simulate_cache(
          4, 512, prioritized, batches=200, seed=0, capacity=512)
      one_block = benchmark.simulate_cache(
          4, 4, prioritized, batches=200, seed=0, capacity=512)
      self.assertGreater(everything, 0.8)
      self.assertLess(one_block, 0.1)


class RunBenchmarkTest(absltest.TestCase):

  def test_small_run(self):
    configs = [benchmark.Config('none', 4, False, False),
               benchmark.Config('zstd:1', 16, True, False),
               benchmark.Config('zstd:3', 4, False, True),
               benchmark.Config('lz4', 64, False, False)]
    frame_sets = {'Smooth': smooth_frames(400),
                  'Other': smooth_frames(300, seed=1)[::-1].copy()}
    results = benchmark.run_benchmark(
        ('Smooth', 'Other'), rounds=2, batches=4, burst_seconds=1e-4,
        dictionary_size=2048, dictionary_samples=50, cache_frames=(64,),
        cache_batches=20, cache_capacity=1024, frame_sets=frame_sets,
        configs=configs)
    for game in frame_sets:
      stats = results['games'][game]
      self.assertGreater(stats['floor_us'], 0)
      self.assertGreater(stats['dictionary_bytes'], 0)
      for config in configs:
        self.assertTrue(stats[config]['round_trip'])
        self.assertGreater(stats[config]['batch_us'], 0)
        # 32 transitions of 7 frames: at least 4 blocks of 64, at most 224.
        self.assertBetween(stats[config]['blocks_per_batch'], 4, 224)
    self.assertLen(results['cache'], 4 * 2)
    report = benchmark.format_section(results)
    self.assertTrue(report.startswith(
        '## Compressed frames: codecs, blocks and deltas (issue 33)\n'))
    self.assertIn('### Smooth\n', report)
    self.assertRegex(report, r'\| zstd:1 \| 16 \| yes \|  \| [0-9.]+ \|')
    self.assertNotIn('| NO |', report)
    self.assertRegex(report, "Issue 33's targets on (Smooth|Other), ")
    self.assertIn('| 64 frames (0 MiB), uniform |', report)


class AtariFramesTest(absltest.TestCase):

  def test_collects_once_then_reads_the_cache(self):
    with tempfile.TemporaryDirectory() as cache_dir:
      first = atari_frames.load('Pong', 40, 3, cache_dir)
      self.assertEqual(first.frames.shape, (40, 84, 84))
      self.assertEqual(first.frames.dtype, np.uint8)
      self.assertEqual(first.episode_starts[0], 0)
      self.assertGreater(int(first.frames.max()), 0)
      frames_path, starts_path = atari_frames.cache_paths('Pong', 40, 3,
                                                          cache_dir)
      self.assertTrue(os.path.isfile(frames_path))
      self.assertTrue(os.path.isfile(starts_path))
      # No temporaries are left behind.
      self.assertLen(os.listdir(cache_dir), 2)
      collect = atari_frames.collect
      try:
        atari_frames.collect = None  # A second load must not collect.
        again = atari_frames.frames('Pong', 40, 3, cache_dir)
      finally:
        atari_frames.collect = collect
      np.testing.assert_array_equal(again, first.frames)
      # The same seed plays the same game.
      np.testing.assert_array_equal(
          atari_frames.collect('Pong', 40, 3).frames, first.frames)


if __name__ == '__main__':
  absltest.main()
