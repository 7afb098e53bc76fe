r"""Measures codecs, block lengths and deltas for compressed Atari frames.

Part of `python -m benchmarks` (see benchmarks/__main__.py), its section
`compression`, which runs only when asked for (it plays Atari to collect
its frames once); issue 33 chooses its frame format from these numbers
(docs/compression.md). This section alone, printed and not written:

  python -m benchmarks --sections=compression    # ~4 minutes, frames cached
  python -m benchmarks.compression_benchmark --games=MsPacman --frames=5000

For each game (Pong, Breakout, SpaceInvaders, MsPacman by default) it takes
real 84x84 uint8 frames (benchmarks/atari_frames.py: Dopamine's
preprocessing, seeded random play, cached; about 20 s a game to collect
20,000) and stores them as a replay memory would: consecutive frames cut
into blocks of `block` frames, each block compressed on its own. Every
configuration is a codec (`CODECS`: no compression, lz4, lz4 HC, zstd at
levels -1, 1 and 3), a block length (1, 4, 16, 64), with or without a delta
(each frame but the block's first XORed with the frame before it, undone
on decoding by a running XOR), and for zstd at levels 1 and 3 with blocks
of 1 and 4 frames also a dictionary trained on single frames drawn from
the first tenth of the game's frames (what a memory would train on when it
starts; its bytes are counted in the ratio and the projections). For each
it measures, single-threaded:

* the compression ratio: raw bytes / stored bytes, the stored bytes being
  every block's compressed bytes (codec headers included) plus
  `INDEX_BYTES_PER_BLOCK` per block for the index a memory needs (offset,
  length), plus the dictionary;
* compress and decompress MB/s (raw megabytes, 1e6 bytes, per second): one
  pass compressing every block (the pass that builds the store) and the
  median of `throughput_passes` passes decoding every block, delta undone,
  into an array (the first pass is checked byte for byte against the
  frames);
* the key number for a memory, the decode cost of one sampled batch: 32
  transitions drawn uniformly, each reading the 7 consecutive frames t-3 ..
  t+3 (a stack of 4 and its 3-step successor), the blocks they touch
  decoded once each (a block touched by two transitions, or twice by one,
  once), then the 224 frames gathered with one fancy index; in µs per
  batch, the median over interleaved rounds (`timing.run_interleaved`) of
  bursts over a pool of pre-drawn batches, and as a ratio to the copy
  floor: the same 224 frames fancy-indexed out of the uncompressed array;
* the projected resident bytes of frames per transition (frames stored once
  per transition: stored bytes / frames) and at 2**20 transitions (that
  times 2**20 plus the dictionary once), which is also about what a
  checkpoint writing the blocks as they are takes.

Decoding here runs through Python (one codec call and a few NumPy calls
per block), so per-block overheads of about a microsecond are included
that native code would mostly not pay; the `none` codec (blocks stored
raw) shows that floor of the method.

A last table estimates the hit rate of a cache of recently decoded blocks
(LRU) at 2**20 transitions, simulated with the package's SumTree for
uniform sampling and for a model of prioritized sampling (see
`simulate_cache`).
"""

import collections
import os
import sys
import time
from typing import (Callable, Dict, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple)

from absl import app
from absl import flags
import numpy as np

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import atari_frames  # pylint: disable=g-import-not-at-top
from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import timing  # pylint: disable=g-import-not-at-top
from dopamine_per.replay_memory import sum_tree  # pylint: disable=g-import-not-at-top

__all__ = [
    'BATCH_SIZE',
    'CODECS',
    'Codec',
    'Config',
    'DEFAULT_GAMES',
    'FRAMES_PER_TRANSITION',
    'INDEX_BYTES_PER_BLOCK',
    'PROJECTED_TRANSITIONS',
    'BlockStore',
    'default_configs',
    'draw_batches',
    'format_section',
    'make_codec',
    'measure_game',
    'run_benchmark',
    'run_section',
    'simulate_cache',
]

DEFAULT_GAMES = ('Pong', 'Breakout', 'SpaceInvaders', 'MsPacman')
BLOCK_LENGTHS = (1, 4, 16, 64)
# Codecs in table order. `none` stores blocks raw: the method's floor.
CODECS = ('none', 'lz4', 'lz4hc', 'zstd:-1', 'zstd:1', 'zstd:3')
# Codecs also measured with a trained dictionary, and for which blocks.
DICTIONARY_CODECS = ('zstd:1', 'zstd:3')
DICTIONARY_BLOCK_LENGTHS = (1, 4)
BATCH_SIZE = 32
STACK_SIZE = 4
UPDATE_HORIZON = 3
# Frames one transition reads: t-3 .. t (its state) and t .. t+3 (the state
# 3 steps later).
FRAMES_PER_TRANSITION = STACK_SIZE + UPDATE_HORIZON
FRAME_BYTES = int(np.prod(atari_frames.FRAME_SHAPE))
# The index a memory keeps per block: an 8-byte offset into an arena, a
# 4-byte length and 4 bytes of flags (the block's first slot is implied).
INDEX_BYTES_PER_BLOCK = 16
PROJECTED_TRANSITIONS = 2**20
# Issue 33's targets at 2**20 on the least compressible game.
TARGET_RESIDENT_BYTES = 1.5 * 2**30
TARGET_CHECKPOINT_BYTES = 138e6
TARGET_FLOOR_RATIO = 5.0


class Codec(NamedTuple):
  """A block codec: compress(bytes) -> bytes, decompress(bytes, size)."""
  name: str
  compress: Callable[[bytes], bytes]
  decompress: Callable[[bytes, int], bytes]


class Config(NamedTuple):
  """One way of storing frames: a codec, a block length, delta, dictionary."""
  codec: str
  block: int
  delta: bool
  dictionary: bool

  def label(self) -> str:
    """A short name, e.g. 'zstd:1/16/delta/dict'."""
    parts = [self.codec, str(self.block)]
    if self.delta:
      parts.append('delta')
    if self.dictionary:
      parts.append('dict')
    return '/'.join(parts)


def make_codec(name: str, dictionary: Optional[bytes] = None) -> Codec:
  """Returns the codec `name` (one of `CODECS`), zstd with `dictionary`.

  zstd frames are written without checksum, content size or dictionary id
  (the memory knows each block's length and dictionary); lz4 blocks are raw
  blocks without a size prefix, for the same reason.
  """
  if name == 'none':
    return Codec(name, bytes, lambda data, size: data)
  if name in ('lz4', 'lz4hc'):
    import lz4.block  # pylint: disable=g-import-not-at-top
    mode = 'high_compression' if name == 'lz4hc' else 'default'

    def lz4_compress(data):
      return lz4.block.compress(data, mode=mode, store_size=False)

    def lz4_decompress(data, size):
      return lz4.block.decompress(data, uncompressed_size=size)
    return Codec(name, lz4_compress, lz4_decompress)
  if name.startswith('zstd:'):
    import zstandard  # pylint: disable=g-import-not-at-top
    level = int(name.split(':', 1)[1])
    data = (zstandard.ZstdCompressionDict(dictionary)
            if dictionary is not None else None)
    if data is not None:
      data.precompute_compress(level=level)
    compressor = zstandard.ZstdCompressor(
        level=level, dict_data=data, write_checksum=False,
        write_content_size=False, write_dict_id=False)
    decompressor = zstandard.ZstdDecompressor(dict_data=data)

    def zstd_decompress(block, size):
      return decompressor.decompress(block, max_output_size=size)
    return Codec(name, compressor.compress, zstd_decompress)
  raise ValueError(f'Unknown codec {name!r}; known: {CODECS}')


def train_dictionary(frames: np.ndarray, size: int, samples: int,
                     rng: np.random.Generator) -> bytes:
  """A zstd dictionary of `size` bytes trained on single frames.

  The frames are drawn from the first tenth of `frames` (at least
  `samples` of them): what a memory has seen when it trains one.
  """
  import zstandard  # pylint: disable=g-import-not-at-top
  head = max(min(len(frames), samples), len(frames) // 10)
  chosen = rng.choice(head, size=min(samples, head), replace=False)
  trained = zstandard.train_dictionary(
      size, [frames[i].tobytes() for i in np.sort(chosen)], k=64, d=8,
      threads=1)
  return trained.as_bytes()


class BlockStore:
  """Frames stored in compressed blocks of consecutive frames.

  Block i holds frames [i * block, (i + 1) * block) (the last one may be
  shorter). With `delta`, a block stores its first frame as it is and every
  other frame XORed with the one before it.
  """

  def __init__(self, frames: np.ndarray, config: Config,
               dictionary: Optional[bytes] = None):
    """Compresses `frames` [n, 84, 84] uint8; times it (`compress_seconds`)."""
    self.config = config
    self.count = len(frames)
    self.frame_shape = frames.shape[1:]
    self.dictionary = dictionary if config.dictionary else None
    self.codec = make_codec(config.codec, self.dictionary)
    block = config.block
    compress = self.codec.compress
    start = time.perf_counter()
    blocks = []
    for first in range(0, self.count, block):
      chunk = frames[first:first + block]
      if config.delta and len(chunk) > 1:
        chunk = chunk.copy()
        np.bitwise_xor(chunk[1:], frames[first:first + len(chunk) - 1],
                       out=chunk[1:])
      blocks.append(compress(chunk.tobytes()))
    self.compress_seconds = time.perf_counter() - start
    self.blocks = blocks
    self.lengths = [min(block, self.count - first)
                    for first in range(0, self.count, block)]

  @property
  def stored_bytes(self) -> int:
    """Compressed bytes, the index's bytes and the dictionary's."""
    return (sum(len(b) for b in self.blocks) +
            INDEX_BYTES_PER_BLOCK * len(self.blocks) +
            (len(self.dictionary) if self.dictionary else 0))

  def decode_block(self, index: int, out: np.ndarray) -> None:
    """Writes block `index`'s frames to out[:length] (out C-contiguous).

    The running XOR that undoes a delta works on 8-byte words, a block at a
    time (it stays in the CPU's caches; NumPy's accumulate over uint8 frames
    is 14 times slower).
    """
    length = self.lengths[index]
    data = self.codec.decompress(self.blocks[index],
                                 length * FRAME_BYTES)
    if self.config.delta:
      np.bitwise_xor.accumulate(
          np.frombuffer(data, np.uint64).reshape(length, -1), axis=0,
          out=out[:length].reshape(length, -1).view(np.uint64))
    else:
      out[:length] = np.frombuffer(data, np.uint8).reshape(
          (length,) + self.frame_shape)

  def decode_all(self, out: np.ndarray) -> None:
    """Decodes every block into out [count, 84, 84]."""
    block = self.config.block
    for index in range(len(self.blocks)):
      self.decode_block(index, out[index * block:])

  def gather(self, indices: np.ndarray) -> Tuple[np.ndarray, int]:
    """Returns (frames at `indices`, blocks decoded), each block once.

    Args:
      indices: int array of frame indices, any shape.

    Returns:
      (uint8 array indices.shape + (84, 84), int).
    """
    block = self.config.block
    flat = indices.ravel()
    touched, inverse = np.unique(flat // block, return_inverse=True)
    positions = inverse * block + flat % block
    touched = touched.tolist()
    if self.config.delta or self.lengths[touched[-1]] != block:
      decoded = np.empty((len(touched), block) + self.frame_shape, np.uint8)
      for position, index in enumerate(touched):
        self.decode_block(index, decoded[position])
    else:
      # Without a delta, one join of the decoded blocks (the one copy a
      # native decoder writing in place would not make) and no NumPy call
      # per block.
      decompress, blocks = self.codec.decompress, self.blocks
      size = block * FRAME_BYTES
      decoded = np.frombuffer(
          b''.join([decompress(blocks[index], size) for index in touched]),
          np.uint8)
    gathered = decoded.reshape((-1,) + self.frame_shape)[positions]
    return gathered.reshape(indices.shape + self.frame_shape), len(touched)


def default_configs() -> List[Config]:
  """Every configuration measured, in table order."""
  configs = []
  for codec in CODECS:
    for block in BLOCK_LENGTHS:
      for delta in (False, True):
        if delta and (block == 1 or codec == 'none'):
          continue  # The same bytes as without (or pointless).
        configs.append(Config(codec, block, delta, False))
        if codec in DICTIONARY_CODECS and block in DICTIONARY_BLOCK_LENGTHS:
          configs.append(Config(codec, block, delta, True))
  return configs


def draw_batches(count: int, batches: int, rng: np.random.Generator,
                 batch_size: int = BATCH_SIZE) -> List[np.ndarray]:
  """Pre-drawn batches: int arrays [batch_size, 7] of frames t-3 .. t+3.

  t is uniform over the transitions whose 7 frames lie in [0, count).
  Frames across an episode's start are read as they are (a memory would
  read zeros there instead): no fewer blocks than a memory decodes.
  """
  if count < FRAMES_PER_TRANSITION:
    raise ValueError(f'need at least {FRAMES_PER_TRANSITION} frames, got '
                     f'{count}')
  offsets = np.arange(-(STACK_SIZE - 1), UPDATE_HORIZON + 1)
  return [rng.integers(STACK_SIZE - 1, count - UPDATE_HORIZON,
                       size=batch_size)[:, None] + offsets
          for _ in range(batches)]


def _median_seconds(function, passes):
  times = []
  for _ in range(passes):
    start = time.perf_counter()
    function()
    times.append(time.perf_counter() - start)
  return timing.median(times)


def measure_game(frames: np.ndarray, configs: Sequence[Config], rounds: int,
                 batches: int, burst_seconds: float, throughput_passes: int,
                 dictionary_size: int, dictionary_samples: int, seed: int,
                 progress: Optional[Callable[[str], None]] = None
                ) -> Dict[object, object]:
  """Measures every configuration on one game's frames.

  Args:
    frames: uint8 array [n, 84, 84], consecutive frames.
    configs: the configurations.
    rounds: int, interleaved rounds of the batch decode.
    batches: int, pre-drawn batches used in turn.
    burst_seconds: float, approximate length of one timed burst.
    throughput_passes: int, full decoding passes (median).
    dictionary_size: int, bytes of the trained dictionary.
    dictionary_samples: int, frames it is trained on.
    seed: int.
    progress: optional callable taking a str.

  Returns:
    dict: 'frames' (n), 'dictionary_seconds', and per Config a dict with
    'stored_bytes', 'blocks', 'compress_mbs', 'decompress_mbs',
    'batch_us', 'blocks_per_batch', 'round_trip' (bool); 'floor_us' the
    copy floor's median µs per batch.
  """
  rng = np.random.default_rng(seed)
  dictionary = None
  dictionary_seconds = 0.0
  if any(c.dictionary for c in configs):
    start = time.perf_counter()
    dictionary = train_dictionary(frames, dictionary_size,
                                  dictionary_samples, rng)
    dictionary_seconds = time.perf_counter() - start
  pool = draw_batches(len(frames), batches, rng)
  raw_mb = frames.nbytes / 1e6
  results = {'frames': len(frames), 'dictionary_seconds': dictionary_seconds,
             'dictionary_bytes': len(dictionary) if dictionary else 0}
  stores = {}
  decoded = np.empty_like(frames)
  for config in configs:
    store = BlockStore(frames, config, dictionary)
    decoded.fill(0)
    store.decode_all(decoded)
    round_trip = bool(np.array_equal(decoded, frames))
    seconds = _median_seconds(lambda s=store: s.decode_all(decoded),
                              throughput_passes)
    blocks_per_batch = timing.median(
        [store.gather(indices)[1] for indices in pool])
    results[config] = {
        'stored_bytes': store.stored_bytes,
        'blocks': len(store.blocks),
        'compress_mbs': raw_mb / store.compress_seconds,
        'decompress_mbs': raw_mb / seconds,
        'blocks_per_batch': blocks_per_batch,
        'round_trip': round_trip,
    }
    stores[config] = store
  if progress:
    progress(f'compression: {len(configs)} configurations stored, timing '
             f'batch decodes ({rounds} rounds)')
  cases = {config: timing.Case(timing.rotating(
      [(indices,) for indices in pool], store.gather))
           for config, store in stores.items()}
  cases['floor'] = timing.Case(timing.rotating(
      [(indices,) for indices in pool], frames.__getitem__))
  samples = timing.run_interleaved(cases, rounds, burst_seconds, rng)
  for key, times in samples.items():
    if key == 'floor':
      results['floor_us'] = timing.median(times)
    else:
      results[key]['batch_us'] = timing.median(times)
  return results


def simulate_cache(block: int, cache_frames: int, prioritized: bool,
                   batches: int, seed: int,
                   capacity: int = PROJECTED_TRANSITIONS,
                   adds_per_batch: int = 4) -> float:
  """The hit rate of an LRU cache of decoded blocks, simulated.

  A full memory of `capacity` transitions is sampled in batches of 32, each
  transition reading frames t-3 .. t+3, the blocks of a batch looked up
  once each in an LRU cache of `cache_frames // block` blocks (hits are
  counted over lookups). Between batches `adds_per_batch` transitions are
  added at the write cursor (Dopamine's Atari agents train every 4 steps),
  invalidating their block's cached copy.

  Uniform: every transition equally likely. Prioritized, a model, not a
  measurement: priorities are |TD error| ** 0.5 with TD errors lognormal
  (sigma 1), each sampled transition gets a fresh one, and a new transition
  gets the largest priority recorded so far, as in Dopamine, until it is
  first sampled. The first half of the batches warms up and is not counted.

  Args:
    block: int, frames per block.
    cache_frames: int, decoded frames the cache holds.
    prioritized: bool.
    batches: int, simulated batches.
    seed: int.
    capacity: int, the memory's transitions.
    adds_per_batch: int.

  Returns:
    float, hits / lookups over the counted half.
  """
  rng = np.random.default_rng(seed)
  tree = None
  if prioritized:
    tree = sum_tree.SumTree(capacity, rng=np.random.default_rng(seed + 1))
    priorities = rng.lognormal(0.0, 1.0, capacity) ** 0.5
    tree.set(np.arange(capacity), priorities)
    max_priority = float(priorities.max())
  cache = collections.OrderedDict()
  cache_blocks = max(1, cache_frames // block)
  offsets = np.arange(-(STACK_SIZE - 1), UPDATE_HORIZON + 1)
  cursor = 0
  hits = lookups = 0
  for batch in range(batches):
    for _ in range(adds_per_batch):
      cache.pop(cursor // block, None)
      if tree is not None:
        tree.set(np.array([cursor]), np.array([max_priority]))
      cursor = (cursor + 1) % capacity
    if tree is None:
      drawn = rng.integers(0, capacity, size=BATCH_SIZE)
    else:
      drawn = np.asarray(tree.stratified_sample(BATCH_SIZE))
      fresh = rng.lognormal(0.0, 1.0, BATCH_SIZE) ** 0.5
      tree.set(drawn, fresh)
      max_priority = max(max_priority, float(fresh.max()))
    touched = np.unique(((drawn[:, None] + offsets) % capacity) // block)
    for index in touched.tolist():
      counted = batch >= batches // 2
      if index in cache:
        cache.move_to_end(index)
        hits += counted
      else:
        cache[index] = True
        if len(cache) > cache_blocks:
          cache.popitem(last=False)
      lookups += counted
  return hits / max(1, lookups)


def run_benchmark(games: Sequence[str] = DEFAULT_GAMES,
                  frame_count: int = 20000, rounds: int = 7,
                  batches: int = 64, burst_seconds: float = 0.02,
                  throughput_passes: int = 1, dictionary_size: int = 16384,
                  dictionary_samples: int = 1000,
                  cache_frames: Sequence[int] = (4096, 16384),
                  cache_batches: int = 4000,
                  cache_capacity: int = PROJECTED_TRANSITIONS, seed: int = 0,
                  cache_dir: Optional[str] = None,
                  frame_sets: Optional[Mapping[str, np.ndarray]] = None,
                  configs: Optional[Sequence[Config]] = None,
                  progress: Optional[Callable[[str], None]] = None
                 ) -> Dict[object, object]:
  """Measures every configuration on every game; see the module docstring.

  Args:
    games: the games (atari_lib names).
    frame_count: int, frames per game.
    rounds: int, interleaved rounds of the batch decode.
    batches: int, pre-drawn batches per game.
    burst_seconds: float, approximate length of a timed burst.
    throughput_passes: int, full decoding passes per configuration.
    dictionary_size: int, bytes of the trained zstd dictionaries.
    dictionary_samples: int, frames a dictionary is trained on.
    cache_frames: decoded frames held by the simulated caches.
    cache_batches: int, batches per cache simulation; 0 for none.
    cache_capacity: int, the simulated memory's transitions.
    seed: int, the frames' seed and the draws'.
    cache_dir: the frames' cache directory (atari_frames).
    frame_sets: optional {game: frames [n, 84, 84]} used instead of
      collected frames (tests).
    configs: the configurations; None for `default_configs()`.
    progress: optional callable taking a str.

  Returns:
    dict: {game: measure_game's dict}, 'collect_seconds' {game: seconds
    to load or collect}, 'cache' {(block, frames, prioritized): hit rate},
    'settings'.
  """
  configs = list(configs or default_configs())
  results = {'games': {}, 'collect_seconds': {}, 'cache': {},
             'settings': dict(frame_count=frame_count, rounds=rounds,
                              batches=batches,
                              throughput_passes=throughput_passes,
                              dictionary_size=dictionary_size,
                              dictionary_samples=dictionary_samples,
                              cache_capacity=cache_capacity)}
  for game in games:
    start = time.perf_counter()
    if frame_sets is not None:
      frames = frame_sets[game]
    else:
      frames = atari_frames.load(game, frame_count, seed, cache_dir,
                                 progress=progress).frames
    results['collect_seconds'][game] = time.perf_counter() - start
    if progress:
      progress(f'compression: {game}, {len(frames)} frames, '
               f'{len(configs)} configurations')
    results['games'][game] = measure_game(
        frames, configs, rounds, batches, burst_seconds, throughput_passes,
        dictionary_size, dictionary_samples, seed, progress=progress)
  if cache_batches:
    for block in BLOCK_LENGTHS:
      for frames_held in cache_frames:
        for prioritized in (False, True):
          results['cache'][(block, frames_held, prioritized)] = (
              simulate_cache(block, frames_held, prioritized, cache_batches,
                             seed, capacity=cache_capacity))
    if progress:
      progress('compression: cache simulations done')
  return results


def run_section(games: Sequence[str], frame_count: int, rounds: int,
                seed: int, cache_dir: Optional[str],
                progress: Optional[Callable[[str], None]] = None
               ) -> Dict[object, object]:
  """`run_benchmark` with the other settings at their defaults.

  What `python -m benchmarks` runs in a fresh process (positional
  arguments and `progress` only).
  """
  return run_benchmark(games, frame_count, rounds, seed=seed,
                       cache_dir=cache_dir, progress=progress)


def _projection(stats, frame_count, dictionary_bytes):
  """(bytes per transition, bytes at 2**20) of a configuration's stats."""
  dictionary = dictionary_bytes if stats.get('dictionary') else 0
  per_transition = (stats['stored_bytes'] - dictionary) / frame_count
  return per_transition, per_transition * PROJECTED_TRANSITIONS + dictionary


def _least_compressible(results):
  """The game whose best no-dictionary zstd:1/64 ratio is lowest."""
  def ratio(game):
    stats = results['games'][game]
    key = Config('zstd:1', 64, False, False)
    if key not in stats:
      key = next(k for k in stats if isinstance(k, Config))
    return stats['frames'] * FRAME_BYTES / stats[key]['stored_bytes']
  return min(results['games'], key=ratio)


def _game_rows(stats):
  rows = []
  count = stats['frames']
  raw = count * FRAME_BYTES
  floor = stats.get('floor_us')
  for config in [k for k in stats if isinstance(k, Config)]:
    entry = stats[config]
    entry = dict(entry, dictionary=config.dictionary)
    per_transition, projected = _projection(entry, count,
                                            stats['dictionary_bytes'])
    batch = entry.get('batch_us')
    rows.append([
        config.codec, str(config.block), 'yes' if config.delta else '',
        'yes' if config.dictionary else '',
        f'{raw / entry["stored_bytes"]:.1f}',
        f'{entry["compress_mbs"]:,.0f}', f'{entry["decompress_mbs"]:,.0f}',
        timing.format_microseconds(batch),
        '—' if batch is None or not floor else f'{batch / floor:.1f}x',
        f'{entry["blocks_per_batch"]:.0f}',
        f'{per_transition:,.0f}', f'{projected / 2**30:.2f}',
        'yes' if entry['round_trip'] else 'NO'])
  return rows


def format_section(results: Mapping[object, object]) -> str:
  """Formats the results as a Markdown section (a `##` heading, tables)."""
  settings = results['settings']
  lines = [
      '## Compressed frames: codecs, blocks and deltas (issue 33)',
      '',
      'Real 84x84 frames per game (benchmarks/atari_frames.py: Dopamine\'s '
      'preprocessing, seeded random actions), stored in blocks of '
      'consecutive frames, each compressed alone, single-threaded. Ratio: raw '
      f'bytes / (compressed blocks + {INDEX_BYTES_PER_BLOCK} B of index per '
      'block + the dictionary). MB/s: raw megabytes per second, compressing '
      'every block once and decoding every block (delta undone; median of '
      f'{settings["throughput_passes"]} passes). Batch: µs to decode the '
      f'blocks touched by {BATCH_SIZE} uniformly drawn transitions of '
      f'{FRAMES_PER_TRANSITION} frames each (t-3 .. t+3; each block once) and '
      'gather the 224 frames, median over '
      f'{settings["rounds"]} interleaved rounds, and its ratio to the copy '
      'floor (the same frames fancy-indexed from the raw array). B/transition: '
      'stored bytes / frames (frames stored once per transition); GiB at '
      f'2**20: that x 2**20 plus the dictionary once (about a checkpoint\'s '
      'size as well, blocks written as they are). Method: '
      'benchmarks/compression_benchmark.py; discussion: docs/compression.md.',
      '',
  ]
  collect = results.get('collect_seconds', {})
  for game, stats in results['games'].items():
    lines += [f'### {game}', '',
              f'{stats["frames"]:,} frames (loaded or collected in '
              f'{collect.get(game, 0):.1f} s); copy floor '
              f'{timing.format_microseconds(stats.get("floor_us"))} µs per '
              f'batch; dictionary {stats["dictionary_bytes"]:,} B, trained '
              f'in {stats["dictionary_seconds"]:.2f} s.', '']
    lines += timing.markdown_table(
        ['codec', 'block', 'delta', 'dict', 'ratio', 'compress MB/s',
         'decompress MB/s', 'batch (µs)', 'x floor', 'blocks/batch',
         'B/transition', 'GiB at 2**20', 'round trip'],
        _game_rows(stats),
        align=['l', 'r', 'l', 'l'] + ['r'] * 8 + ['l'])
    lines.append('')
  if results['games']:
    game = _least_compressible(results)
    stats = results['games'][game]
    floor = stats.get('floor_us')
    lines += [f'Issue 33\'s targets on {game}, the least compressible game '
              'here, at 2**20: frames resident at most '
              f'{TARGET_RESIDENT_BYTES / 2**30:.1f} GiB, a checkpoint at most '
              f'{TARGET_CHECKPOINT_BYTES / 1e6:.0f} MB (frames alone), a batch '
              f'decode at most {TARGET_FLOOR_RATIO:g}x the copy floor (the '
              'whole sample + set_priority has that budget):', '']
    rows = []
    for config in [k for k in stats if isinstance(k, Config)]:
      entry = dict(stats[config], dictionary=config.dictionary)
      _, projected = _projection(entry, stats['frames'],
                                 stats['dictionary_bytes'])
      batch = entry.get('batch_us')
      ratio = batch / floor if batch and floor else None
      met = [projected <= TARGET_RESIDENT_BYTES,
             projected <= TARGET_CHECKPOINT_BYTES,
             ratio is not None and ratio <= TARGET_FLOOR_RATIO]
      if met[0]:
        rows.append([config.label(), f'{projected / 2**30:.2f} GiB',
                     'met' if met[1] else 'NOT met',
                     '—' if ratio is None else f'{ratio:.1f}x',
                     'met' if met[2] else 'NOT met'])
    lines += timing.markdown_table(
        ['configuration (resident target met)', 'at 2**20',
         'checkpoint target', 'batch / floor', 'batch target'], rows)
    lines.append('')
  cache = results.get('cache')
  if cache:
    capacity = common.log2_name(results['settings']['cache_capacity'])
    lines += ['Simulated hit rate of an LRU cache of decoded blocks at '
              f'{capacity} '
              '(`simulate_cache`: hits / block lookups after a batch\'s own '
              'repeats; uniform sampling, and a model of prioritized '
              'sampling), by the decoded frames it holds:', '']
    sizes = sorted({key[1] for key in cache})
    rows = []
    for block in sorted({key[0] for key in cache}):
      row = [str(block)]
      for frames_held in sizes:
        for prioritized in (False, True):
          rate = cache.get((block, frames_held, prioritized))
          row.append('—' if rate is None else f'{100 * rate:.1f}%')
      rows.append(row)
    lines += timing.markdown_table(
        ['block'] + [f'{n:,} frames ({n * FRAME_BYTES / 2**20:.0f} MiB), '
                     f'{"prioritized" if p else "uniform"}'
                     for n in sizes for p in (False, True)], rows)
    lines.append('')
  return '\n'.join(lines)


def define_flags():
  """Defines the command-line flags (only when run as a program)."""
  flags.DEFINE_list('games', list(DEFAULT_GAMES), 'Games (atari_lib names).')
  flags.DEFINE_integer('frames', 20000, 'Frames per game.')
  flags.DEFINE_integer('rounds', 7, 'Interleaved rounds of batch decodes.')
  flags.DEFINE_integer('seed', 0, 'Seed of the frames and the draws.')
  flags.DEFINE_string('cache_dir', None, 'Frames cache directory (default '
                      f'{atari_frames.DEFAULT_CACHE_DIR}).')
  common.define_output_flag()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  results = run_benchmark(options.games, options.frames, options.rounds,
                          seed=options.seed, cache_dir=options.cache_dir,
                          progress=timing.print_progress)
  common.write_report(
      common.document('Compression benchmark', common.describe_machine(),
                      format_section(results)), options.output)


if __name__ == '__main__':
  define_flags()
  app.run(main)
