"""Tests for checkpointer: atomic data files and verified completion markers."""

import hashlib
import json
import os
import pickle
import shutil
import tempfile

from absl.testing import absltest
import numpy as np

from dopamine_per.discrete_domains import checkpointer
from dopamine_per.replay_memory import checkpoint_io


class CheckpointerTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

  def _touch(self, name, content=b'x'):
    with open(os.path.join(self.dir, name), 'wb') as f:
      f.write(content)

  def test_save_load_and_marker_lists_files(self):
    saver = checkpointer.Checkpointer(self.dir)
    self._touch('tf_ckpt-3.index', b'abc')
    self._touch('add_count_ckpt.3.gz', b'abcd')
    self._touch('add_count_ckpt.13.gz')  # Another iteration's file.
    data = {'current_iteration': 3, 'state': np.arange(4.0)}
    saver.save_checkpoint(3, data)
    with open(os.path.join(self.dir, 'sentinel_checkpoint_complete.3')) as f:
      marker = json.load(f)
    self.assertEqual(marker['iteration'], 3)
    self.assertEqual(set(marker['files']), {'tf_ckpt-3.index',
                                            'add_count_ckpt.3.gz', 'ckpt.3'})
    self.assertEqual(marker['files']['add_count_ckpt.3.gz'],
                     [4, hashlib.sha256(b'abcd').hexdigest()])
    loaded = saver.load_checkpoint(3)
    self.assertEqual(loaded['current_iteration'], 3)
    np.testing.assert_array_equal(loaded['state'], np.arange(4.0))
    self.assertEqual(checkpointer.get_latest_checkpoint_number(self.dir), 3)
    self.assertEqual(
        checkpointer.get_latest_checkpoint_number(self.dir, override_number=1),
        1)

  def test_missing_or_changed_file_makes_checkpoint_incomplete(self):
    saver = checkpointer.Checkpointer(self.dir)
    self._touch('tf_ckpt-0.index', b'abc')
    saver.save_checkpoint(0, {'current_iteration': 0})
    self.assertTrue(saver.is_complete(0))
    self._touch('tf_ckpt-0.index', b'abcdef')
    self.assertFalse(saver.is_complete(0))
    self.assertIsNone(saver.load_checkpoint(0))
    self._touch('tf_ckpt-0.index', b'abc')
    self.assertTrue(saver.is_complete(0))
    self._touch('tf_ckpt-0.index', b'abd')  # Same size, other content.
    self.assertFalse(saver.is_complete(0))
    os.remove(os.path.join(self.dir, 'tf_ckpt-0.index'))
    self.assertIsNone(saver.load_checkpoint(0))
    self.assertIsNone(saver.load_checkpoint(5))  # No marker at all.

  def test_no_marker_no_checkpoint(self):
    self._touch('ckpt.2', pickle.dumps({'current_iteration': 2}))
    self.assertEqual(checkpointer.get_latest_checkpoint_number(self.dir), -1)
    self.assertEqual(checkpointer.get_latest_checkpoint_number(
        os.path.join(self.dir, 'missing')), -1)

  def test_dopamine_marker_is_accepted(self):
    self._touch('ckpt.1', pickle.dumps({'current_iteration': 1}))
    self._touch('sentinel_checkpoint_complete.1', b'done')
    saver = checkpointer.Checkpointer(self.dir)
    self.assertEqual(saver.load_checkpoint(1), {'current_iteration': 1})

  def test_unsafe_pickle_is_refused(self):
    saver = checkpointer.Checkpointer(self.dir)
    saver.save_checkpoint(0, {'current_iteration': 0})
    self._touch('ckpt.0', pickle.dumps(shutil.rmtree))
    with open(os.path.join(self.dir, 'sentinel_checkpoint_complete.0')) as f:
      marker = json.load(f)
    marker['files']['ckpt.0'] = list(checkpoint_io.file_digest(
        os.path.join(self.dir, 'ckpt.0')))
    self._touch('sentinel_checkpoint_complete.0', json.dumps(marker).encode())
    with self.assertRaises(checkpoint_io.UnsafePickleError):
      saver.load_checkpoint(0)

  def test_garbage_collection(self):
    saver = checkpointer.Checkpointer(self.dir, checkpoint_duration=2,
                                      keep_every=3)
    for iteration in range(7):
      saver.save_checkpoint(iteration, {'current_iteration': iteration})
    self.assertEqual(checkpointer.get_complete_checkpoint_numbers(self.dir),
                     [6, 5, 3, 0])
    self.assertFalse(os.path.exists(os.path.join(self.dir, 'ckpt.4')))

  def test_needs_a_directory(self):
    with self.assertRaisesRegex(ValueError, 'No path'):
      checkpointer.Checkpointer('')


if __name__ == '__main__':
  absltest.main()
