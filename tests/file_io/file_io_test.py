"""Tests for dopamine_per.file_io: atomic writes, safe pickles, gzip'd files."""

import collections
import gzip
import io
import os
import pickle
import random
import shutil
import struct

from absl.testing import absltest
from absl.testing import parameterized
from dopamine.tf.replay_memory import sum_tree as dopamine_sum_tree
import numpy as np

from dopamine_per import errors
from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.file_io import safe_pickle
from dopamine_per.replay_memory import sum_tree
from tests.support import bounded_loads
from tests.support import fixtures


class _Evil(object):

  def __reduce__(self):
    return (os.system, ('echo pwned',))


def _npy_bytes(array):
  raw = io.BytesIO()
  np.save(raw, array, allow_pickle=True)
  return raw.getvalue()


def _npy_with_header(header, version=1, data=b''):
  """A raw .npy stream with a hand-written header (no validation)."""
  length = struct.pack('<H' if version == 1 else '<I', len(header))
  return b'\x93NUMPY' + bytes([version, 0]) + length + header + data


def _isolated(load, timeout=120):
  """`bounded_loads.measure_loads`' report of the one expression `load`."""
  return bounded_loads.measure_loads({'': load}, timeout=timeout)['']


class IoTestCase(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = fixtures.temp_dir(self)

  def path(self, name='f.gz'):
    return os.path.join(self.dir, name)

  def write_raw(self, data, name='f.gz'):
    with open(self.path(name), 'wb') as f:
      f.write(data)
    return self.path(name)


class NpyTest(IoTestCase):

  @parameterized.named_parameters(
      ('uint8', np.arange(24, dtype=np.uint8).reshape(2, 3, 4)),
      ('float32', np.linspace(0, 1, 7, dtype=np.float32)),
      ('scalar', np.array(12345)),
      ('empty', np.zeros((0, 3), np.int32)),
      ('bool', np.array([True, False])),
      ('fortran', np.asfortranarray(np.arange(12.).reshape(3, 4))),
  )
  def test_round_trip_and_dopamine_format(self, array):
    path = self.path()
    gzip_files.save_npy_gz(path, array)
    with gzip.open(path) as f:  # How Dopamine reads it.
      np.testing.assert_array_equal(np.load(f, allow_pickle=False), array)
    loaded = gzip_files.load_npy_gz(path, shape=array.shape,
                                       dtype=array.dtype)
    np.testing.assert_array_equal(loaded, array)
    self.assertEqual(loaded.dtype, array.dtype)

  @parameterized.parameters(('<i8', np.int64), ('>f4', np.float32))
  def test_reads_what_dopamine_writes(self, written, read_as):
    array = np.arange(10, dtype=written)  # Big-endian is converted.
    path = self.write_raw(gzip.compress(_npy_bytes(array)))
    loaded = gzip_files.load_npy_gz(path, dtype=read_as)
    self.assertEqual(loaded.dtype, np.dtype(read_as))
    np.testing.assert_array_equal(loaded, array)

  @parameterized.named_parameters(
      ('shape', dict(shape=(4,)), r'shape \(5,\), expected \(4,\)'),
      ('dtype', dict(dtype=np.float32), 'dtype int64, expected float32'),
  )
  def test_mismatch(self, kwargs, message):
    gzip_files.save_npy_gz(self.path(), np.arange(5))
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'f.gz: array has ' + message):
      gzip_files.load_npy_gz(self.path(), **kwargs)

  def test_object_arrays_are_refused(self):
    array = np.array([{'a': 1}], dtype=object)
    path = self.write_raw(gzip.compress(_npy_bytes(array)))
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'f.gz: holds Python objects'):
      gzip_files.load_npy_gz(path)
    with self.assertRaisesRegex(ValueError, 'object array'):
      gzip_files.save_npy_gz(self.path('g.gz'), array)

  def test_corruption(self):
    data = gzip.compress(_npy_bytes(np.arange(1000)))
    cases = {
        'truncated': data[:len(data) // 2],
        'truncated_header': data[:12],
        'not_gzip': b'plain bytes, no gzip here',
        'bad_crc': data[:-8] + bytes(8),
        'not_npy': gzip.compress(b'\x93NUMPY garbage'),
        'short_data': gzip.compress(_npy_bytes(np.arange(1000))[:-10]),
        'trailing': gzip.compress(_npy_bytes(np.arange(1000)) + b'x'),
        'empty': b'',
    }
    for name, corrupt in cases.items():
      path = self.write_raw(corrupt, name + '.gz')
      with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                  name + '.gz', msg=name):
        gzip_files.load_npy_gz(path)

  def test_missing_file(self):
    for load in (gzip_files.load_npy_gz, gzip_files.load_pickle_gz):
      with self.assertRaises(FileNotFoundError):
        load(self.path('missing.gz'))


class PickleTest(IoTestCase):

  PLAIN = {
      'none': None, 'bool': True, 'int': 2**70, 'float': 1.5,
      'complex': 1 + 2j, 'str': 'text', 'bytes': b'\x00\xff',
      'list': [1, [2]], 'tuple': (1, 'a'), 'set': {1, 2},
      'frozenset': frozenset([3]), 'bytearray': bytearray(b'ab'),
  }

  @parameterized.parameters(range(pickle.HIGHEST_PROTOCOL + 1))
  def test_plain_data_in_every_protocol(self, protocol):
    value = dict(self.PLAIN)
    value.update({
        'array': np.arange(6, dtype=np.float32).reshape(2, 3),
        'scalar': np.int64(7), 'float32': np.float32(0.5),
        'dtype': np.dtype('uint8'),
        'numpy_set': {np.int64(3), np.int64(4)},
    })
    path = self.write_raw(gzip.compress(pickle.dumps(value, protocol)))
    loaded = gzip_files.load_pickle_gz(path)
    self.assertEqual(loaded.keys(), value.keys())
    for key in self.PLAIN:
      self.assertEqual(loaded[key], value[key], key)
    np.testing.assert_array_equal(loaded['array'], value['array'])
    self.assertEqual(loaded['scalar'], 7)
    self.assertEqual(loaded['numpy_set'], {3, 4})
    self.assertEqual(loaded['dtype'], np.dtype('uint8'))

  def test_numpy_1_module_names(self):
    data = pickle.dumps(np.arange(3.0), protocol=2)
    data = data.replace(b'numpy._core.multiarray', b'numpy.core.multiarray')
    self.assertIn(b'numpy.core.multiarray', data)
    loaded = safe_pickle.restricted_loads(data)
    np.testing.assert_array_equal(loaded, [0.0, 1.0, 2.0])

  @parameterized.named_parameters(
      ('os_system', _Evil(), r'global (posix|os|nt)\.system'),
      ('counter', collections.Counter('ab'), 'global collections.Counter'),
      ('ordered_dict', collections.OrderedDict(a=1),
       'global collections.OrderedDict'),
      ('function', len, 'global builtins.len'),
  )
  def test_refuses_other_globals(self, value, message):
    path = self.write_raw(gzip.compress(pickle.dumps(value)))
    with self.assertRaisesRegex(safe_pickle.UnsafePickleError,
                                'f.gz: refusing to unpickle ' + message):
      gzip_files.load_pickle_gz(path)
    # Catchable both ways.
    with self.assertRaises(pickle.UnpicklingError):
      gzip_files.load_pickle_gz(path)
    with self.assertRaises(ValueError):
      gzip_files.load_pickle_gz(path)

  def test_codecs_encode_only_for_latin1(self):
    data = (b'\x80\x02c_codecs\nencode\nq\x00X\x03\x00\x00\x00abcX\x05\x00'
            b'\x00\x00rot13\x86R.')
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'latin1'):
      safe_pickle.restricted_loads(data)

  def test_corruption(self):
    data = gzip.compress(pickle.dumps({'a': list(range(1000))}))
    cases = {
        'truncated_gzip': data[:len(data) // 2],
        'truncated_pickle': gzip.compress(
            pickle.dumps({'a': list(range(1000))})[:-20]),
        'garbage': gzip.compress(b'not a pickle'),
        'not_gzip': b'not gzip',
    }
    for name, corrupt in cases.items():
      path = self.write_raw(corrupt, name + '.gz')
      with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                  name + '.gz', msg=name):
        gzip_files.load_pickle_gz(path)

  def test_save_pickle_is_dopamine_readable(self):
    gzip_files.save_pickle_gz(self.path(), {1, 2, 3})
    with gzip.open(self.path()) as f:
      self.assertEqual(pickle.load(f), {1, 2, 3})


class SumTreePickleTest(IoTestCase):

  def _dopamine_tree(self):
    tree = dopamine_sum_tree.SumTree(6)
    for i, value in enumerate([0.5, 1.0, 0.0, 2.0, np.float32(0.25), 3.0]):
      tree.set(i, value)
    return tree

  def test_dopamine_pickle_loads_as_state(self):
    tree = self._dopamine_tree()
    path = self.write_raw(gzip.compress(pickle.dumps(tree)))
    loaded = gzip_files.load_pickle_gz(path)
    self.assertIsInstance(loaded, safe_pickle.PickledSumTreeState)
    self.assertEqual(loaded.source,
                     'dopamine.tf.replay_memory.sum_tree.SumTree')
    self.assertEqual(sorted(loaded.state), ['max_recorded_priority', 'nodes'])
    for a, b in zip(loaded.state['nodes'], tree.nodes):
      np.testing.assert_array_equal(a, b)
    ours = sum_tree.SumTree(6)
    ours.set_state(loaded.state)
    np.testing.assert_array_equal(ours.get(np.arange(6)),
                                  [0.5, 1.0, 0.0, 2.0, 0.25, 3.0])

  @parameterized.parameters(sorted(safe_pickle.SUM_TREE_GLOBALS))
  def test_every_sum_tree_global(self, module, name):
    state = {'nodes': [np.array([1.0]), np.array([1.0, 0.0])],
             'max_recorded_priority': 1.0}
    data = safe_pickle.pickle_as_instance(module, name, state)
    loaded = safe_pickle.restricted_loads(data)
    self.assertEqual(loaded.source, module + '.' + name)
    self.assertEqual(loaded.state['max_recorded_priority'], 1.0)

  def test_written_tree_loads_in_dopamine(self):
    ours = sum_tree.SumTree(6)
    ours.set(np.arange(6), [0.5, 1.0, 0.0, 2.0, 0.25, 3.0])
    gzip_files.save_dopamine_sum_tree_gz(self.path(), ours.get_state())
    with gzip.open(self.path()) as f:  # How Dopamine reads it.
      theirs = pickle.load(f)
    self.assertIsInstance(theirs, dopamine_sum_tree.SumTree)
    self.assertEqual(theirs._total_priority(), 6.75)
    self.assertEqual(theirs.get(3), 2.0)
    random.seed(4)
    theirs_draws = theirs.stratified_sample(20)
    random.seed(4)
    np.testing.assert_array_equal(ours.stratified_sample(20), theirs_draws)
    theirs.set(2, 1.0)  # Still a working Dopamine tree.
    self.assertEqual(theirs._total_priority(), 7.75)
    # And it reads back as a state.
    loaded = gzip_files.load_pickle_gz(self.path())
    self.assertEqual(loaded.state['max_recorded_priority'], 3.0)

  def test_pickle_as_instance_rejects_bad_names(self):
    with self.assertRaisesRegex(ValueError, 'dotted identifier'):
      safe_pickle.pickle_as_instance('os\nsystem', 'x', {})
    with self.assertRaisesRegex(ValueError, 'dict'):
      safe_pickle.pickle_as_instance('a.b', 'C', [1])

  def test_non_dict_state_is_refused(self):
    data = safe_pickle.pickle_as_instance(
        'dopamine.tf.replay_memory.sum_tree', 'SumTree', {'nodes': []})
    # Replace the dict state by a list: BUILD must refuse it.
    body = pickle.dumps([1], protocol=3)[2:-1]
    start = data.index(b'\x81') + 1
    data = data[:start] + body + b'b.'
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'not a dict'):
      safe_pickle.restricted_loads(data)


class AtomicWriteTest(IoTestCase):

  def test_replaces_content_and_failure_keeps_it_with_no_temp_file(self):
    path = self.path('x')
    atomic_files.atomic_write(path, lambda f: f.write(b'one'))
    atomic_files.atomic_write(path, lambda f: f.write(b'old'))

    def failing(f):
      f.write(b'partial')
      raise RuntimeError('disk on fire')

    with self.assertRaisesRegex(RuntimeError, 'disk on fire'):
      atomic_files.atomic_write(path, failing)
    with open(path, 'rb') as f:
      self.assertEqual(f.read(), b'old')
    self.assertEqual(os.listdir(self.dir), ['x'])

  def test_new_files_get_the_mode_open_gives(self):
    # mkstemp's 0600 kept teammates on shared storage from reading logs.
    for umask in (0o022, 0o002, 0o077):
      old = os.umask(umask)
      try:
        path = self.path('x{:o}'.format(umask))
        atomic_files.atomic_write(path, lambda f: f.write(b'1'))
        gzip_files.save_npy_gz(path + '.gz', np.arange(2))
        with open(self.path('plain'), 'w'):
          pass
      finally:
        os.umask(old)
      for name in (path, path + '.gz', self.path('plain')):
        self.assertEqual(os.stat(name).st_mode & 0o777, 0o666 & ~umask,
                         (name, oct(umask)))
      os.remove(self.path('plain'))

  def test_checkpoint_filename(self):
    self.assertEqual(gzip_files.checkpoint_filename('d', 'add_count', 3),
                     os.path.join('d', 'add_count_ckpt.3.gz'))

  @parameterized.parameters('local', 'gfile')
  def test_save_load_exists_and_remove(self, kind):
    directory = self.dir if kind == 'local' else 'ram://file_io_test_{}'.format(
        random.getrandbits(32))
    path = directory + '/a_ckpt.1.gz'
    self.assertFalse(atomic_files.exists(path))
    self.assertFalse(atomic_files.remove_if_exists(path))
    gzip_files.save_npy_gz(path, np.arange(4))
    gzip_files.save_npy_gz(path, np.arange(5))
    np.testing.assert_array_equal(gzip_files.load_npy_gz(path),
                                  np.arange(5))
    gzip_files.save_pickle_gz(directory + '/b', {1})
    self.assertEqual(gzip_files.load_pickle_gz(directory + '/b'), {1})
    self.assertTrue(atomic_files.exists(path))
    self.assertTrue(atomic_files.remove_if_exists(path))
    self.assertFalse(atomic_files.exists(path))


class BoundedReadTest(IoTestCase):
  """Issue 12: reading is bounded, whatever a file claims or inflates to."""

  def test_giant_npy_shape_refused_before_allocating(self):
    # Declares 10**12 int64 (7.28 TiB): was a MemoryError from np.empty.
    header = b"{'descr': '<i8', 'fortran_order': False, 'shape': (10**12,), }"
    header = header.replace(b'10**12', str(10**12).encode())
    path = self.write_raw(gzip.compress(_npy_with_header(header)))
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'larger than this file can hold'):
      gzip_files.load_npy_gz(path)  # DEFAULT_MAX_ARRAY_BYTES.
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                r'f.gz: array of shape \(1000000000000,\) '
                                r'and dtype int64 \(8000000000000 bytes\) is '
                                r'larger than this file can hold \(16 bytes\)'):
      gzip_files.load_npy_gz(path, max_bytes=16)

  def test_zero_byte_elements_count(self):
    header = ("{'descr': '|V0', 'fortran_order': False, 'shape': (%d,), }"
              % 10**15).encode()
    path = self.write_raw(gzip.compress(_npy_with_header(header)))
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'larger than'):
      gzip_files.load_npy_gz(path)

  def test_npy_header_length_is_capped(self):
    # A version-2 header may declare 4 GiB; NumPy would read it all first.
    path = self.write_raw(gzip.compress(
        _npy_with_header(b' ' * 70000, version=2)))
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                r'header of 70000 bytes'):
      gzip_files.load_npy_gz(path)

  def test_hostile_header_is_a_checkpoint_error(self):
    nested = b'(' * 5000 + b')' * 5000
    for header in (b"{'descr': " + nested + b'}', b'\xff\xfe',
                   b"{'descr': '<i8', 'fortran_order': False, "
                   b"'shape': (-5,), }"):
      path = self.write_raw(gzip.compress(_npy_with_header(header)))
      with self.assertRaises(atomic_files.CorruptCheckpointError,
                             msg=header[:20]):
        gzip_files.load_npy_gz(path)

  @parameterized.parameters(
      (', limits=safe_pickle.PickleLimits(1 << 20, 1 << 16, 8)', 1 << 20,
       256 << 10),
      # DEFAULT_PICKLE_LIMITS.max_bytes (256 MiB) are read, plus some slack.
      ('', 1 << 28, 600 << 10))
  def test_pickle_bomb_in_bounded_memory(self, limits, max_bytes,
                                         max_growth_kib):
    # BINBYTES8 of 2 GiB, all zeros, in a file of 2 MB: was decompressed
    # whole (gz.read()) before any check.
    path = self.write_raw(bounded_loads.gzip_bomb(
        b'\x80\x04\x8e' + struct.pack('<Q', 2 << 30), 2 << 30))
    report = _isolated('gzip_files.load_pickle_gz({!r}{})'.format(path,
                                                                  limits))
    self.assertStartsWith(report['outcome'], 'refused: ')
    self.assertIn('decompresses to more than {} bytes'.format(max_bytes),
                  report['outcome'])
    self.assertLess(report['peak_growth_kib'], max_growth_kib)

  @parameterized.parameters(
      # A list nested 200,000 deep: its repr (in an error message) raised
      # RecursionError.
      b'\x80\x04' + b']' * 200000 + b'a' * 199999 + b'.',
      b'\x80\x04]\x94h\x00a.')  # A list that contains itself.
  def test_deep_nesting_and_cycles_are_refused(self, data):
    with self.assertRaisesRegex(
        atomic_files.CorruptCheckpointError,
        r'<bytes>: data nested deeper than 64 levels \(or cyclic\)'):
      safe_pickle.restricted_loads(data)

  def test_deep_tuples_in_a_set_do_not_crash(self):
    # Hashing a tuple nested 10**6 deep (to add it to a set) overflowed the
    # C stack: the process died with SIGSEGV.
    report = _isolated("safe_pickle.restricted_loads(b'\\x80\\x04\\x8f(K\\x01'"
                       " + b'\\x85' * 10**6 + b'\\x90.')")
    self.assertStartsWith(report['outcome'], 'refused: ')
    self.assertIn('tuples nested deeper than 64 levels', report['outcome'])

  def test_shared_references_count_at_each_use(self):
    # 10,000 references to one list of 10,000 floats: 100 KB of pickle,
    # 10**8 elements once converted (np.asarray, set()).
    inner = [0.5] * 10000
    data = pickle.dumps([inner] * 10000, protocol=4)
    self.assertLess(len(data), 200000)
    limits = safe_pickle.PickleLimits(1 << 20, 10**6, 8)
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'more than 1000000 elements'):
      safe_pickle.restricted_loads(data, limits=limits)
    # The same data, unshared and within bounds, loads.
    self.assertLen(safe_pickle.restricted_loads(
        pickle.dumps([inner] * 50), limits=limits), 50)

  def test_constructors_cannot_allocate(self):
    cases = {
        # bytearray(2**30): a zeroed GiB.
        'bytearray': b'\x80\x02c__builtin__\nbytearray\nJ\x00\x00\x00@\x85R.',
        # numpy.ndarray((2**30,)) and its __new__: uninitialized memory.
        'ndarray': b'\x80\x02cnumpy\nndarray\nJ\x00\x00\x00@\x85\x85R.',
        'ndarray_new': b'\x80\x02cnumpy\nndarray\nJ\x00\x00\x00@\x85\x85\x81.',
        # _reconstruct(ndarray, (2**30,), 'b'): NumPy's own pickles say (0,).
        'reconstruct': (b'\x80\x02cnumpy._core.multiarray\n_reconstruct\n'
                        b'cnumpy\nndarray\nJ\x00\x00\x00@\x85C\x01b\x87R.'),
        # set() of anything but a list or tuple (of an array of 10**15
        # zero-byte elements, it would iterate without end).
        'set_of_array': b'\x80\x02c__builtin__\nset\nC\x00\x85R.',
    }
    for name, data in cases.items():
      with self.assertRaises(atomic_files.CorruptCheckpointError, msg=name):
        safe_pickle.restricted_loads(data)

  def test_zero_byte_array_elements_count(self):
    # An array of 10**15 elements of zero bytes fits in a 200-byte pickle.
    original = pickle.dumps(np.zeros(3, 'V0'), protocol=3)
    data = original.replace(b'(K\x01K\x03\x85',
                            b'(K\x01\x8a\x07' + (10**15).to_bytes(7, 'little')
                            + b'\x85')
    self.assertNotEqual(data, original)
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'more than'):
      safe_pickle.restricted_loads(data)

  def test_bounds_keep_legitimate_data(self):
    value = {'files': {'a': (1, 'f' * 64)}, 'set': set(range(1000)),
             'nodes': [np.zeros(2**k) for k in range(12)], 'text': 'x' * 800}
    limits = safe_pickle.PickleLimits(1 << 20, 6000, 4)
    loaded = safe_pickle.restricted_loads(pickle.dumps(value), limits=limits)
    self.assertEqual(loaded['set'], value['set'])
    self.assertEqual(loaded['files'], value['files'])


class RegularFileTest(IoTestCase):
  """Only regular files are read; nothing blocks."""

  def test_directory_is_refused(self):
    os.mkdir(self.path('d.gz'))
    for load in (gzip_files.load_npy_gz, gzip_files.load_pickle_gz,
                 atomic_files.file_digest):
      with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                  'd.gz: is a directory, not a regular file'):
        load(self.path('d.gz'))

  def test_device_is_refused_without_reading(self):
    os.symlink('/dev/zero', self.path('zero.gz'))
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'zero.gz: is a character device'):
      gzip_files.load_pickle_gz(self.path('zero.gz'))
    # file_digest read /dev/zero forever.
    report = _isolated('atomic_files.file_digest({!r})'.format(
        self.path('zero.gz')), timeout=60)
    self.assertStartsWith(report['outcome'], 'refused: ')

  def test_fifo_is_refused_without_blocking(self):
    # Opening a FIFO for reading waits for a writer: forever.
    os.mkfifo(self.path('fifo.gz'))
    for call in ('gzip_files.load_npy_gz', 'gzip_files.load_pickle_gz',
                 'atomic_files.file_digest'):
      report = _isolated('{}({!r})'.format(call, self.path('fifo.gz')),
                         timeout=60)
      self.assertStartsWith(report['outcome'], 'refused: ', call)
      self.assertIn('is a FIFO, not a regular file', report['outcome'])

  def test_symlink_to_regular_file_is_read(self):
    gzip_files.save_pickle_gz(self.path('real.gz'), {1})
    os.symlink(self.path('real.gz'), self.path('link.gz'))
    self.assertEqual(gzip_files.load_pickle_gz(self.path('link.gz')), {1})


class ErrorsTest(IoTestCase):

  def test_describe_never_raises(self):
    deep = []
    for _ in range(100000):
      deep = [deep]

    class BadRepr(object):

      def __repr__(self):
        raise RuntimeError('no')

    self.assertEqual(errors.describe(10**5000), 'an int of about 10**5000')
    self.assertEqual(errors.describe(-10**400), 'an int of about -10**400')
    self.assertEqual(errors.describe(deep), 'a list of 1 items')
    self.assertEqual(errors.describe(BadRepr()), 'a BadRepr')
    self.assertEqual(errors.describe((1, 2.5)), '(1, 2.5)')
    self.assertLen(errors.describe('x' * 1000), 60)

  def test_refusing_converts_any_error(self):
    for error in (MemoryError(), OverflowError('big'), RecursionError(),
                  AttributeError('files'), IsADirectoryError(21, 'dir')):
      with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                  '^the/file: unusable: ' +
                                  type(error).__name__):
        with atomic_files.refusing('the/file'):
          raise error
    original = safe_pickle.UnsafePickleError('x')
    with self.assertRaises(safe_pickle.UnsafePickleError) as raised:
      with atomic_files.refusing('the/file'):
        raise original
    self.assertIs(raised.exception, original)


class RemoveTemporariesTest(IoTestCase):

  def _touch(self, name):
    with open(self.path(name), 'wb') as f:
      f.write(b'x')

  def test_removes_only_matching_temporaries(self):
    ours = ['.a_ckpt.1.gz.k3j_9zqa.tmp', '.a_ckpt.7.gz.00000000.tmp']
    kept = ['.b_ckpt.1.gz.k3j_9zqa.tmp',  # Not a target.
            '.a_ckpt.1.gz.tmp',  # Not atomic_write's name.
            'a_ckpt.1.gz.k3j_9zqa.tmp',  # No leading dot.
            '.a_ckpt.1.gz.K3J_9ZQA.tmp',  # Not mkstemp's characters.
            'a_ckpt.1.gz', 'notes.txt']
    for name in ours + kept:
      self._touch(name)
    os.mkdir(self.path('.a_ckpt.2.gz.abcdefgh.tmp'))  # Not a file.
    kept.append('.a_ckpt.2.gz.abcdefgh.tmp')
    removed = atomic_files.remove_temporaries(
        self.dir, lambda target: target.startswith('a_ckpt.'))
    self.assertCountEqual(removed, [self.path(name) for name in ours])
    self.assertCountEqual(os.listdir(self.dir), kept)

  def test_matches_what_atomic_write_leaves(self):
    target = self.path('a_ckpt.3.gz')

    def interrupted(f):
      f.write(b'partial')
      # What a SIGKILL leaves: the temporary, under its own name.
      leftover.extend(n for n in os.listdir(self.dir) if n.endswith('.tmp'))
      shutil.copy(os.path.join(self.dir, leftover[0]),
                  self.path('copy_of_temp'))
      raise RuntimeError('killed')

    leftover = []
    with self.assertRaises(RuntimeError):
      atomic_files.atomic_write(target, interrupted)
    os.rename(self.path('copy_of_temp'), self.path(leftover[0]))
    self.assertEqual(
        atomic_files.remove_temporaries(self.dir,
                                         lambda name: name == 'a_ckpt.3.gz'),
        [self.path(leftover[0])])
    self.assertEqual(os.listdir(self.dir), [])


if __name__ == '__main__':
  absltest.main()
