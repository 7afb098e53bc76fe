"""Resuming never loses, overwrites or mixes experiments (issue 12, point 4).

What each test shows: docs/reliability.md.
"""

import hashlib
import json
import os
import pickle
import shutil
import textwrap

from absl.testing import absltest
import numpy as np

from dopamine_per.discrete_domains import checkpointer
from dopamine_per.discrete_domains import experiment_resume
from dopamine_per.file_io import atomic_files
from tests.support import fixtures
from tests.support import gin_util
from tests.support import tiny_cartpole

_CARTPOLE = tiny_cartpole.GIN_FILE
_ITERATIONS = tiny_cartpole.TRAINED_ITERATIONS
# Long enough for a cold TensorFlow import and a few agents on a busy
# machine; a trainer blocked on a FIFO never finishes.
_SUBPROCESS_TIMEOUT = 300


def _runner(base_dir, num_iterations=_ITERATIONS + 1, extra=()):
  """`tiny_cartpole.runner`, by default one iteration past the trained run."""
  return tiny_cartpole.runner(base_dir, num_iterations, extra)


def _tree(root):
  """{relative path: a file's sha256, 'dir' or 'special' (never opened)}."""
  tree = {}
  for directory, dirs, files in os.walk(root):
    for name in dirs:
      tree[os.path.relpath(os.path.join(directory, name), root)] = 'dir'
    for name in files:
      path = os.path.join(directory, name)
      relative = os.path.relpath(path, root)
      if not os.path.isfile(path):
        tree[relative] = 'special'
        continue
      with open(path, 'rb') as f:
        tree[relative] = hashlib.sha256(f.read()).hexdigest()
  return tree


def _checkpoint_dir(base_dir):
  return os.path.join(base_dir, 'checkpoints')


def _flip_byte(path, offset=20):
  with open(path, 'r+b') as f:
    f.seek(offset)
    value = f.read(1)
    f.seek(offset)
    f.write(bytes([value[0] ^ 0xFF]))


def _truncate(path):
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)


def _use_dopamine_markers(base_dir):
  """Makes each marker Dopamine's ``done``: damage is found only by loading."""
  checkpoint_dir = _checkpoint_dir(base_dir)
  for number in checkpointer.get_complete_checkpoint_numbers(checkpoint_dir):
    path = os.path.join(checkpoint_dir,
                        'sentinel_checkpoint_complete.{}'.format(number))
    with open(path, 'w') as f:
      f.write('done')


def _replace_by_fifo(path):
  os.remove(path)
  os.mkfifo(path)


def _agent_state(agent):
  """What a restore changes: variables, replay memory, Python counters."""
  memory = agent._replay.memory
  count = int(memory.add_count)
  return {
      'variables': agent._sess.run(
          agent._sess.graph.get_collection('variables')),
      'add_count': count,
      'priorities': memory.get_priority(np.arange(min(count, 500))),
      'training_steps': agent.training_steps,
      'state': np.copy(agent.state),
  }


class _TrainedRunTestCase(absltest.TestCase):
  """Gives each test a copy of one trained run (3 checkpoints)."""

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)
    self.dir = fixtures.temp_dir(self)
    self.base_dir = tiny_cartpole.copy_trained_run(
        os.path.join(self.dir, 'run'))
    self.checkpoint_dir = _checkpoint_dir(self.base_dir)
    self.assertEqual(
        checkpointer.get_complete_checkpoint_numbers(self.checkpoint_dir),
        [2, 1, 0])

  def _path(self, name):
    return os.path.join(self.checkpoint_dir, name)

  def _read_data(self, number):
    with open(self._path('ckpt.{}'.format(number)), 'rb') as f:
      return pickle.load(f)

  def _refusal(self, extra=()):
    """The CannotResumeError of a Runner on the run, which changed no file."""
    before = _tree(self.base_dir)
    with self.assertRaises(experiment_resume.CannotResumeError) as raised:
      _runner(self.base_dir, extra=extra)
    self.assertEqual(_tree(self.base_dir), before)
    return raised.exception

  def _damage_every_checkpoint(self):
    """Three checkpoints, three kinds of damage; returns their reasons."""
    _flip_byte(self._path('tf_ckpt-2.data-00000-of-00001'))
    _truncate(self._path('sum_tree_ckpt.1.gz'))
    with open(self._path('sentinel_checkpoint_complete.0'), 'w') as f:
      f.write('{"format": ')
    return [
        (2, r'tf_ckpt-2\.data-00000-of-00001 changed since the checkpoint '
            r'was written'),
        (1, r'sum_tree_ckpt\.1\.gz changed since the checkpoint was written'),
        (0, r"sentinel_checkpoint_complete\.0 is neither a completion marker "
            r"of ours nor Dopamine's"),
    ]


class RunnerResumeTest(_TrainedRunTestCase):

  def test_every_checkpoint_damaged_is_refused_changing_nothing(self):
    reasons = self._damage_every_checkpoint()
    error = self._refusal()
    self.assertEqual([number for number, _ in error.refusals], [2, 1, 0])
    self.assertRegex(error.message, r'^cannot resume the experiment in {}: '
                     r'none of its 3 checkpoints loads; no file was '
                     r'changed\.\n'.format(self.base_dir))
    for number, reason in reasons:
      self.assertRegex(error.message,
                       r'\n  checkpoint {}: .*{}'.format(number, reason))
    self.assertIn('--restart_from_scratch', error.message)

  def test_mixed_damage_is_refused_and_nothing_is_mixed(self):
    # Dopamine's markers: the damage is found by loading. The newest
    # checkpoint's agent variables are damaged, the older ones' replay files.
    _use_dopamine_markers(self.base_dir)
    _flip_byte(self._path('tf_ckpt-2.data-00000-of-00001'))
    _truncate(self._path('sum_tree_ckpt.1.gz'))
    _truncate(self._path('sum_tree_ckpt.0.gz'))
    message = self._refusal().message
    self.assertRegex(message, r'checkpoint 2: .*tf_ckpt-2: variable \S+ '
                     r'cannot be read: .*Checksum does not match')
    self.assertRegex(message, r'checkpoint 1: .*sum_tree_ckpt\.1\.gz')
    self.assertRegex(message, r'checkpoint 0: .*sum_tree_ckpt\.0\.gz')

  def test_a_refused_checkpoint_leaves_the_agent_unchanged(self):
    fresh_dir = os.path.join(self.dir, 'fresh')
    agent = _runner(fresh_dir)._agent
    fresh = _agent_state(agent)
    self.assertEqual(fresh['add_count'], 0)
    bundles = {n: self._read_data(n) for n in (2, 1, 0)}
    # The newest checkpoint's variables do not read back: refused before
    # anything changes.
    _flip_byte(self._path('tf_ckpt-2.data-00000-of-00001'))
    # The next one's replay memory fails after its variables were restored:
    # they are put back.
    _truncate(self._path('sum_tree_ckpt.1.gz'))
    for number, reason in ((2, 'Checksum does not match'),
                           (1, r'sum_tree_ckpt\.1\.gz')):
      with self.assertRaisesRegex(atomic_files.CheckpointError, reason):
        agent.unbundle(self.checkpoint_dir, number, bundles[number])
      after = _agent_state(agent)
      for key in ('add_count', 'training_steps'):
        self.assertEqual(after[key], fresh[key], (number, key))
      np.testing.assert_array_equal(after['state'], fresh['state'])
      for old, new in zip(fresh['variables'], after['variables']):
        np.testing.assert_array_equal(old, new)
    # A valid checkpoint then loads in full.
    self.assertTrue(agent.unbundle(self.checkpoint_dir, 0, bundles[0]))
    self.assertEqual(agent.training_steps, bundles[0]['training_steps'])
    self.assertEqual(int(agent._replay.memory.add_count),
                     bundles[0]['training_steps'])

  def test_network_of_another_shape_is_refused(self):
    message = self._refusal(
        ['gym_lib.CartpoleRainbowNetwork.hidden_units = (16,)']).message
    for number in (2, 1, 0):
      self.assertRegex(
          message, r'checkpoint {}: \S*tf_ckpt-{} does not match the '
          r'configured network: variable Online/\S+/fully_connected/bias has '
          r'shape \(8,\) in the checkpoint, \(16,\) in the configured '
          r'network'.format(number, number))

  def test_any_error_falls_back_to_the_previous_checkpoint(self):
    _use_dopamine_markers(self.base_dir)
    expected = self._read_data(0)['training_steps']
    # Reading a directory raises an OSError or TF's error, not a
    # CheckpointError; a malformed random state failed after the agent
    # had been restored.
    os.remove(self._path('ckpt.2'))
    os.mkdir(self._path('ckpt.2'))
    data = self._read_data(1)
    data['numpy_random_state'] = ['MT19937', 'not a key']
    with open(self._path('ckpt.1'), 'wb') as f:
      pickle.dump(data, f)
    with self.assertLogs(level='WARNING') as logs:
      runner = _runner(self.base_dir)
    self.assertEqual(runner._start_iteration, 1)
    self.assertEqual(runner._agent.training_steps, expected)
    self.assertEqual(int(runner._agent._replay.memory.add_count), expected)
    log = '\n'.join(logs.output)
    self.assertRegex(log, r'2: \S*ckpt\.2:? is .*not a regular file')
    self.assertRegex(log, r'1: ckpt\.1: numpy_random_state is malformed')

  def test_runner_data_of_another_iteration_is_refused(self):
    # ckpt.2 holds iteration 1's data: its counters must not be combined
    # with checkpoint 2's replay memory and variables.
    _use_dopamine_markers(self.base_dir)
    shutil.copyfile(self._path('ckpt.1'), self._path('ckpt.2'))
    runner = _runner(self.base_dir)
    self.assertEqual(runner._start_iteration, 2)
    steps = self._read_data(1)['training_steps']
    self.assertEqual(runner._agent.training_steps, steps)
    self.assertEqual(int(runner._agent._replay.memory.add_count), steps)

  def test_no_checkpoint_starts_at_zero(self):
    # A new directory; logs only; an unmarked first checkpoint (a run
    # killed while saving it).
    logs_only = os.path.join(self.dir, 'logs_only')
    shutil.copytree(os.path.join(self.base_dir, 'logs'),
                    os.path.join(logs_only, 'logs'))
    unmarked = os.path.join(self.dir, 'unmarked')
    os.makedirs(_checkpoint_dir(unmarked))
    shutil.copyfile(self._path('tf_ckpt-0.index'),
                    os.path.join(_checkpoint_dir(unmarked), 'tf_ckpt-0.index'))
    for base_dir in (os.path.join(self.dir, 'new'), logs_only, unmarked):
      runner = _runner(base_dir)
      self.assertEqual(runner._start_iteration, 0, base_dir)
      self.assertEqual(runner._agent.training_steps, 0)

  def test_move_run_aside(self):
    with open(os.path.join(self.base_dir, 'notes.txt'), 'w') as f:
      f.write('kept in place')
    before = _tree(self.base_dir)
    moved_to = experiment_resume.move_run_aside(self.base_dir)
    self.assertRegex(os.path.basename(moved_to),
                     r'^previous_run_\d{8}-\d{6}$')
    self.assertEqual(os.path.dirname(moved_to), self.base_dir)
    self.assertEqual(sorted(os.listdir(self.base_dir)),
                     sorted(['notes.txt', os.path.basename(moved_to)]))
    del before['notes.txt']
    self.assertEqual(_tree(moved_to), before)
    runner = _runner(self.base_dir, 1)
    self.assertEqual(runner._start_iteration, 0)
    runner.run_experiment()
    again = experiment_resume.move_run_aside(self.base_dir)
    self.assertNotEqual(again, moved_to)
    self.assertEqual(_tree(moved_to), before)
    self.assertIsNone(experiment_resume.move_run_aside(
        os.path.join(self.dir, 'missing')))


# Builds a runner for each base_dir given and prints one JSON line each.
_RESUME_SCRIPT = textwrap.dedent('''
    import json, sys
    import gin
    from dopamine_per.discrete_domains import experiment_resume
    from dopamine_per.discrete_domains import run_experiment
    config, bindings = sys.argv[1], json.loads(sys.argv[2])
    for base_dir in sys.argv[3:]:
      gin.clear_config()
      run_experiment.load_gin_configs([config], bindings)
      try:
        start = run_experiment.create_runner(base_dir)._start_iteration
        print(json.dumps([base_dir, start]), flush=True)
      except experiment_resume.CannotResumeError as e:
        print(json.dumps([base_dir, e.message]), flush=True)
    ''')


class BlockingFilesTest(_TrainedRunTestCase):
  """FIFOs where the runner reads: refused, never waited on."""

  def _copy(self, name):
    path = os.path.join(self.dir, name)
    shutil.copytree(self.base_dir, path)
    return path

  def test_fifos_are_refused_without_blocking(self):
    cases = {}
    # A FIFO instead of the newest marker, data file or TF index: that
    # checkpoint is refused and the runner resumes from the previous one.
    path = self._copy('marker')
    _replace_by_fifo(os.path.join(_checkpoint_dir(path),
                                  'sentinel_checkpoint_complete.2'))
    cases[path] = 2
    for name in ('ckpt.2', 'tf_ckpt-2.index'):
      path = self._copy(name)
      _use_dopamine_markers(path)
      _replace_by_fifo(os.path.join(_checkpoint_dir(path), name))
      cases[path] = 2
    # TF's 'checkpoint' file only lists old TF checkpoints: ignored.
    path = self._copy('tf_state')
    _replace_by_fifo(os.path.join(_checkpoint_dir(path), 'checkpoint'))
    cases[path] = 3
    # A statistics file that cannot be read: no resume, nothing changed.
    path = self._copy('statistics')
    _replace_by_fifo(os.path.join(path, 'logs', 'statistics.jsonl'))
    cases[path] = 'statistics.jsonl:? is .*not a regular file'
    before = {path: _tree(path) for path in cases}
    result = fixtures.run_python(
        ['-c', _RESUME_SCRIPT, _CARTPOLE,
         json.dumps(tiny_cartpole.bindings(_ITERATIONS + 1))] + list(cases),
        _SUBPROCESS_TIMEOUT)
    self.assertEqual(result.returncode, 0, result.stderr)
    outcomes = dict(json.loads(line) for line in result.stdout.splitlines()
                    if line.startswith('['))
    for path, expected in cases.items():
      if isinstance(expected, int):
        self.assertEqual(outcomes[path], expected, path)
      else:
        self.assertRegex(outcomes[path], expected)
        self.assertEqual(_tree(path), before[path])


class TrainerTest(_TrainedRunTestCase):
  """train.py: the exit status, the message, and --restart_from_scratch."""

  def _train(self, *flags, num_iterations=_ITERATIONS + 1):
    args = ['-m', 'dopamine_per.discrete_domains.train',
            '--base_dir=' + self.base_dir, '--gin_files=' + _CARTPOLE]
    args += ['--gin_bindings=' + b
             for b in tiny_cartpole.bindings(num_iterations)]
    return fixtures.run_python(args + list(flags), _SUBPROCESS_TIMEOUT)

  def test_unresumable_run_exits_1_changing_nothing(self):
    self._damage_every_checkpoint()
    before = _tree(self.base_dir)
    result = self._train()
    self.assertEqual(result.returncode, 1, result.stderr)
    self.assertNotIn('Traceback', result.stderr)
    self.assertEqual(result.stderr.count('train: error: '), 1, result.stderr)
    message = result.stderr[result.stderr.index('train: error: '):]
    # CannotResumeError's message (RunnerResumeTest checks its lines).
    self.assertRegex(message, r'^train: error: cannot resume the experiment '
                     r'in {}: none of its 3 checkpoints loads'.format(
                         self.base_dir))
    self.assertRegex(message, r'--restart_from_scratch does that\)\.\n$')
    self.assertEqual(_tree(self.base_dir), before)

  def test_restart_from_scratch_moves_the_run_aside(self):
    self._damage_every_checkpoint()
    before = _tree(self.base_dir)
    result = self._train('--restart_from_scratch', num_iterations=1)
    self.assertEqual(result.returncode, 0, result.stderr)
    moved = [name for name in os.listdir(self.base_dir)
             if name.startswith('previous_run_')]
    self.assertLen(moved, 1)
    self.assertIn('moved the earlier run in {} to {}'.format(
        self.base_dir, os.path.join(self.base_dir, moved[0])), result.stdout)
    self.assertEqual(_tree(os.path.join(self.base_dir, moved[0])), before)
    with open(os.path.join(self.base_dir, 'logs', 'statistics.jsonl')) as f:
      self.assertEqual([json.loads(line)['iteration'] for line in f], [0])
    self.assertEqual(
        checkpointer.get_complete_checkpoint_numbers(self.checkpoint_dir),
        [0])

  def test_help_names_the_flag(self):
    result = fixtures.run_python(
        ['-m', 'dopamine_per.discrete_domains.train', '--help'],
        _SUBPROCESS_TIMEOUT)
    # absl's --help exits with status 1 after printing the flags.
    self.assertRegex(result.stdout, r'--\[no\]restart_from_scratch')
    self.assertIn('previous_run_<time>', result.stdout)


class CheckpointFilesTest(_TrainedRunTestCase):
  """A checkpoint vouches for the files its save wrote, all of them kept."""

  def test_only_the_files_this_run_wrote_are_vouched_for(self):
    # Files with checkpoint 3's names that another process put there.
    foreign = {'foo_ckpt.3.gz': b'foreign', 'tf_ckpt-3.extra': b'foreign'}
    for name, content in foreign.items():
      with open(self._path(name), 'wb') as f:
        f.write(content)
    _runner(self.base_dir).run_experiment()
    with open(self._path('sentinel_checkpoint_complete.3')) as f:
      listed = set(json.load(f)['files'])
    self.assertTrue(listed)
    self.assertFalse(listed & set(foreign))
    # The foreign files change: checkpoint 3 is still the one resumed.
    for name in foreign:
      with open(self._path(name), 'ab') as f:
        f.write(b' changed')
    runner = _runner(self.base_dir, _ITERATIONS + 2)
    self.assertEqual(runner._start_iteration, _ITERATIONS + 1)
    # A file it lists changes: refused, naming it; the previous one loads,
    # and the record of the iteration to rerun is dropped.
    _flip_byte(self._path('tf_ckpt-3.data-00000-of-00001'))
    with self.assertLogs(level='WARNING') as logs:
      runner = _runner(self.base_dir, _ITERATIONS + 2)
    self.assertEqual(runner._start_iteration, _ITERATIONS)
    self.assertEqual([r['iteration'] for r in runner._statistics_log.records],
                     list(range(_ITERATIONS)))
    self.assertRegex('\n'.join(logs.output),
                     r'newer ones were refused: 3: \S*tf_ckpt-3\.data-00000-'
                     r'of-00001 changed since the checkpoint was written')

  def test_the_agents_settings_do_not_prune_what_a_marker_lists(self):
    # The memory keeps 1 checkpoint and TF's saver 1, the checkpointer 4.
    extra = ['WrappedPrioritizedReplayBuffer.checkpoint_duration = 1',
             'DQNAgent.max_tf_checkpoints_to_keep = 1']
    base_dir = os.path.join(self.dir, 'short_lived')
    _runner(base_dir, 2, extra).run_experiment()
    runner = _runner(base_dir, 4, extra)
    self.assertEqual(runner._start_iteration, 2)
    runner.run_experiment()
    checkpoint_dir = _checkpoint_dir(base_dir)
    self.assertEqual(
        checkpointer.get_complete_checkpoint_numbers(checkpoint_dir),
        [3, 2, 1, 0])
    saver = checkpointer.Checkpointer(checkpoint_dir)
    for number in (3, 2, 1, 0):
      saver.verify(number)
      self.assertTrue(os.path.exists(os.path.join(
          checkpoint_dir, 'tf_ckpt-{}.index'.format(number))))
      self.assertTrue(os.path.exists(os.path.join(
          checkpoint_dir, 'add_count_ckpt.{}.gz'.format(number))))

  def test_a_malformed_journal_is_refused_changing_nothing(self):
    with open(self._path('ckpt_journal'), 'w') as f:
      f.write('{"format": "dopamine_per.journal/1", "files": [["../x", ')
    self.assertRegex(self._refusal().message,
                     r'the journal of an interrupted checkpoint save is '
                     r'unusable \(.*ckpt_journal')


if __name__ == '__main__':
  absltest.main()
