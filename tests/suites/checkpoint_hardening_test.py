"""Issue 12: damaged or hostile checkpoint files of a replay memory.

One reproduction per way a checkpoint file broke `load` before: each test
crafts the file, re-recording its digest in the state file (so that only
the checks of what it holds can catch it), and requires a CheckpointError
naming the file, with the memory unchanged.
"""

import gzip
import io
import os
import pickle
import re
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.file_io import safe_pickle
from dopamine_per.replay_memory import circular_replay_buffer as crb
from dopamine_per.replay_memory import prioritized_replay_buffer as prb
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from dopamine_per.replay_memory.memory import validation
from tests.support import bounded_loads
from tests.support import fixtures
from tests.support import replay_cases

_CONFIG = dict(observation_shape=(2,), stack_size=2, replay_capacity=16,
               batch_size=4, update_horizon=2, rng=3)
_SUFFIX = 3


def make(steps=30, seed=0):
  """A prioritized memory with its own generator, `steps` adds in."""
  memory = prb.OutOfGraphPrioritizedReplayBuffer(**_CONFIG)
  rs = np.random.RandomState(seed)
  for i in range(steps):
    memory.add(rs.randint(0, 255, size=2).astype(np.uint8), i % 3, float(i),
               rs.rand() < 0.15, 0.5 + rs.rand() * 2,
               episode_end=rs.rand() < 0.05)
  return memory


def path_of(directory, name):
  return gzip_files.checkpoint_filename(directory, name, _SUFFIX)


def read_state(directory):
  with gzip.open(path_of(directory,
                         memory_checkpoint.DOPAMINE_PER_STATE_NAME)) as f:
    return pickle.load(f)


def write_state(directory, state):
  gzip_files.save_pickle_gz(
      path_of(directory, memory_checkpoint.DOPAMINE_PER_STATE_NAME), state)


def craft(directory, name, data):
  """Writes file `name` and records its digest in the state file."""
  path = path_of(directory, name)
  if os.path.isdir(path):
    os.rmdir(path)
  with open(path, 'wb') as f:
    f.write(data)
  if name != memory_checkpoint.DOPAMINE_PER_STATE_NAME:
    state = read_state(directory)
    state['files'][name] = tuple(atomic_files.file_digest(path))
    write_state(directory, state)


def giant_array_header():
  """A gzip'd .npy header declaring 10**12 int64s (7.28 TiB), no data."""
  header = ("{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }"
            % 10**12).encode()
  return gzip.compress(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header))
                       + header)


def sum_tree_pickle(nodes=None, max_recorded_priority=None):
  """A gzip'd pickled Dopamine SumTree, from make()'s with replacements."""
  state = make().sum_tree.get_state()
  state.pop('rng_state')
  if nodes is not None:
    state['nodes'] = nodes
  if max_recorded_priority is not None:
    state['max_recorded_priority'] = max_recorded_priority
  return gzip.compress(safe_pickle.pickle_as_instance(
      *safe_pickle.DOPAMINE_SUM_TREE_GLOBAL, state))


def leaves_with(values):
  """Leaf level of the memory's tree (16 leaves) replaced by `values`."""
  return make().sum_tree.get_state()['nodes'][:-1] + [values]


def npy_bytes(array):
  raw = io.BytesIO()
  np.save(raw, array)
  return raw.getvalue()


def deeply_nested_list(depth):
  """Raw opcodes of a list nested `depth` deep (a few bytes per level)."""
  return gzip.compress(b'\x80\x04' + b']' * depth + b'a' * (depth - 1) + b'.')


class HardeningTestCase(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.directory = fixtures.temp_dir(self)
    make().save(self.directory, _SUFFIX)

  def assert_refused(self, name, pattern='', directory=None):
    """load() raises a CheckpointError naming file `name`; nothing changes."""
    memory = make(steps=5, seed=2)
    before = replay_cases.snapshot(memory)
    path = path_of(directory or self.directory, name)
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                re.escape(path) + '.*' + pattern):
      memory.load(directory or self.directory, _SUFFIX)
    replay_cases.assert_same_snapshot(self, before,
                                      replay_cases.snapshot(memory))


class DamagedFilesTest(HardeningTestCase):
  """Files whose damage escaped CheckpointError (or crashed) before."""

  @parameterized.parameters('add_count', 'invalid_range')
  def test_giant_npy_header(self, name):
    # Was MemoryError: "Unable to allocate 7.28 TiB".
    craft(self.directory, name, giant_array_header())
    self.assert_refused(name, 'larger than this file can hold')

  def test_generator_state_out_of_range(self):
    # Was OverflowError from the generator's state setter.
    state = read_state(self.directory)
    state['rng_state']['state']['state'] = 2**200
    write_state(self.directory, state)
    self.assert_refused(memory_checkpoint.DOPAMINE_PER_STATE_NAME,
                        r'\(generator state\): unusable: OverflowError')

  def test_deeply_nested_list(self):
    # Was RecursionError while formatting the error message. 200,000 levels
    # are more bytes than a set of 16 slots can need; 20,000 are not.
    for depth, message in ((200000, 'more than this file can hold'),
                           (20000, 'nested deeper than 4 levels')):
      craft(self.directory, 'episode_end_indices', deeply_nested_list(depth))
      self.assert_refused('episode_end_indices', message)

  def test_store_file_that_is_a_directory(self):
    # Was IsADirectoryError.
    path = path_of(self.directory, '$store$_reward')
    os.remove(path)
    os.mkdir(path)
    self.assert_refused('$store$_reward', 'is a directory')

  @parameterized.named_parameters(
      # Was loaded: entries for other names were ignored. (A trainer that
      # hashes what such an entry names read /dev/zero forever.)
      *[('naming_' + name, lambda files, other=other: dict(
          files, **{other: (0, 'e3b0c442' * 8)}),
         "must name exactly this memory's checkpoint files")
        for name, other in (('dev_zero', '/dev/zero'),
                            ('parent', '../add_count_ckpt.2.gz'),
                            ('nonexistent', 'nonexistent'))],
      # Was loaded: the file went unchecked.
      ('lacking_a_file', lambda files: {
          k: v for k, v in files.items() if k != '$store$_action'},
       r"lacks \['\$store\$_action'\]"),
      ('list', lambda files: list(files.items()), 'files is a list'),
      ('digest_types', lambda files: dict(files, add_count=('12', 'ab')),
       'the digest of add_count is'),
      ('digest_not_hex', lambda files: dict(files, add_count=(1, 'z' * 64)),
       'the digest of add_count is'),
  )
  def test_malformed_state_files(self, change, message):
    state = read_state(self.directory)
    state['files'] = change(state['files'])
    write_state(self.directory, state)
    self.assert_refused(memory_checkpoint.DOPAMINE_PER_STATE_NAME, message)

  def test_fifo_store_file_does_not_block(self):
    # Was a load that waited forever for a writer.
    path = path_of(self.directory, '$store$_observation')
    os.remove(path)
    os.mkfifo(path)
    child = textwrap.dedent('''
        import sys
        from dopamine_per.file_io import atomic_files
        from tests.suites import checkpoint_hardening_test as t
        try:
          t.make().load(sys.argv[1], t._SUFFIX)
          print('loaded')
        except atomic_files.CheckpointError as e:
          print('refused:', e)
    ''')
    try:
      done = subprocess.run([sys.executable, '-c', child, self.directory],
                            cwd=fixtures.REPO_ROOT, capture_output=True,
                            text=True, timeout=180, check=False)
    except subprocess.TimeoutExpired:
      self.fail('load() blocked on a FIFO')
    self.assertRegex(done.stdout, 'refused: .*observation.*is a FIFO')


class BrokenStateTest(HardeningTestCase):
  """Files that loaded into a memory whose invariants or methods broke."""

  @parameterized.named_parameters(('int64', np.int64), ('uint64', np.uint64))
  def test_add_count_past_the_bound(self, dtype):
    # Issue 22: any count up to 2**63 - 1 loaded; the next add (or, at
    # 2**63 - 1, add_count, sampling and save) could overflow. uint64
    # 2**63 + 20 loaded too; then add_count and save raised.
    counts = [validation.MAX_ADD_COUNT + 1, 2**63 - 1]
    for add_count in counts + ([2**63 + 20] if dtype == np.uint64 else []):
      craft(self.directory, 'add_count',
            gzip.compress(npy_bytes(np.array(add_count, dtype))))
      craft(self.directory, 'invalid_range', gzip.compress(npy_bytes(
          crb.invalid_range(add_count % 16, 16, 2, 2))))
      self.assert_refused('add_count', r'in \[0, 2\*\*53\], got {}'.format(
          add_count))

  @parameterized.named_parameters(
      # Loaded (make()'s largest leaf is 2.26...); then its invariants failed.
      ('max_below_largest_leaf', None, 1.5,
       r'is below 2\.26[0-9]*, the largest'),
      # Was OverflowError (float(10**400)).
      ('max_beyond_any_float', None, 10**400,
       'Invalid max_recorded_priority'),
      # Was OverflowError (np.asarray(..., float64) of 10**400).
      ('leaf_beyond_any_float', lambda leaves: [10**400] + [0.0] * 15, None,
       'real numbers'),
      # The imaginary part was dropped (a ComplexWarning).
      ('complex', lambda leaves: leaves + 1j, None,
       'must be real numbers, got dtype complex128'),
      # Strings were parsed as numbers.
      ('strings', lambda leaves: leaves.astype(str), None,
       'must be real numbers, got dtype <U'),
      ('bools', lambda leaves: leaves > 0, None,
       'must be real numbers, got dtype bool'),
      # The memory's priorities must read back from float32 as themselves.
      ('outside_float32', lambda leaves: [1e300] + [0.0] * 15, 1e300,
       'Sum tree state leaves'),
  )
  def test_bad_sum_tree(self, convert, max_recorded_priority, message):
    leaves = make().sum_tree.get_state()['nodes'][-1]
    craft(self.directory, 'sum_tree', sum_tree_pickle(
        nodes=None if convert is None else leaves_with(convert(leaves)),
        max_recorded_priority=max_recorded_priority))
    self.assert_refused('sum_tree', message)


class GzipBombTest(HardeningTestCase):
  """Files that inflate to gigabytes are refused in bounded memory."""

  def test_bombs_are_refused_after_a_bounded_read(self):
    two_gib = 2 << 30
    binbytes8 = b'\x80\x04\x8e' + struct.pack('<Q', two_gib)
    state = memory_checkpoint.DOPAMINE_PER_STATE_NAME
    pickle_bomb = bounded_loads.gzip_bomb(binbytes8, two_gib)
    cases = {  # case: (file, data)
        # Pickles of 2 MB that inflate to 2 GiB: were decompressed whole.
        'sum_tree': ('sum_tree', pickle_bomb),
        'episode_end_indices': ('episode_end_indices', pickle_bomb),
        state: (state, pickle_bomb),
        # A version-2 .npy header declaring 4 GiB: NumPy reads it all.
        'add_count': ('add_count', bounded_loads.gzip_bomb(
            b'\x93NUMPY\x02\x00\xf0\xff\xff\xff', two_gib)),
        # 300 KB that expand to 8 GiB once converted to an array: a leaf
        # level of 104,858 references to one list of 10,000 floats.
        'shared': ('sum_tree', sum_tree_pickle(
            nodes=leaves_with([[0.5] * 10000] * 104858))),
    }
    directories = {}
    for case, (name, data) in cases.items():
      directories[case] = os.path.join(self.directory, case)
      shutil.copytree(self.directory, directories[case],
                      ignore=lambda *_: list(directories))
      craft(directories[case], name, data)
      self.assertLess(len(data), (400 << 10) if case == 'shared' else 4 << 20)

    reports = bounded_loads.measure_loads(
        {case: 'memory.load({!r}, t._SUFFIX)'.format(directory)
         for case, directory in directories.items()},
        setup='from tests.suites import checkpoint_hardening_test as t\n'
        'memory = t.make(steps=5, seed=2)')
    self.assertCountEqual(reports, cases)
    for case, report in reports.items():
      self.assertRegex(report['outcome'], '^refused: .*{}_ckpt'.format(
          re.escape(cases[case][0])), case)
      # Bound: 64 MiB, where the bombs inflate to 2 GiB and 8 GiB.
      self.assertLess(report['peak_growth_kib'], 64 << 10, case)


class LeftoverTemporariesTest(HardeningTestCase):
  """Save removes the temporary files that killed saves left."""

  _USERS = ['.notes.abcdefgh.tmp', 'add_count_ckpt.3.gz.tmp',
            '.add_count_ckpt.3.gz.tmp', '.other_ckpt.3.gz.abcdefgh.tmp']

  def _temporaries(self):
    return sorted(name for name in os.listdir(self.directory)
                  if name.endswith('.tmp') and name not in self._USERS)

  def _plant(self, names):
    for name in names:
      with open(os.path.join(self.directory, name), 'wb') as f:
        f.write(b'partial')

  def _assert_save_removes_ours_only(self, number):
    self._plant(self._USERS)
    make().save(self.directory, number)
    self.assertEqual(self._temporaries(), [])
    for name in self._USERS:
      self.assertTrue(os.path.exists(os.path.join(self.directory, name)),
                      name)

  def test_save_removes_its_own_temporaries_only(self):
    ours = ['.$store$_observation_ckpt.3.gz.k3j_9zqa.tmp',
            '.sum_tree_ckpt.1.gz.abcdefgh.tmp',
            '.dopamine_per_state_ckpt.12.gz.a1b2c3d4.tmp']
    self._plant(ours)
    self.assertEqual(self._temporaries(), sorted(ours))
    self._assert_save_removes_ours_only(4)

  def test_temporaries_of_a_sigkilled_save(self):
    # A real SIGKILL during save, until one leaves a temporary file.
    child = textwrap.dedent('''
        import sys
        import numpy as np
        from dopamine_per.replay_memory import prioritized_replay_buffer
        memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
            observation_shape=(84, 84), stack_size=4, replay_capacity=1000,
            batch_size=32)
        rng = np.random.default_rng(0)
        for _ in range(1000):
          memory.add(rng.integers(0, 256, (84, 84), dtype=np.uint8), 0, 0.0,
                     False, 1.0)
        print('ready', flush=True)
        for iteration in range(10**6):
          memory.save(sys.argv[1], iteration)
    ''')
    leftovers = []
    for _ in range(5):
      saver = subprocess.Popen([sys.executable, '-c', child, self.directory],
                               cwd=fixtures.REPO_ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
      self.assertEqual(saver.stdout.readline().strip(), 'ready')
      deadline = time.monotonic() + 120
      while not self._temporaries() and time.monotonic() < deadline:
        time.sleep(0.001)
      saver.send_signal(signal.SIGKILL)
      saver.wait()
      saver.stdout.close()
      leftovers = self._temporaries()
      if leftovers:
        break
    self.assertNotEqual(leftovers, [], 'no kill left a temporary file')
    self._assert_save_removes_ours_only(0)  # make(): the same files.


if __name__ == '__main__':
  absltest.main()
