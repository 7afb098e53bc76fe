"""Tests for dopamine_per.file_io.transaction: several files replaced as one."""

import hashlib
import json
import os
import textwrap
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import transaction
from tests.support import fixtures

_JOURNAL = 'journal_ckpt.3'
# Reads the journal argv[2] of directory argv[1] and prints why it was
# refused: in a subprocess, as a read that blocks would never return.
_READ_PENDING = textwrap.dedent("""
    import sys
    from dopamine_per.file_io import atomic_files
    from dopamine_per.file_io import transaction
    try:
      transaction.pending(sys.argv[1], sys.argv[2])
      print('read')
    except atomic_files.CorruptCheckpointError as e:
      print('refused: {}'.format(e))
    """)


def _digest(data):
  """The FileDigest of `data`, computed here (not by the code under test)."""
  return atomic_files.FileDigest(len(data), hashlib.sha256(data).hexdigest())


class TransactionTestCase(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = fixtures.temp_dir(self)

  def path(self, *names):
    return os.path.join(self.dir, *names)

  def put(self, name, data):
    os.makedirs(os.path.dirname(self.path(name)), exist_ok=True)
    with open(self.path(name), 'wb') as f:
      f.write(data)

  def content(self, name):
    with open(self.path(name), 'rb') as f:
      return f.read()

  def listing(self):
    return sorted(os.path.relpath(os.path.join(root, name), self.dir)
                  for root, _, names in os.walk(self.dir) for name in names)

  def staged_transaction(self, contents):
    txn = transaction.Transaction(self.dir)
    for name, data in contents.items():
      txn.write(name, lambda f, data=data: f.write(data))
    return txn


class CommitTest(TransactionTestCase):

  def test_commit_replaces_every_target_and_leaves_nothing_else(self):
    self.put('a', b'old a')
    self.put('b', b'old b')
    txn = self.staged_transaction({'a': b'new a', 'b': b'new b',
                                   'sub/c': b'new c'})
    self.assertEqual(txn.digests['a'], _digest(b'new a'))
    # Staged: no target changed yet.
    self.assertEqual(self.content('a'), b'old a')
    self.assertFalse(os.path.exists(self.path('sub', 'c')))
    txn.commit(_JOURNAL)
    self.assertEqual([self.content(n) for n in ('a', 'b', 'sub/c')],
                     [b'new a', b'new b', b'new c'])
    self.assertEqual(self.listing(), ['a', 'b', os.path.join('sub', 'c')])

  @parameterized.parameters(False, True)
  def test_abort_deletes_its_staged_files_only(self, as_data):
    """Also two-phase: a record kept as data is aborted later, anywhere."""
    self.put('a', b'old a')
    self.put('other', b'not staged')
    txn = self.staged_transaction({'a': b'new a', 'sub/b': b'new b'})
    if as_data:
      record = transaction.Record.from_data(
          json.loads(json.dumps(txn.record().to_data())))
      transaction.abort(self.dir, record)
      transaction.abort(self.dir, record)  # Files already gone are skipped.
    else:
      txn.abort()
    self.assertEqual(self.content('a'), b'old a')
    self.assertEqual(self.listing(), ['a', 'other'])

  def test_failing_write_stages_nothing(self):
    txn = transaction.Transaction(self.dir)

    def failing(f):
      f.write(b'partial')
      raise OSError(28, 'No space left on device')

    with self.assertRaisesRegex(OSError, 'No space'):
      txn.write('a', failing)
    self.assertEqual(self.listing(), [])
    self.assertEqual(txn.record().entries, [])

  def test_adopt_moves_another_writers_file(self):
    self.put('.staging/tf_ckpt-3.index', b'index')
    self.put('tf_ckpt-3.index', b'old index')
    txn = transaction.Transaction(self.dir)
    digest = txn.adopt('tf_ckpt-3.index',
                       self.path('.staging', 'tf_ckpt-3.index'))
    self.assertFalse(os.path.exists(self.path('.staging', 'tf_ckpt-3.index')))
    self.assertEqual(self.content('tf_ckpt-3.index'), b'old index')
    txn.commit(_JOURNAL)
    self.assertEqual(self.content('tf_ckpt-3.index'), b'index')
    self.assertEqual(digest, _digest(b'index'))

  @parameterized.parameters('/etc/passwd', '../x', 'a/../b', './a', 'a//b',
                            '', 'a\\b')
  def test_targets_outside_the_directory_are_refused(self, target):
    txn = transaction.Transaction(self.dir)
    with self.assertRaisesRegex(ValueError, 'target must be a path inside'):
      txn.write(target, lambda f: f.write(b'x'))
    self.assertEqual(self.listing(), [])

  def test_a_target_staged_twice_is_refused(self):
    txn = self.staged_transaction({'a': b'1'})
    with self.assertRaisesRegex(ValueError, 'staged twice'):
      txn.write('a', lambda f: f.write(b'2'))

  @parameterized.parameters(0o022, 0o002, 0o077)
  def test_files_get_the_umask_mode(self, umask):
    old = os.umask(umask)
    try:
      self.put('a', b'old')
      os.chmod(self.path('a'), 0o600)
      self.staged_transaction({'a': b'new', 'b': b'new'}).commit(_JOURNAL)
    finally:
      os.umask(old)
    for name in ('a', 'b'):
      self.assertEqual(os.stat(self.path(name)).st_mode & 0o777,
                       0o666 & ~umask, name)


class InterruptedCommitTest(TransactionTestCase):
  """A commit cut short after its journal: readers and roll_forward."""

  def interrupted_commit(self, renames_done):
    """Commits {a, b, c} over old files; fails after `renames_done` renames."""
    for name in 'abc':
      self.put(name, b'old ' + name.encode())
    txn = self.staged_transaction(
        {name: b'new ' + name.encode() for name in 'abc'})
    real_replace = atomic_files.replace
    calls = []

    def replace(source, destination):
      if destination.endswith(_JOURNAL):  # The journal's own atomic write.
        return real_replace(source, destination)
      if len(calls) == renames_done:
        raise OSError(5, 'Input/output error')
      calls.append(destination)
      return real_replace(source, destination)

    with mock.patch.object(atomic_files, 'replace', side_effect=replace):
      if renames_done < 3:
        with self.assertRaises(OSError):
          txn.commit(_JOURNAL)
      else:  # Every rename done; cut short before the journal is deleted.
        with mock.patch.object(atomic_files, 'remove_if_exists',
                               side_effect=OSError(5, 'I/O error')):
          with self.assertRaises(OSError):
            txn.commit(_JOURNAL)

  @parameterized.parameters(0, 1, 2, 3)
  def test_readers_see_the_new_set_through_the_journal(self, renames_done):
    self.interrupted_commit(renames_done)
    record = transaction.pending(self.dir, _JOURNAL)
    self.assertIsNotNone(record)
    for name in 'abc':
      with open(record.path_of(self.dir, name), 'rb') as f:
        self.assertEqual(f.read(), b'new ' + name.encode())
      self.assertEqual(record.digest_of(name), _digest(b'new ' + name.encode()))

  @parameterized.parameters(0, 1, 2, 3)
  def test_roll_forward_finishes_and_is_idempotent(self, renames_done):
    self.interrupted_commit(renames_done)
    self.assertTrue(transaction.roll_forward(self.dir, _JOURNAL))
    self.assertEqual([self.content(n) for n in 'abc'],
                     [b'new a', b'new b', b'new c'])
    self.assertEqual(self.listing(), ['a', 'b', 'c'])
    self.assertFalse(transaction.roll_forward(self.dir, _JOURNAL))
    self.assertIsNone(transaction.pending(self.dir, _JOURNAL))

  def test_a_record_commits_in_another_call(self):
    """Two-phase: stage here, keep the record as data, commit later."""
    self.put('a', b'old')
    data = self.staged_transaction({'a': b'new'}).record().to_data()
    data = json.loads(json.dumps(data))  # As sent to another process.
    self.assertEqual(self.content('a'), b'old')
    transaction.commit(self.dir, _JOURNAL,
                       transaction.Record.from_data(data))
    self.assertEqual(self.content('a'), b'new')
    self.assertEqual(self.listing(), ['a'])


class MalformedJournalTest(TransactionTestCase):

  def write_journal(self, content):
    with open(self.path(_JOURNAL), 'wb') as f:
      f.write(content if isinstance(content, bytes) else
              json.dumps(content).encode())

  @parameterized.named_parameters(
      ('not_json', b'{'),
      ('deep_nesting', b'[' * 100000),
      ('invalid_utf8', b'\xff\xfe'),
      ('a_list', [1, 2]),
      ('wrong_format', {'format': 'x', 'files': []}),
      ('files_not_a_list', {'format': transaction.JOURNAL_FORMAT,
                            'files': {}}),
      ('absolute_target', ['/etc/passwd', '/etc/.passwd.abcdefgh.tmp', 1,
                           '0' * 64]),
      ('escaping_target', ['../a', '../.a.abcdefgh.tmp', 1, '0' * 64]),
      ('staged_not_a_temporary', ['a', 'b', 1, '0' * 64]),
      ('staged_elsewhere', ['a', 'sub/.a.abcdefgh.tmp', 1, '0' * 64]),
      ('bad_size', ['a', '.a.abcdefgh.tmp', -1, '0' * 64]),
      ('bool_size', ['a', '.a.abcdefgh.tmp', True, '0' * 64]),
      ('bad_sha', ['a', '.a.abcdefgh.tmp', 1, 'x' * 64]),
      ('short_entry', ['a', '.a.abcdefgh.tmp']),
  )
  def test_refused_and_nothing_renamed(self, content):
    if isinstance(content, list) and content and isinstance(content[0], str):
      content = {'format': transaction.JOURNAL_FORMAT, 'files': [content]}
    self.put('.a.abcdefgh.tmp', b'staged')
    self.put('b', b'b')
    self.write_journal(content)
    before = self.listing()
    with self.assertRaises(atomic_files.CorruptCheckpointError):
      transaction.roll_forward(self.dir, _JOURNAL)
    self.assertEqual(self.listing(), before)

  def test_a_target_listed_twice_is_refused(self):
    entry = ['a', '.a.abcdefgh.tmp', 3, '0' * 64]
    self.write_journal({'format': transaction.JOURNAL_FORMAT,
                        'files': [entry, entry]})
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'listed twice'):
      transaction.pending(self.dir, _JOURNAL)

  def test_oversized_journal_is_refused(self):
    with open(self.path(_JOURNAL), 'wb') as f:
      f.truncate(1 << 25)
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'larger than'):
      transaction.pending(self.dir, _JOURNAL)

  def test_fifo_journal_is_refused_without_blocking(self):
    # Opening a FIFO for reading waits for a writer: a regression times out
    # (subprocess.TimeoutExpired) instead of hanging the test.
    os.mkfifo(self.path(_JOURNAL))
    reader = fixtures.run_python(['-c', _READ_PENDING, self.dir, _JOURNAL], 60)
    self.assertEqual(reader.returncode, 0, reader.stderr)
    self.assertRegex(reader.stdout, r'^refused: .*FIFO')


if __name__ == '__main__':
  absltest.main()
