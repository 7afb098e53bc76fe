"""Tests for learning_curve: a valid PNG with the expected pixels."""

import os
import shutil
import struct
import tempfile
import zlib

from absl.testing import absltest
import numpy as np

from dopamine_per.discrete_domains import learning_curve


def _decode_png(data):
  """Decodes an 8-bit RGB PNG without filters (what encode_png writes)."""
  assert data[:8] == b'\x89PNG\r\n\x1a\n'
  position, chunks = 8, {}
  while position < len(data):
    length, = struct.unpack('>I', data[position:position + 4])
    kind = data[position + 4:position + 8]
    body = data[position + 8:position + 8 + length]
    crc, = struct.unpack('>I', data[position + 8 + length:
                                    position + 12 + length])
    assert crc == zlib.crc32(kind + body) & 0xffffffff, kind
    chunks.setdefault(kind, b'')
    chunks[kind] += body
    position += 12 + length
  width, height, depth, color, _, _, _ = struct.unpack('>IIBBBBB',
                                                       chunks[b'IHDR'])
  assert (depth, color) == (8, 2)
  raw = np.frombuffer(zlib.decompress(chunks[b'IDAT']), np.uint8)
  rows = raw.reshape(height, 1 + width * 3)
  assert np.all(rows[:, 0] == 0)
  assert b'IEND' in chunks
  return rows[:, 1:].reshape(height, width, 3)


class LearningCurveTest(absltest.TestCase):

  def test_png_round_trip(self):
    image = np.random.default_rng(0).integers(0, 256, (7, 5, 3)).astype(
        np.uint8)
    np.testing.assert_array_equal(
        _decode_png(learning_curve.encode_png(image)), image)

  def test_rejects_bad_images(self):
    for bad in (np.zeros((4, 4), np.uint8), np.zeros((4, 4, 3)),
                np.zeros((0, 4, 3), np.uint8)):
      with self.assertRaises(ValueError):
        learning_curve.encode_png(bad)

  def test_plot(self):
    directory = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
    path = os.path.join(directory, 'curve.png')
    records = [{'iteration': i, 'train_average_return': 20.0 + 30 * i,
                'eval_average_return': 10.0 + 40 * i} for i in range(5)]
    records.append({'iteration': 5, 'train_average_return': None})
    learning_curve.plot_learning_curve(path, records)
    with open(path, 'rb') as f:
      image = _decode_png(f.read())
    self.assertEqual(image.shape, (440, 720, 3))
    colors = {tuple(c) for c in image.reshape(-1, 3)[::7]}
    self.assertIn(learning_curve.EVAL_COLOR, colors)
    self.assertIn(learning_curve.TRAIN_COLOR, colors)
    # An empty log still gives a picture (axes only).
    learning_curve.plot_learning_curve(path, [])
    self.assertTrue(os.path.getsize(path) > 100)


if __name__ == '__main__':
  absltest.main()
