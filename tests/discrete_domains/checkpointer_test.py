"""Tests for checkpointer: atomic saves and verified completion markers."""

import hashlib
import json
import os
import pickle
import shutil
from unittest import mock

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from dopamine_per.discrete_domains import checkpointer
from dopamine_per.discrete_domains import tf_checkpoint
from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import safe_pickle
from dopamine_per.file_io import transaction
from tests.support import fault_injection
from tests.support import fixtures


class _DirTestCase(absltest.TestCase):
  """A temporary checkpoint directory, and the files in it."""

  def setUp(self):
    super().setUp()
    self.dir = fixtures.temp_dir(self)

  def _put(self, name, content=b'x', root=None):
    path = os.path.join(root or self.dir, *name.split('/'))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as f:
      f.write(content)

  def _content(self, name):
    with open(os.path.join(self.dir, *name.split('/')), 'rb') as f:
      return f.read()

  def _marker(self, iteration):
    with open(os.path.join(
        self.dir, 'sentinel_checkpoint_complete.{}'.format(iteration))) as f:
      return json.load(f)

  def _listing(self):
    return sorted(os.path.relpath(os.path.join(root, name), self.dir)
                  for root, _, names in os.walk(self.dir) for name in names)


class CheckpointerTest(_DirTestCase):

  def test_save_load_and_marker_lists_files(self):
    saver = checkpointer.Checkpointer(self.dir)
    self._put('tf_ckpt-3.index', b'abc')
    self._put('add_count_ckpt.3.gz', b'abcd')
    self._put('add_count_ckpt.13.gz')  # Another iteration's file.
    data = {'current_iteration': 3, 'state': np.arange(4.0)}
    saver.save_checkpoint(3, data)
    marker = self._marker(3)
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
    self._put('tf_ckpt-0.index', b'abc')
    saver.save_checkpoint(0, {'current_iteration': 0})
    self.assertTrue(saver.is_complete(0))
    self._put('tf_ckpt-0.index', b'abcdef')
    self.assertFalse(saver.is_complete(0))
    self.assertIsNone(saver.load_checkpoint(0))
    self._put('tf_ckpt-0.index', b'abc')
    self.assertTrue(saver.is_complete(0))
    self._put('tf_ckpt-0.index', b'abd')  # Same size, other content.
    self.assertFalse(saver.is_complete(0))
    os.remove(os.path.join(self.dir, 'tf_ckpt-0.index'))
    self.assertIsNone(saver.load_checkpoint(0))
    self.assertIsNone(saver.load_checkpoint(5))  # No marker at all.

  def test_no_marker_no_checkpoint(self):
    self._put('ckpt.2', pickle.dumps({'current_iteration': 2}))
    self.assertEqual(checkpointer.get_latest_checkpoint_number(self.dir), -1)
    self.assertEqual(checkpointer.get_latest_checkpoint_number(
        os.path.join(self.dir, 'missing')), -1)

  def test_dopamine_marker_is_accepted_but_unsafe_pickles_are_not(self):
    self._put('ckpt.1', pickle.dumps({'current_iteration': 1}))
    self._put('sentinel_checkpoint_complete.1', b'done')
    saver = checkpointer.Checkpointer(self.dir)
    self.assertEqual(saver.load_checkpoint(1), {'current_iteration': 1})
    self._put('ckpt.1', pickle.dumps(shutil.rmtree))
    with self.assertRaises(safe_pickle.UnsafePickleError):
      saver.load_checkpoint(1)

  def test_needs_a_directory(self):
    with self.assertRaisesRegex(ValueError, 'No path'):
      checkpointer.Checkpointer('')


class MarkerAndDataFileTest(_DirTestCase):
  """Markers and data files that are damaged or crafted are refused."""

  def setUp(self):
    super().setUp()
    self.saver = checkpointer.Checkpointer(self.dir)
    self.saver.save_checkpoint(3, {'current_iteration': 3})
    self.marker_path = os.path.join(self.dir,
                                    'sentinel_checkpoint_complete.3')
    self.marker = self._marker(3)

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
    for make, remove in ((os.mkfifo, os.remove), (os.mkdir, os.rmdir)):
      make(path)
      self._assert_data_refused(r'ckpt\.3:? is .*not a regular file')
      remove(path)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                r'ckpt\.3 is missing'):
      self.saver.load_verified_checkpoint(3)
    self.assertIsNone(self.saver.load_checkpoint(3))

  def test_iteration_numbers_in_marker_names(self):
    for name in ('sentinel_checkpoint_complete.\u0663',  # An Arabic 3.
                 'sentinel_checkpoint_complete.3.tmp',
                 'sentinel_checkpoint_complete.' + '9' * 200):
      self._put(name, b'done')
    self.assertEqual(checkpointer.get_complete_checkpoint_numbers(self.dir),
                     [3])


class StagedSaveTest(_DirTestCase):
  """The Runner's saves: staged files switched in with ckpt.N and the marker.

  A fake agent writes a few files, one in a subdirectory as a sharded
  memory does, into the directory `begin_checkpoint` returns.
  """

  def _agent_files(self, iteration, version=b'new'):
    return {'tf_ckpt-{}.index'.format(iteration): b'index ' + version,
            'shard_0/add_count_ckpt.{}.gz'.format(iteration):
                b'shard ' + version,
            'checkpoint': b'TF state ' + version}

  def _save(self, saver, iteration, version=b'new'):
    staging = saver.begin_checkpoint(iteration)
    for name, content in self._agent_files(iteration, version).items():
      self._put(name, content, staging)
    saver.commit_checkpoint(iteration, {'current_iteration': iteration,
                                        'version': version})

  def test_marker_lists_exactly_the_files_this_save_wrote(self):
    # Files of iteration 3 that another process put there before the save.
    self._put('foo_ckpt.3.gz', b'foreign')
    self._put('tf_ckpt-3.extra', b'foreign')
    saver = checkpointer.Checkpointer(self.dir)
    self._save(saver, 3)
    self.assertEqual(
        self._marker(3)['files'],
        {name: [len(content), hashlib.sha256(content).hexdigest()]
         for name, content in [
             ('ckpt.3', self._content('ckpt.3')),
             ('tf_ckpt-3.index', b'index new'),
             ('shard_0/add_count_ckpt.3.gz', b'shard new')]})
    # TF's state file moves in with them, unlisted (every save rewrites it);
    # the staging directory is gone; the foreign files are untouched.
    self.assertEqual(self._content('checkpoint'), b'TF state new')
    self.assertEqual(self._listing(), sorted([
        'checkpoint', 'ckpt.3', 'foo_ckpt.3.gz',
        'sentinel_checkpoint_complete.3',
        os.path.join('shard_0', 'add_count_ckpt.3.gz'), 'tf_ckpt-3.extra',
        'tf_ckpt-3.index']))
    self.assertEqual(saver.load_verified_checkpoint(3)['version'], b'new')
    # A foreign file may change; a listed one may not.
    self._put('foo_ckpt.3.gz', b'changed')
    saver.verify(3)
    self._put('shard_0/add_count_ckpt.3.gz', b'shard changed')
    with self.assertRaisesRegex(
        atomic_files.CheckpointError,
        r'shard_0/add_count_ckpt\.3\.gz changed since the checkpoint was '
        r'written \(13 bytes, recorded 9 bytes\)'):
      saver.verify(3)

  def test_saving_again_replaces_the_whole_checkpoint(self):
    saver = checkpointer.Checkpointer(self.dir)
    self._save(saver, 3, b'old')
    self._save(saver, 3, b'new')
    self.assertEqual(saver.load_verified_checkpoint(3)['version'], b'new')
    for name, content in self._agent_files(3, b'new').items():
      self.assertEqual(self._content(name), content)

  def test_a_failure_before_the_commit_leaves_the_old_checkpoint(self):
    saver = checkpointer.Checkpointer(self.dir)
    self._save(saver, 3, b'old')
    old = {name: self._content(name) for name in self._listing()}
    failing = fault_injection.failing
    # (where, what fails, the files left besides the old checkpoint's). The
    # agent's files are adopted in sorted order: those before the failing
    # one are deleted with the other staged files, the rest stay staged.
    points = [
        (transaction.Transaction, 'adopt', failing(
            transaction.Transaction.adopt, 'tf_ckpt-3.index'),
         [os.path.join('.ckpt_staging', 'tf_ckpt-3.index')]),
        (transaction.Transaction, 'write', failing(
            transaction.Transaction.write, 'ckpt.3'), []),
        (transaction.Transaction, 'write', failing(
            transaction.Transaction.write, 'sentinel_checkpoint_complete.3'),
         []),
        # The journal: Transaction.commit deletes every staged file.
        (transaction, 'commit', failing(transaction.commit, 'ckpt_journal'),
         []),
        (checkpointer.pickle, 'dumps', failing(checkpointer.pickle.dumps),
         []),
    ]
    for owner, name, replacement, left in points:
      with self.subTest(name=name, replacement=replacement):
        with mock.patch.object(owner, name, replacement):
          with self.assertRaisesRegex(OSError, fault_injection.INJECTED):
            self._save(saver, 3, b'new')
        self.assertEqual(self._listing(), sorted(list(old) + left))
        self.assertEqual(saver.load_verified_checkpoint(3)['version'], b'old')
        saver.remove_leftovers()
        self.assertEqual({name: self._content(name)
                          for name in self._listing()}, old)

  def test_a_save_killed_after_its_commit_point_is_finished(self):
    saver = checkpointer.Checkpointer(self.dir)
    self._save(saver, 3, b'old')
    # The journal is written, then the process dies after two files were
    # renamed into place (TF's state file, the shard's file).
    replace = atomic_files.replace
    renames = []

    def dying(source, destination):
      if len(renames) == 3:
        raise KeyboardInterrupt('killed')
      renames.append(destination)
      replace(source, destination)

    with mock.patch.object(atomic_files, 'replace', dying):
      with self.assertRaises(KeyboardInterrupt):
        self._save(saver, 3, b'new')
    self.assertEqual([os.path.basename(path) for path in renames],
                     ['ckpt_journal', 'checkpoint', 'add_count_ckpt.3.gz'])
    # Torn: the old marker refuses the files already replaced.
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                'changed since the checkpoint was written'):
      saver.verify(3)
    self.assertTrue(saver.finish_interrupted_save())
    self.assertEqual(saver.load_verified_checkpoint(3)['version'], b'new')
    self.assertFalse(saver.finish_interrupted_save())
    saver.remove_leftovers()
    self.assertEqual(self._listing(), sorted([
        'checkpoint', 'ckpt.3', 'sentinel_checkpoint_complete.3',
        os.path.join('shard_0', 'add_count_ckpt.3.gz'), 'tf_ckpt-3.index']))

  def test_the_next_save_finishes_an_interrupted_one_first(self):
    saver = checkpointer.Checkpointer(self.dir)
    self._save(saver, 3, b'old')
    roll_forward = transaction.roll_forward

    def killed_once_committed(directory, journal_name):
      if os.path.exists(os.path.join(directory, journal_name)):
        raise KeyboardInterrupt('killed')
      return roll_forward(directory, journal_name)

    with mock.patch.object(transaction, 'roll_forward',
                           killed_once_committed):
      with self.assertRaises(KeyboardInterrupt):
        self._save(saver, 3, b'new')
    # Nothing renamed yet: a new save must not overwrite the journal.
    self.assertEqual(saver.load_verified_checkpoint(3)['version'], b'old')
    self._save(saver, 4)
    self.assertEqual(saver.load_verified_checkpoint(3)['version'], b'new')
    self.assertEqual(self._content('tf_ckpt-3.index'), b'index new')

  def test_stale_iterations_lose_every_file_their_marker_lists(self):
    self._put('foo_ckpt.0.gz', b'foreign')
    saver = checkpointer.Checkpointer(self.dir, checkpoint_duration=2,
                                      keep_every=3)
    for iteration in range(6):
      self._save(saver, iteration)
    self.assertEqual(checkpointer.get_complete_checkpoint_numbers(self.dir),
                     [5, 4, 3, 0])
    self.assertEqual(self._listing(), sorted(
        ['checkpoint', 'foo_ckpt.0.gz'] +
        [name for i in (0, 3, 4, 5) for name in (
            'ckpt.{}'.format(i), 'sentinel_checkpoint_complete.{}'.format(i),
            'tf_ckpt-{}.index'.format(i),
            os.path.join('shard_0', 'add_count_ckpt.{}.gz'.format(i)))]))
    for iteration in (5, 4, 3, 0):
      saver.verify(iteration)
    # A Dopamine marker lists nothing: its ckpt.N goes with it, and files
    # that cannot be told from someone else's stay. Dopamine's
    # save_checkpoint prunes too.
    self._put('sentinel_checkpoint_complete.4', b'done')
    saver.save_checkpoint(6, {'current_iteration': 6})
    self.assertEqual(checkpointer.get_complete_checkpoint_numbers(self.dir),
                     [6, 5, 3, 0])
    self.assertFalse(os.path.exists(os.path.join(self.dir, 'ckpt.4')))
    self.assertTrue(os.path.exists(os.path.join(self.dir, 'tf_ckpt-4.index')))

  def test_abort_checkpoint_drops_the_staged_files(self):
    saver = checkpointer.Checkpointer(self.dir)
    self._save(saver, 3)
    kept = {name: self._content(name) for name in self._listing()}
    staging = saver.begin_checkpoint(4)
    self._put('shard_0/add_count_ckpt.4.gz', b'staged', staging)
    saver.abort_checkpoint()
    self.assertFalse(os.path.exists(staging))
    self.assertEqual({name: self._content(name)
                      for name in self._listing()}, kept)
    with self.assertRaisesRegex(ValueError, r'commit_checkpoint\(4\)'):
      saver.commit_checkpoint(4, {})

  def test_commit_needs_the_iteration_begun(self):
    saver = checkpointer.Checkpointer(self.dir, checkpoint_frequency=2)
    self.assertIsNone(saver.begin_checkpoint(3))
    with self.assertRaisesRegex(ValueError, r'commit_checkpoint\(3\) without '
                                r'begin_checkpoint\(3\)'):
      saver.commit_checkpoint(3, {})
    saver.begin_checkpoint(4)
    with self.assertRaisesRegex(ValueError, r'commit_checkpoint\(2\)'):
      saver.commit_checkpoint(2, {})
    self.assertEqual(checkpointer.get_complete_checkpoint_numbers(self.dir), [])

  def test_remove_leftovers_deletes_only_what_saves_leave(self):
    saver = checkpointer.Checkpointer(self.dir)
    self._save(saver, 3)
    kept = self._listing()
    staging = saver.begin_checkpoint(4)
    self._put('tf_ckpt-4.index', b'staged', staging)
    leftovers = ['.ckpt.4.abcdefgh.tmp', '.ckpt_journal.abcdefgh.tmp',
                 '.checkpoint.abcdefgh.tmp',
                 'shard_0/.add_count_ckpt.4.gz.abcdefgh.tmp']
    others = ['.notes.abcdefgh.tmp', 'notes.txt']
    for name in leftovers + others:
      self._put(name, b'x')
    removed = saver.remove_leftovers()
    self.assertEqual(sorted(os.path.relpath(path, self.dir)
                            for path in removed),
                     sorted([os.path.join(*n.split('/')) for n in leftovers] +
                            ['.ckpt_staging']))
    self.assertEqual(self._listing(), sorted(kept + others))

  def test_subdirectory_paths_in_markers(self):
    saver = checkpointer.Checkpointer(self.dir)
    self._save(saver, 3)
    marker = self._marker(3)
    digest = marker['files']['tf_ckpt-3.index']
    # Outside the directory, not normalized, hidden, or of another
    # iteration.
    for path in ('shard_0/../tf_ckpt-3.index', './tf_ckpt-3.index',
                 'shard_0//tf_ckpt-3.index', '.ckpt_staging/tf_ckpt-3.index',
                 'shard_0/.tf_ckpt-3.index', 'shard_3.0/notes',
                 '/tmp/tf_ckpt-3.index', 'shard_0\\tf_ckpt-3.index',
                 os.path.join('..', os.path.basename(self.dir), 'ckpt.3'),
                 'ckpt.4'):
      with self.subTest(path=path):
        self._put('sentinel_checkpoint_complete.3',
                  json.dumps(dict(marker, files={path: digest})).encode())
        with self.assertRaisesRegex(atomic_files.CheckpointError,
                                    'which is not a file name of checkpoint '
                                    '3'):
          saver.verify(3)

  def test_url_paths(self):
    directory = 'ram://checkpointer_test_{}/checkpoints'.format(
        os.path.basename(self.dir))
    saver = checkpointer.Checkpointer(directory)
    staging = saver.begin_checkpoint(3)
    with tf.io.gfile.GFile(staging + '/tf_ckpt-3.index', 'wb') as f:
      f.write(b'index')
    saver.commit_checkpoint(3, {'current_iteration': 3})
    self.assertEqual(saver.load_verified_checkpoint(3),
                     {'current_iteration': 3})
    with tf.io.gfile.GFile(directory + '/sentinel_checkpoint_complete.3',
                           'rb') as f:
      self.assertEqual(sorted(json.loads(f.read())['files']),
                       ['ckpt.3', 'tf_ckpt-3.index'])


class TfCheckpointTest(_DirTestCase):
  """The agents' TF checkpoints: variables checked, values put back."""

  def setUp(self):
    super().setUp()
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
    tf_checkpoint.check_tf_checkpoint(self.prefix, variables)
    tf_checkpoint.check_tf_checkpoint(
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
        tf_checkpoint.check_tf_checkpoint(self.prefix, variables)

  def test_damaged_or_missing_files_are_refused(self):
    _, _, variables = self._graph({'net/kernel': (4, 8), 'net/bias': (8,)})
    data = self.prefix + '.data-00000-of-00001'
    with open(data, 'r+b') as f:
      f.write(b'\xff' * 8)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                r'cannot be read: .*Checksum does not match'):
      tf_checkpoint.check_tf_checkpoint(self.prefix, variables)
    os.remove(data)
    os.mkfifo(data)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                r'data-00000-of-00001:? is .*not a regular file'):
      tf_checkpoint.check_tf_checkpoint(self.prefix, variables)
    with open(self.prefix + '.index', 'wb') as f:
      f.write(b'garbage')
    os.remove(data)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                r'tf_ckpt-1\.index cannot be read'):
      tf_checkpoint.check_tf_checkpoint(self.prefix, variables)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                r'tf_ckpt-7\.index is missing'):
      tf_checkpoint.check_tf_checkpoint(
          os.path.join(self.dir, 'tf_ckpt-7'), variables)

  def test_variable_snapshot_restores_values(self):
    graph, session, variables = self._graph({'a': (3,), 'b': (2, 2)})
    before = session.run(variables)
    snapshot = tf_checkpoint.VariableSnapshot(session, variables)
    with graph.as_default():
      session.run([v.assign(v + 1.0) for v in variables])
    snapshot.restore()
    for old, new in zip(before, session.run(variables)):
      np.testing.assert_array_equal(old, new)

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
