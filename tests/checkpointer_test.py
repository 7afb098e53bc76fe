"""Tests for checkpointer: atomic data files and verified completion markers."""

import hashlib
import json
import os
import pickle
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from dopamine_per.discrete_domains import checkpointer
from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import safe_pickle


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
    marker['files']['ckpt.0'] = list(atomic_files.file_digest(
        os.path.join(self.dir, 'ckpt.0')))
    self._touch('sentinel_checkpoint_complete.0', json.dumps(marker).encode())
    with self.assertRaises(safe_pickle.UnsafePickleError):
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


class MarkerAndDataFileTest(absltest.TestCase):
  """Markers and data files that are damaged or crafted are refused."""

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
    self.saver = checkpointer.Checkpointer(self.dir)
    self.saver.save_checkpoint(3, {'current_iteration': 3})
    self.marker_path = os.path.join(self.dir,
                                    'sentinel_checkpoint_complete.3')
    with open(self.marker_path) as f:
      self.marker = json.load(f)

  def _write_marker(self, marker):
    with open(self.marker_path, 'w') as f:
      f.write(marker if isinstance(marker, str) else json.dumps(marker))

  def _assert_refused(self, reason):
    with self.assertRaisesRegex(atomic_files.CheckpointError, reason):
      self.saver.verify(3)
    with self.assertRaisesRegex(atomic_files.CheckpointError, reason):
      self.saver.load_verified_checkpoint(3)
    self.assertFalse(self.saver.is_complete(3))
    self.assertIsNone(self.saver.load_checkpoint(3))

  def test_marker_naming_a_file_elsewhere_is_refused(self):
    outside = os.path.join(tempfile.mkdtemp(dir=self.dir), 'data.3')
    with open(outside, 'wb') as f:
      f.write(b'not of this checkpoint')
    digest = list(atomic_files.file_digest(outside))
    for name in (outside, os.path.join('..', os.path.basename(self.dir),
                                       'data.3'), 'ckpt.4'):
      marker = json.loads(json.dumps(self.marker))
      marker['files'][name] = digest
      self._write_marker(marker)
      self._assert_refused(r'it lists .*, which is not a file name of '
                           r'checkpoint 3')

  def test_malformed_markers_are_refused(self):
    cases = [
        ('{"format": ', "is neither a completion marker of ours nor "
         "Dopamine's"),
        (dict(self.marker, files=[['ckpt.3', 1]]),
         "its 'files' entry is not a dict"),
        (dict(self.marker, files={'ckpt.3': [1.5, 'ab']}),
         r'the size and SHA-256 of ckpt\.3 are not \[int, hex digest\]'),
        (dict(self.marker, iteration=2), 'it is the marker of iteration 2'),
        ('[' * 100000 + ']' * 100000,
         "is neither a completion marker of ours nor Dopamine's"),
    ]
    for marker, reason in cases:
      self._write_marker(marker)
      self._assert_refused(reason)
    os.remove(self.marker_path)
    os.mkdir(self.marker_path)
    self._assert_refused(r'sentinel_checkpoint_complete\.3:? is .*not a '
                         'regular file')

  def test_listed_file_that_is_not_regular_is_refused(self):
    path = os.path.join(self.dir, 'ckpt.3')
    os.remove(path)
    os.mkfifo(path)
    self._assert_refused(r'ckpt\.3:? is .*not a regular file')

  def _assert_data_refused(self, reason):
    for load in (self.saver.load_verified_checkpoint,
                 self.saver.load_checkpoint):
      with self.assertRaisesRegex(atomic_files.CheckpointError, reason):
        load(3)

  def test_data_file_bounds(self):
    self._write_marker('done')  # Lists no files: only reading checks ckpt.3.
    with mock.patch.object(checkpointer, '_MAX_DATA_BYTES', 8):
      self._assert_data_refused(r'ckpt\.3:? (is )?larger than any experiment '
                                r'data file \(8 bytes\)')
    path = os.path.join(self.dir, 'ckpt.3')
    os.remove(path)
    os.mkfifo(path)
    self._assert_data_refused(r'ckpt\.3:? is .*not a regular file')
    os.remove(path)
    os.mkdir(path)
    self._assert_data_refused(r'ckpt\.3:? is .*not a regular file')
    os.rmdir(path)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                r'ckpt\.3 is missing'):
      self.saver.load_verified_checkpoint(3)
    self.assertIsNone(self.saver.load_checkpoint(3))

  def test_iteration_numbers_in_marker_names(self):
    for name in ('sentinel_checkpoint_complete.\u0663',  # An Arabic 3.
                 'sentinel_checkpoint_complete.3.tmp',
                 'sentinel_checkpoint_complete.' + '9' * 200):
      with open(os.path.join(self.dir, name), 'w') as f:
        f.write('done')
    self.assertEqual(checkpointer.get_complete_checkpoint_numbers(self.dir),
                     [3])


class TfCheckpointTest(absltest.TestCase):
  """The agents' TF checkpoints: variables checked, TF's own state file."""

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
    self.prefix = os.path.join(self.dir, 'tf_ckpt-1')
    graph, session, _ = self._graph({'net/kernel': (4, 8), 'net/bias': (8,)})
    with graph.as_default():
      tf.compat.v1.train.Saver().save(session, self.prefix,
                                      write_meta_graph=False)

  def _graph(self, shapes, dtype=tf.float32):
    graph = tf.Graph()
    with graph.as_default():
      variables = [tf.compat.v1.get_variable(name, shape, dtype=dtype)
                   for name, shape in shapes.items()]
      session = tf.compat.v1.Session(graph=graph)
      self.addCleanup(session.close)
      session.run(tf.compat.v1.global_variables_initializer())
    return graph, session, variables

  def test_matching_variables_pass(self):
    _, _, variables = self._graph({'net/bias': (8,), 'net/kernel': (4, 8)})
    checkpointer.check_tf_checkpoint(self.prefix, variables)
    checkpointer.check_tf_checkpoint(
        self.prefix, {'net/kernel': variables[1], 'net/bias': variables[0]})

  def test_mismatches_name_the_variable_and_both_shapes(self):
    cases = [
        ({'net/kernel': (4, 16), 'net/bias': (8,)}, tf.float32,
         r'tf_ckpt-1 does not match the configured network: variable '
         r'net/kernel has shape \(4, 8\) in the checkpoint, \(4, 16\) in '
         r'the configured network$'),
        ({'net/kernel': (4, 8), 'net/bias': (8,), 'net/extra': (2,)},
         tf.float32, r'variable net/extra of the configured network is not '
         r'in the checkpoint'),
        ({'net/kernel': (4, 8)}, tf.float32,
         r'variable net/bias of the checkpoint is not in the configured '
         r'network'),
        ({'net/kernel': (4, 8), 'net/bias': (8,)}, tf.float64,
         r'variable net/bias has dtype float32 in the checkpoint, float64 in '
         r'the configured network; variable net/kernel has dtype'),
    ]
    for shapes, dtype, reason in cases:
      _, _, variables = self._graph(shapes, dtype)
      with self.assertRaisesRegex(atomic_files.CheckpointError, reason):
        checkpointer.check_tf_checkpoint(self.prefix, variables)

  def test_damaged_or_missing_files_are_refused(self):
    _, _, variables = self._graph({'net/kernel': (4, 8), 'net/bias': (8,)})
    data = self.prefix + '.data-00000-of-00001'
    with open(data, 'r+b') as f:
      f.write(b'\xff' * 8)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                r'cannot be read: .*Checksum does not match'):
      checkpointer.check_tf_checkpoint(self.prefix, variables)
    os.remove(data)
    os.mkfifo(data)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                r'data-00000-of-00001:? is .*not a regular file'):
      checkpointer.check_tf_checkpoint(self.prefix, variables)
    with open(self.prefix + '.index', 'wb') as f:
      f.write(b'garbage')
    os.remove(data)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                r'tf_ckpt-1\.index cannot be read'):
      checkpointer.check_tf_checkpoint(self.prefix, variables)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                r'tf_ckpt-7\.index is missing'):
      checkpointer.check_tf_checkpoint(
          os.path.join(self.dir, 'tf_ckpt-7'), variables)

  def test_variable_snapshot_restores_values(self):
    graph, session, variables = self._graph({'a': (3,), 'b': (2, 2)})
    before = session.run(variables)
    snapshot = checkpointer.VariableSnapshot(session, variables)
    with graph.as_default():
      session.run([v.assign(v + 1.0) for v in variables])
    snapshot.restore()
    for old, new in zip(before, session.run(variables)):
      np.testing.assert_array_equal(old, new)

  def test_recorded_tf_checkpoints_stay_in_the_directory(self):
    state = os.path.join(self.dir, 'checkpoint')
    with open(state, 'w') as f:
      f.write('model_checkpoint_path: "tf_ckpt-4"\n')
      for path in ('/elsewhere/tf_ckpt-1', '../other/tf_ckpt-2',
                   'tf_ckpt-3', 'important_file', 'tf_ckpt-4'):
        f.write('all_model_checkpoint_paths: "{}"\n'.format(path))
    self.assertEqual(checkpointer.recorded_tf_checkpoints(self.dir),
                     [os.path.join(self.dir, 'tf_ckpt-3'),
                      os.path.join(self.dir, 'tf_ckpt-4')])
    with open(state, 'w') as f:
      f.write('garbage {')
    self.assertEqual(checkpointer.recorded_tf_checkpoints(self.dir), [])
    os.remove(state)
    os.mkfifo(state)
    self.assertEqual(checkpointer.recorded_tf_checkpoints(self.dir), [])

  def test_error_summary(self):
    error = tf.errors.DataLossError(
        None, None, "Graph execution error:\n\nDetected at node 'save/Re' "
        'defined at (most recent call last):\n  File "x.py", line 6\n'
        "Node: 'save/Re'\nTensorBundle at x: Checksum does not match\n\t "
        '[[{{node save/Re}}]]')
    self.assertEqual(checkpointer.error_summary(error),
                     'DataLossError: TensorBundle at x: Checksum does not '
                     'match')
    self.assertEqual(checkpointer.error_summary(
        atomic_files.CheckpointError('f is missing')), 'f is missing')
    self.assertEqual(checkpointer.error_summary(MemoryError()), 'MemoryError')
    self.assertLen(checkpointer.error_summary(OSError('x' * 10000)), 500)


if __name__ == '__main__':
  absltest.main()
