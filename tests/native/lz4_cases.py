"""LZ4 block test data and the seeded fuzz of a block decoder.

Shared by tests/native/lz4_block_test.py and the sanitizer test
(tests/replay_memory/native_sanitizer_test.py), which runs the same fuzz
through the extension built with AddressSanitizer and UBSan.
"""

from typing import Callable, Dict

import lz4.block
import numpy as np

# A block of the replay memory: 4 consecutive 84x84 uint8 frames.
FRAME_BLOCK_BYTES = 4 * 84 * 84
# The fuzz's seed and rounds (the sanitizer test runs the same).
FUZZ_SEED = 20240517
FUZZ_ROUNDS = 20000


def frame_like(rng: np.random.Generator, frames: int = 4,
               motion: int = 2) -> bytes:
  """`frames` Atari-like 84x84 frames: sprites moving on a plain screen.

  A plain background, a ground and a score bar, a few rectangles and
  sprites (a 2-colour pattern each), each moving `motion` pixels a frame,
  as Atari frames after Dopamine's preprocessing look.
  """
  screen = np.full((84, 84), 52, np.uint8)
  screen[72:] = 104  # The ground.
  screen[:9] = 0  # The score bar.
  sprites = []
  for _ in range(6):
    y, x = rng.integers(10, 64, 2)
    h, w = rng.integers(3, 10, 2)
    pattern = rng.integers(0, 2, (h, w)).astype(np.uint8)
    colours = rng.integers(0, 256, 2).astype(np.uint8)
    sprites.append((y, x, colours[pattern]))
  out = []
  for t in range(frames):
    frame = screen.copy()
    frame[2:7, 8:8 + 4 * (t + 3)] = 200  # The score grows.
    for y, x, sprite in sprites:
      y, x = (y + t * motion) % 60 + 10, (x + t * motion) % 70
      h, w = sprite.shape
      frame[y:y + h, x:x + w] = sprite
    out.append(frame)
  return np.stack(out).tobytes()


def datasets(rng: np.random.Generator) -> Dict[str, bytes]:
  """Named inputs: random bytes, zeros, repetitive data and frame-like data.

  Of sizes 0, 1, small (100 bytes), a block of frames (28,224) and about
  1 MB (1,000,003 bytes).
  """
  cases = {'empty': b'', 'one byte': b'\x07', 'small random': rng.bytes(100),
           'small repetitive': b'abcabcabX' * 11 + b'a'}
  for size, label in ((FRAME_BLOCK_BYTES, 'block'), (1_000_003, '1MB')):
    cases[label + ' random'] = rng.bytes(size)
    cases[label + ' zeros'] = bytes(size)
    # A short pattern with a changed byte now and then.
    repetitive = np.resize(np.frombuffer(b'\x01\x02\x03\x05\x08\x0d\x15',
                                         np.uint8), size)
    repetitive[rng.integers(0, size, size // 500)] = 0xFF
    cases[label + ' repetitive'] = repetitive.tobytes()
  cases['block frames'] = frame_like(rng)
  cases['1MB frames'] = b''.join(
      frame_like(rng) for _ in range(1_000_003 // FRAME_BLOCK_BYTES + 1)
  )[:1_000_003]
  return cases


def reference_compress(data: bytes, mode: str) -> bytes:
  """lz4's block (no size in front): `mode` 'default' or 'hc9'."""
  if mode == 'hc9':
    return lz4.block.compress(data, mode='high_compression', compression=9,
                              store_size=False)
  return lz4.block.compress(data, store_size=False)


def fuzz(decompress: Callable[[bytes, int], bytes],
         compress: Callable[[bytes, int], bytes],
         seed: int = FUZZ_SEED, rounds: int = FUZZ_ROUNDS) -> Dict[str, int]:
  """Feeds `decompress` damaged valid blocks; checks each answer.

  Each round takes a valid block (of frames, repetitive or random data,
  from `compress` at level 0 or 9 or from lz4's default or HC9) and
  damages it: flips 1 to 3 bits, truncates it, extends it with random
  bytes, overwrites a run of bytes, or asks for a size off by a little.
  `decompress` must either raise ValueError or return exactly what
  lz4.block.decompress returns for it (which must then accept it), never
  anything else.

  Returns:
    {'accepted': ..., 'refused': ...}, the counts of the two answers.

  Raises:
    AssertionError: If an answer is neither.
  """
  rng = np.random.default_rng(seed)
  sources = [frame_like(rng), frame_like(rng, motion=5)[:5000],
             (b'abcd' * 40 + rng.bytes(40)) * 8, rng.bytes(300)]
  blocks = []
  for data in sources:
    blocks.append((compress(data, 0), len(data)))
    blocks.append((compress(data, 9), len(data)))
    blocks.append((reference_compress(data, 'default'), len(data)))
    blocks.append((reference_compress(data, 'hc9'), len(data)))
  counts = {'accepted': 0, 'refused': 0}
  for _ in range(rounds):
    block, size = blocks[rng.integers(len(blocks))]
    damaged = bytearray(block)
    kind = rng.integers(5)
    if kind == 0:
      for _ in range(rng.integers(1, 4)):
        damaged[rng.integers(len(damaged))] ^= 1 << int(rng.integers(8))
    elif kind == 1:
      del damaged[rng.integers(len(damaged)):]
    elif kind == 2:
      damaged += rng.bytes(int(rng.integers(1, 20)))
    elif kind == 3:
      at = int(rng.integers(len(damaged)))
      damaged[at:at + 4] = rng.bytes(4)
    else:
      size = max(0, size + int(rng.integers(-20, 21)))
    damaged = bytes(damaged)
    try:
      got = decompress(damaged, size)
    except ValueError:
      counts['refused'] += 1
      continue
    counts['accepted'] += 1
    try:
      want = lz4.block.decompress(damaged, uncompressed_size=size)
    except lz4.block.LZ4BlockError as e:
      raise AssertionError('accepted a block lz4 refuses ({}): {!r}, '
                           'size {}'.format(e, damaged, size)) from e
    if got != want:
      raise AssertionError('decoded otherwise than lz4: {!r}, size {}'.format(
          damaged, size))
  return counts
