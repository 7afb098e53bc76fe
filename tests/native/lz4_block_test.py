"""Tests of the LZ4 block codec (native/lz4_block.h) through the extension.

Round trips both ways against the lz4 package's block format (our blocks
decoded by lz4.block, lz4's default and HC9 blocks decoded by ours) on
random, zero, repetitive and frame-like data of sizes 0 to about 1 MB; the
seeded fuzz of damaged blocks (lz4_cases.fuzz, seed lz4_cases.FUZZ_SEED);
the arguments' errors.
"""

import threading

from absl.testing import absltest
from absl.testing import parameterized
import lz4.block
import numpy as np

from dopamine_per.native import extension
from tests.native import lz4_cases

_LEVELS = (0, 1, 2, 3, 9, 12)
_DATA = lz4_cases.datasets(np.random.default_rng(7))


class RoundTripTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(name, name) for name in _DATA])
  def test_lz4_decodes_our_blocks(self, name):
    data = _DATA[name]
    for level in _LEVELS:
      block = extension.lz4_compress(data, level)
      self.assertEqual(
          lz4.block.decompress(block, uncompressed_size=len(data)), data,
          'level {}'.format(level))
      self.assertEqual(extension.lz4_decompress(block, len(data)), data)
      # Never beyond the bound: all literals, with their length bytes.
      self.assertLessEqual(len(block), len(data) + len(data) // 255 + 16)

  @parameterized.named_parameters(*[(name, name) for name in _DATA])
  def test_we_decode_lz4s_blocks(self, name):
    data = _DATA[name]
    for mode in ('default', 'hc9'):
      block = lz4_cases.reference_compress(data, mode)
      self.assertEqual(extension.lz4_decompress(block, len(data)), data, mode)

  def test_compressible_data_shrinks(self):
    frames = _DATA['block frames']
    sizes = {level: len(extension.lz4_compress(frames, level))
             for level in _LEVELS}
    self.assertLess(sizes[0], len(frames) // 8)
    # Searching more finds longer matches; level 9 within 10% of lz4 HC9.
    self.assertLessEqual(sizes[9], sizes[2])
    self.assertLessEqual(sizes[12], sizes[9])
    self.assertLessEqual(
        sizes[9], 1.1 * len(lz4_cases.reference_compress(frames, 'hc9')))
    self.assertEqual(len(extension.lz4_compress(bytes(1000), 9)), 14)
    # Random bytes stay all literals: token, length bytes, the bytes.
    self.assertEqual(len(extension.lz4_compress(_DATA['small random'])),
                     1 + 1 + 100)

  def test_default_level_is_9(self):
    frames = _DATA['block frames']
    self.assertEqual(extension.lz4_compress(frames),
                     extension.lz4_compress(frames, 9))

  def test_takes_any_bytes_like(self):
    frames = np.frombuffer(_DATA['block frames'], np.uint8).reshape(4, 84, 84)
    block = extension.lz4_compress(frames)
    self.assertEqual(block, extension.lz4_compress(memoryview(
        _DATA['block frames'])))
    out = extension.lz4_decompress(bytearray(block), frames.nbytes)
    np.testing.assert_array_equal(
        np.frombuffer(out, np.uint8).reshape(4, 84, 84), frames)

  def test_threads_decode_at_once(self):
    # The GIL is released while decoding: threads share the extension.
    blocks = [lz4_cases.reference_compress(data, 'hc9')
              for data in (_DATA['block frames'], _DATA['block repetitive'])]
    wants = [_DATA['block frames'], _DATA['block repetitive']]
    failures = []

    def decode(index):
      for _ in range(200):
        if extension.lz4_decompress(blocks[index], len(wants[index])) != (
            wants[index]):
          failures.append(index)

    threads = [threading.Thread(target=decode, args=(i % 2,))
               for i in range(4)]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    self.assertEqual(failures, [])


class CorruptBlockTest(parameterized.TestCase):

  def test_fuzz_answers_as_lz4_or_refuses(self):
    counts = lz4_cases.fuzz(extension.lz4_decompress,
                            extension.lz4_compress)
    # Both answers occur: the damage is neither always fatal nor harmless.
    self.assertGreater(counts['accepted'], lz4_cases.FUZZ_ROUNDS // 20)
    self.assertGreater(counts['refused'], lz4_cases.FUZZ_ROUNDS // 2)

  @parameterized.named_parameters(
      ('empty', b'', 0),
      ('truncated literals', b'\x30ab', 3),
      ('trailing garbage', b'\x10a\x00', 1),
      ('offset 0', b'\x44abcd\x00\x00\x50vwxyz', 17),
      ('offset before the start', b'\x44abcd\x05\x00\x50vwxyz', 17),
      ('match into the last 5 bytes', b'\x48abcd\x01\x00\x30xyz', 19),
      ('match in the last 12 bytes', b'\x40abcd\x04\x00\x50vwxyz', 13),
      ('no last sequence', b'\x40abcd\x01\x00', 8),
      ('literal length past the end', b'\xf0' + b'\xff' * 50, 100),
      ('match length past the end', b'\x1fa\x01\x00\xff\xff', 600),
      ('longer than size', b'\x20ab', 1),
      ('shorter than size', b'\x20ab', 3),
  )
  def test_refuses(self, block, size):
    # lz4.block refuses each too, but for offset 0 (invalid in the format;
    # it copies whatever is there) and a shorter output (which it returns).
    with self.assertRaisesRegex(ValueError, 'corrupt LZ4 block'):
      extension.lz4_decompress(block, size)

  def test_decodes_a_crafted_block(self):
    # 'abcd', 8 bytes from 4 back, 'vwxyz': the refusals' valid original.
    self.assertEqual(extension.lz4_decompress(b'\x44abcd\x04\x00\x50vwxyz',
                                              17), b'abcdabcdabcdvwxyz')

  def test_overlapping_matches_repeat(self):
    # 'ab', then 10 bytes from 2 back, as if copied byte by byte.
    self.assertEqual(
        extension.lz4_decompress(b'\x26ab\x02\x00\x50vwxyz', 17),
        b'abababababab' + b'vwxyz')
    # 'z', then a run of 40 from 1 back (a length byte of 40 - 4 - 15).
    self.assertEqual(
        extension.lz4_decompress(b'\x1fz\x01\x00\x15\x50vwxyz', 46),
        b'z' * 41 + b'vwxyz')


class ArgumentTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('negative size', b'\x00', -1, ValueError, r'size must be in .* -1'),
      ('absurd size', b'\x00', 1 << 31, ValueError, r'size .* 2147483648'),
      ('float size', b'\x00', 1.0, TypeError, 'size must be an int'),
      ('str block', 'abc', 3, TypeError, 'src must be a bytes-like'),
  )
  def test_decompress_refuses(self, block, size, error, message):
    with self.assertRaisesRegex(error, message):
      extension.lz4_decompress(block, size)

  @parameterized.named_parameters(
      ('level 13', b'abc', 13, ValueError, r'level must be in .* 13'),
      ('level -1', b'abc', -1, ValueError, r'level must be in .* -1'),
      ('str level', b'abc', '9', TypeError, 'level must be an int'),
      ('int data', 5, 9, TypeError, 'src must be a bytes-like'),
  )
  def test_compress_refuses(self, data, level, error, message):
    with self.assertRaisesRegex(error, message):
      extension.lz4_compress(data, level)

  def test_wrong_argument_counts(self):
    module = extension.load()
    with self.assertRaises(TypeError):
      module.lz4_decompress(b'\x00')
    with self.assertRaises(TypeError):
      module.lz4_compress(b'a', 9, 1)


if __name__ == '__main__':
  absltest.main()
