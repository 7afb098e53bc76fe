"""Tests for dopamine_per.replay_memory.checkpoint_io."""

import collections
import gzip
import io
import os
import pickle
import random
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
from dopamine.tf.replay_memory import sum_tree as dopamine_sum_tree
import numpy as np

from dopamine_per.replay_memory import checkpoint_io
from dopamine_per.replay_memory import sum_tree


class _Evil(object):

  def __reduce__(self):
    return (os.system, ('echo pwned',))


def _npy_bytes(array):
  raw = io.BytesIO()
  np.save(raw, array, allow_pickle=True)
  return raw.getvalue()


class IoTestCase(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

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
    checkpoint_io.save_npy_gz(path, array)
    with gzip.open(path) as f:  # How Dopamine reads it.
      np.testing.assert_array_equal(np.load(f, allow_pickle=False), array)
    loaded = checkpoint_io.load_npy_gz(path, shape=array.shape,
                                       dtype=array.dtype)
    np.testing.assert_array_equal(loaded, array)
    self.assertEqual(loaded.dtype, array.dtype)

  def test_reads_what_dopamine_writes(self):
    array = np.arange(10, dtype=np.int64)
    path = self.write_raw(gzip.compress(_npy_bytes(array)))
    np.testing.assert_array_equal(checkpoint_io.load_npy_gz(path), array)

  def test_big_endian_is_converted(self):
    array = np.arange(5, dtype='>f4')
    path = self.write_raw(gzip.compress(_npy_bytes(array)))
    loaded = checkpoint_io.load_npy_gz(path, dtype=np.float32)
    self.assertEqual(loaded.dtype, np.dtype(np.float32))
    np.testing.assert_array_equal(loaded, array)

  def test_deterministic_bytes(self):
    checkpoint_io.save_npy_gz(self.path('a.gz'), np.arange(5))
    checkpoint_io.save_npy_gz(self.path('b.gz'), np.arange(5))
    with open(self.path('a.gz'), 'rb') as a, open(self.path('b.gz'),
                                                  'rb') as b:
      self.assertEqual(a.read(), b.read())

  @parameterized.named_parameters(
      ('shape', dict(shape=(4,)), r'shape \(5,\), expected \(4,\)'),
      ('dtype', dict(dtype=np.float32), 'dtype int64, expected float32'),
  )
  def test_mismatch(self, kwargs, message):
    checkpoint_io.save_npy_gz(self.path(), np.arange(5))
    with self.assertRaisesRegex(checkpoint_io.CorruptCheckpointError,
                                'f.gz: array has ' + message):
      checkpoint_io.load_npy_gz(self.path(), **kwargs)

  def test_object_arrays_are_refused(self):
    array = np.array([{'a': 1}], dtype=object)
    path = self.write_raw(gzip.compress(_npy_bytes(array)))
    with self.assertRaisesRegex(checkpoint_io.CorruptCheckpointError,
                                'f.gz: holds Python objects'):
      checkpoint_io.load_npy_gz(path)
    with self.assertRaisesRegex(ValueError, 'object array'):
      checkpoint_io.save_npy_gz(self.path('g.gz'), array)

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
      with self.assertRaisesRegex(checkpoint_io.CorruptCheckpointError,
                                  name + '.gz', msg=name):
        checkpoint_io.load_npy_gz(path)

  def test_missing_file(self):
    with self.assertRaises(FileNotFoundError):
      checkpoint_io.load_npy_gz(self.path('missing.gz'))


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
    loaded = checkpoint_io.load_pickle_gz(path)
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
    loaded = checkpoint_io.restricted_loads(data)
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
    with self.assertRaisesRegex(checkpoint_io.UnsafePickleError,
                                'f.gz: refusing to unpickle ' + message):
      checkpoint_io.load_pickle_gz(path)
    # Catchable both ways.
    with self.assertRaises(pickle.UnpicklingError):
      checkpoint_io.load_pickle_gz(path)
    with self.assertRaises(ValueError):
      checkpoint_io.load_pickle_gz(path)

  def test_codecs_encode_only_for_latin1(self):
    data = (b'\x80\x02c_codecs\nencode\nq\x00X\x03\x00\x00\x00abcX\x05\x00'
            b'\x00\x00rot13\x86R.')
    with self.assertRaisesRegex(checkpoint_io.CorruptCheckpointError,
                                'latin1'):
      checkpoint_io.restricted_loads(data)

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
      with self.assertRaisesRegex(checkpoint_io.CorruptCheckpointError,
                                  name + '.gz', msg=name):
        checkpoint_io.load_pickle_gz(path)

  def test_save_pickle_is_dopamine_readable(self):
    checkpoint_io.save_pickle_gz(self.path(), {1, 2, 3})
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
    loaded = checkpoint_io.load_pickle_gz(path)
    self.assertIsInstance(loaded, checkpoint_io.PickledSumTreeState)
    self.assertEqual(loaded.source,
                     'dopamine.tf.replay_memory.sum_tree.SumTree')
    self.assertEqual(sorted(loaded.state), ['max_recorded_priority', 'nodes'])
    for a, b in zip(loaded.state['nodes'], tree.nodes):
      np.testing.assert_array_equal(a, b)
    ours = sum_tree.SumTree(6)
    ours.set_state(loaded.state)
    np.testing.assert_array_equal(ours.get(np.arange(6)),
                                  [0.5, 1.0, 0.0, 2.0, 0.25, 3.0])

  @parameterized.parameters(sorted(checkpoint_io.SUM_TREE_GLOBALS))
  def test_every_sum_tree_global(self, module, name):
    state = {'nodes': [np.array([1.0]), np.array([1.0, 0.0])],
             'max_recorded_priority': 1.0}
    data = checkpoint_io.pickle_as_instance(module, name, state)
    loaded = checkpoint_io.restricted_loads(data)
    self.assertEqual(loaded.source, module + '.' + name)
    self.assertEqual(loaded.state['max_recorded_priority'], 1.0)

  def test_written_tree_loads_in_dopamine(self):
    ours = sum_tree.SumTree(6)
    ours.set(np.arange(6), [0.5, 1.0, 0.0, 2.0, 0.25, 3.0])
    checkpoint_io.save_dopamine_sum_tree_gz(self.path(), ours.get_state())
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
    loaded = checkpoint_io.load_pickle_gz(self.path())
    self.assertEqual(loaded.state['max_recorded_priority'], 3.0)

  def test_pickle_as_instance_rejects_bad_names(self):
    with self.assertRaisesRegex(ValueError, 'dotted identifier'):
      checkpoint_io.pickle_as_instance('os\nsystem', 'x', {})
    with self.assertRaisesRegex(ValueError, 'dict'):
      checkpoint_io.pickle_as_instance('a.b', 'C', [1])

  def test_non_dict_state_is_refused(self):
    data = checkpoint_io.pickle_as_instance(
        'dopamine.tf.replay_memory.sum_tree', 'SumTree', {'nodes': []})
    # Replace the dict state by a list: BUILD must refuse it.
    body = pickle.dumps([1], protocol=3)[2:-1]
    start = data.index(b'\x81') + 1
    data = data[:start] + body + b'b.'
    with self.assertRaisesRegex(checkpoint_io.CorruptCheckpointError,
                                'not a dict'):
      checkpoint_io.restricted_loads(data)


class AtomicWriteTest(IoTestCase):

  def test_replaces_content(self):
    path = self.path('x')
    checkpoint_io.atomic_write(path, lambda f: f.write(b'one'))
    checkpoint_io.atomic_write(path, lambda f: f.write(b'two'))
    with open(path, 'rb') as f:
      self.assertEqual(f.read(), b'two')
    self.assertEqual(os.listdir(self.dir), ['x'])

  def test_failure_keeps_old_content_and_no_temp_file(self):
    path = self.path('x')
    checkpoint_io.atomic_write(path, lambda f: f.write(b'old'))

    def failing(f):
      f.write(b'partial')
      raise RuntimeError('disk on fire')

    with self.assertRaisesRegex(RuntimeError, 'disk on fire'):
      checkpoint_io.atomic_write(path, failing)
    with open(path, 'rb') as f:
      self.assertEqual(f.read(), b'old')
    self.assertEqual(os.listdir(self.dir), ['x'])

  def test_exists_and_remove(self):
    path = self.path('x')
    self.assertFalse(checkpoint_io.exists(path))
    self.assertFalse(checkpoint_io.remove_if_exists(path))
    checkpoint_io.atomic_write(path, lambda f: f.write(b'1'))
    self.assertTrue(checkpoint_io.exists(path))
    self.assertTrue(checkpoint_io.remove_if_exists(path))
    self.assertFalse(checkpoint_io.exists(path))

  def test_checkpoint_filename(self):
    self.assertEqual(checkpoint_io.checkpoint_filename('d', 'add_count', 3),
                     os.path.join('d', 'add_count_ckpt.3.gz'))

  def test_gfile_paths(self):
    directory = 'ram://checkpoint_io_test_{}'.format(random.getrandbits(32))
    path = directory + '/a_ckpt.1.gz'
    checkpoint_io.save_npy_gz(path, np.arange(4))
    checkpoint_io.save_npy_gz(path, np.arange(5))
    np.testing.assert_array_equal(checkpoint_io.load_npy_gz(path),
                                  np.arange(5))
    checkpoint_io.save_pickle_gz(directory + '/b', {1})
    self.assertEqual(checkpoint_io.load_pickle_gz(directory + '/b'), {1})
    self.assertTrue(checkpoint_io.exists(path))
    self.assertTrue(checkpoint_io.remove_if_exists(path))
    self.assertFalse(checkpoint_io.exists(path))


if __name__ == '__main__':
  absltest.main()
