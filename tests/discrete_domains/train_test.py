"""Tests for the train entry point: flags, errors, kill-and-resume, lock."""

import errno
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import gin
import numpy as np

from dopamine_per.discrete_domains import checkpointer
from dopamine_per.discrete_domains import experiment_resume
from dopamine_per.discrete_domains import run_experiment
from dopamine_per.discrete_domains import train
from dopamine_per.file_io import run_lock
from dopamine_per.replay_memory import prioritized_replay_buffer
from tests.support import fixtures
from tests.support import gin_util
from tests.support import tiny_cartpole

_CARTPOLE = tiny_cartpole.GIN_FILE
# The console lines (tiny_cartpole turns them off).
_CONSOLE = 'Runner.fine_grained_print_to_console = True'
# The trainer's status line, e.g. 'iteration 3/100 train steps 57/100 ...'.
_TRAINING = re.compile(r'iteration (\d+)/\d+ train\s+steps (\d+)/')
# Runs trainer argv[1] ('train' or 'distributed', whose Ray start prints a
# line instead) on --base_dir=argv[2] and --gin_files=argv[3]; prints whether
# TensorFlow was imported, and the exit status.
_TRAINER_SCRIPT = textwrap.dedent('''
    import sys
    from dopamine_per.discrete_domains import train
    from dopamine_per.distributed import train as distributed_train
    distributed_train.init_ray = lambda address: print('init_ray')
    module = {'train': train, 'distributed': distributed_train}[sys.argv[1]]
    sys.argv = ['train', '--base_dir=' + sys.argv[2],
                '--gin_files=' + sys.argv[3]]
    try:
      module.run()
    except SystemExit as e:
      print('tensorflow' in sys.modules, e.code)
    ''')


def _train_args(base_dir, gin_files, bindings):
  """The arguments of Python running the trainer."""
  args = ['-m', 'dopamine_per.discrete_domains.train', '--base_dir=' + base_dir]
  args += ['--gin_files=' + path for path in gin_files]
  args += ['--gin_bindings=' + binding for binding in bindings]
  return args


class BaseDirTest(parameterized.TestCase):
  """An unusable --base_dir is one line on stderr, before TensorFlow loads."""

  def setUp(self):
    super().setUp()
    self.dir = fixtures.temp_dir(self)
    self.file = os.path.join(self.dir, 'a_file')
    with open(self.file, 'w') as f:
      f.write('not a directory')

  @parameterized.named_parameters(
      ('a_file', '{file}', '--base_dir={file} is not a directory'),
      # Also how an unwritable directory looks to root, which may write
      # anywhere else: nothing can be created below a regular file.
      ('below_a_file', '{file}/runs', '--base_dir={file}/runs cannot be '
       'created: {file} is not a directory'),
      ('empty', '', '--base_dir is required: the directory for checkpoints, '
       'logs and summaries'),
  )
  def test_unusable_base_dir_is_one_line(self, base_dir, expected):
    result = fixtures.run_python(
        ['-c', _TRAINER_SCRIPT, 'train', base_dir.format(file=self.file),
         _CARTPOLE], 120)
    # Nothing else on stdout; exit status 1; TensorFlow not imported.
    self.assertEqual(result.stdout, 'False 1\n', result.stderr)
    self.assertEqual(result.stderr, 'train: error: {}\n'.format(
        expected.format(file=self.file)))
    self.assertTrue(os.path.isfile(self.file))

  def test_not_writable(self):
    # Root may write into any directory, so the refusal is simulated.
    denied = PermissionError(errno.EACCES, 'Permission denied')
    missing = os.path.join(self.dir, 'new', 'run')
    with mock.patch.object(train.tempfile, 'TemporaryFile',
                           side_effect=denied):
      for base_dir, where in ((self.dir, 'it'), (missing, self.dir)):
        with self.assertRaisesRegex(
            ValueError, r'^--base_dir={} is not writable: cannot create a '
            r'file in {} \(Permission denied\)$'.format(base_dir, where)):
          train.check_base_dir(base_dir)

  def test_usable_base_dirs(self):
    nested = os.path.join(self.dir, 'new', 'run')
    for base_dir in (self.dir, nested, 'gs://bucket/run'):
      train.check_base_dir(base_dir)
    # The check creates nothing (the runner creates the directory).
    self.assertEqual(os.listdir(self.dir), ['a_file'])
    with self.assertRaisesRegex(ValueError, '--base_dir is required'):
      train.check_base_dir(None)


class TrainTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)
    self.base_dir = fixtures.temp_dir(self)

  def _run(self, gin_files, bindings):
    return fixtures.run_python(
        _train_args(self.base_dir, gin_files, bindings), 300)

  @parameterized.named_parameters(
      ('missing_gin_file', ['no/such/file.gin'], [],
       'gin file not found: no/such/file.gin'),
      ('unknown_binding', [_CARTPOLE], ['Runner.num_iteratons = 3'],
       "Invalid gin binding 'Runner.num_iteratons = 3'"),
  )
  def test_bad_gin_configuration(self, gin_files, bindings, message):
    result = self._run(gin_files, bindings)
    self.assertNotEqual(result.returncode, 0)
    self.assertIn(message, result.stderr)

  def _wait_for_training(self, process, terminal, stderr, iteration,
                         checkpoint_dir):
    """Returns once `process` shows training in `iteration` or a later one
    and checkpoint `iteration - 1` is complete in `checkpoint_dir` (the
    Runner commits it in the background, while the next iteration runs).

    Its stdout is the pseudo-terminal whose master side is `terminal`; its
    stderr, shown if it exits first, the file `stderr`.
    """
    deadline = time.monotonic() + 240
    shown = ''
    while True:
      for match in _TRAINING.finditer(shown):
        if (int(match.group(1)) >= iteration and int(match.group(2)) > 0 and
            checkpointer.get_latest_checkpoint_number(checkpoint_dir) >=
            iteration - 1):
          return
      if process.poll() is not None:
        stderr.seek(0)
        self.fail('the trainer exited early: ' + stderr.read())
      self.assertLess(time.monotonic(), deadline,
                      'no training in iteration {} within 240 s; the '
                      'console showed: {!r}'.format(iteration, shown[-500:]))
      if select.select([terminal], [], [], 0.1)[0]:
        try:
          shown = (shown + os.read(terminal, 4096).decode(
              'utf-8', 'replace'))[-4096:]
        except OSError:  # EIO: the trainer closed its side.
          pass

  def test_sigkill_and_resume(self):
    checkpoint_dir = os.path.join(self.base_dir, 'checkpoints')
    bindings = tiny_cartpole.bindings(100, [_CONSOLE])
    # stdout is a terminal, so that the trainer shows its status line;
    # stderr goes to a file: a full pipe would stall the trainer.
    stderr = tempfile.TemporaryFile(mode='w+')
    self.addCleanup(stderr.close)
    terminal, trainer_terminal = pty.openpty()
    self.addCleanup(os.close, terminal)
    try:
      process = subprocess.Popen(
          [sys.executable] + _train_args(self.base_dir, [_CARTPOLE], bindings),
          env=fixtures.subprocess_env(), cwd=fixtures.REPO_ROOT,
          stdout=trainer_terminal, stderr=stderr)
    finally:
      os.close(trainer_terminal)
    try:
      # Killed without warning while it trains, after checkpoint 2.
      self._wait_for_training(process, terminal, stderr, 3, checkpoint_dir)
      process.send_signal(signal.SIGKILL)
      process.wait(timeout=60)
    finally:
      if process.poll() is None:
        process.kill()
        process.wait()
    self.assertEqual(process.returncode, -signal.SIGKILL)
    last = checkpointer.get_latest_checkpoint_number(checkpoint_dir)
    self.assertGreaterEqual(last, 2)
    with open(os.path.join(self.base_dir, 'logs', 'statistics.jsonl')) as f:
      records = [json.loads(line) for line in f]
    steps_at_checkpoint = records[last]['training_steps']

    # The replay memory as the checkpoint saved it, read independently.
    saved = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
        (4, 1), 1, tiny_cartpole.REPLAY_CAPACITY, tiny_cartpole.BATCH_SIZE,
        update_horizon=3, observation_dtype=np.float64)
    saved.load(checkpoint_dir, last)
    count = int(saved.add_count)
    stored = np.arange(min(count, tiny_cartpole.REPLAY_CAPACITY))
    saved_priorities = saved.get_priority(stored)
    self.assertGreater(len(np.unique(saved_priorities)), 10)

    # Restarting builds a runner that resumes from that checkpoint.
    gin.clear_config()
    run_experiment.load_gin_configs([_CARTPOLE], bindings)
    runner = run_experiment.create_runner(self.base_dir)
    self.assertEqual(runner._start_iteration, last + 1)
    agent = runner._agent
    self.assertEqual(agent.training_steps, steps_at_checkpoint)
    memory = agent._replay.memory
    # One transition is stored per training step on CartPole.
    self.assertEqual(int(memory.add_count), steps_at_checkpoint)
    self.assertEqual(int(memory.add_count), count)
    np.testing.assert_array_equal(
        memory.get_priority(stored), saved_priorities)
    self.assertEqual(memory.sum_tree.max_recorded_priority,
                     saved.sum_tree.max_recorded_priority)
    del runner, agent, memory
    gin.clear_config()

    # The restarted trainer finishes the run without repeating iterations.
    result = self._run([_CARTPOLE],
                       tiny_cartpole.bindings(last + 3, [_CONSOLE]))
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn('Resumed from the checkpoint of iteration {}'.format(last),
                  result.stdout)
    with open(os.path.join(self.base_dir, 'logs', 'statistics.jsonl')) as f:
      iterations = [json.loads(line)['iteration'] for line in f]
    self.assertEqual(iterations, list(range(last + 3)))
    self.assertEqual(checkpointer.get_latest_checkpoint_number(checkpoint_dir),
                     last + 2)


def _holder(lock_path):
  """The pid the note of the lock at `lock_path` names, or None."""
  try:
    with open(lock_path) as f:
      return json.loads(f.read()).get('pid')
  except (OSError, ValueError):
    return None


class OneTrainerPerBaseDirTest(absltest.TestCase):
  """Issue 22, point 2: a second trainer on a --base_dir is refused."""

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)
    self.base_dir = fixtures.temp_dir(self)

  def _assert_refused(self, stderr, pid):
    """One line on stderr naming the directory and the holder's pid."""
    self.assertEqual(stderr.count('\n'), 1, stderr)
    self.assertRegex(stderr, r'^train: error: {} is in use by another '
                     r'trainer \(pid {} on host .*\)'.format(self.base_dir,
                                                           pid))

  def test_second_trainer_is_refused_and_the_first_loses_nothing(self):
    args = _train_args(self.base_dir, [_CARTPOLE], tiny_cartpole.bindings(3))
    lock_path = os.path.join(self.base_dir, run_lock.LOCK_FILENAME)
    stderr = tempfile.TemporaryFile(mode='w+')
    self.addCleanup(stderr.close)
    first = subprocess.Popen([sys.executable] + args,
                             env=fixtures.subprocess_env(),
                             cwd=fixtures.REPO_ROOT,
                             stdout=subprocess.DEVNULL, stderr=stderr,
                             text=True)
    try:
      # Until the first trainer holds the lock: its note names it.
      fixtures.wait_until(
          lambda: first.poll() is not None or _holder(lock_path) == first.pid,
          timeout_s=120, message='the first trainer took no lock')
      self.assertIsNone(first.poll(), 'the first trainer exited early')
      # Stopped while the second one runs, so that it holds the lock
      # throughout, however fast its run.
      first.send_signal(signal.SIGSTOP)
      try:
        second = fixtures.run_python(args, 120)
      finally:
        first.send_signal(signal.SIGCONT)
      first.wait(timeout=300)
    finally:
      if first.poll() is None:
        first.kill()
        first.wait()
    self.assertEqual(second.returncode, 1, second.stderr)
    self._assert_refused(second.stderr, first.pid)
    self.assertEqual(second.stdout, '')
    stderr.seek(0)
    self.assertEqual(first.returncode, 0, stderr.read())
    with open(os.path.join(self.base_dir, 'logs', 'statistics.jsonl')) as f:
      self.assertEqual([json.loads(line)['iteration'] for line in f],
                       [0, 1, 2])
    self.assertEqual(checkpointer.get_complete_checkpoint_numbers(
        os.path.join(self.base_dir, 'checkpoints')), [2, 1, 0])
    # Released when the first trainer ended.
    self.assertFalse(os.path.exists(lock_path))

  def test_refused_before_tensorflow_and_ray_start(self):
    # Both trainers, while this process holds the lock.
    apex_cartpole = fixtures.repo_path('configs', 'apex_cartpole.gin')
    os.makedirs(os.path.join(self.base_dir, 'logs'))
    with run_lock.RunDirectoryLock(self.base_dir) as lock:
      with open(lock.path, 'rb') as f:
        note = f.read()
      for module, config in (('train', _CARTPOLE),
                             ('distributed', apex_cartpole)):
        with self.subTest(module=module):
          result = fixtures.run_python(
              ['-c', _TRAINER_SCRIPT, module, self.base_dir, config], 120)
          self.assertEqual(result.stdout, 'False 1\n', result.stderr)
          self._assert_refused(result.stderr, os.getpid())
          # Nothing changed.
          self.assertEqual(sorted(os.listdir(self.base_dir)),
                           [run_lock.LOCK_FILENAME, 'logs'])
          with open(lock.path, 'rb') as f:
            self.assertEqual(f.read(), note)

  def test_restart_from_scratch_leaves_the_lock_in_place(self):
    for name in ('checkpoints', 'logs'):
      os.makedirs(os.path.join(self.base_dir, name))
    with run_lock.RunDirectoryLock(self.base_dir) as lock:
      moved_to = experiment_resume.move_run_aside(self.base_dir)
      self.assertEqual(sorted(os.listdir(moved_to)), ['checkpoints', 'logs'])
      self.assertTrue(os.path.isfile(lock.path))
      with self.assertRaises(run_lock.RunDirectoryLockedError):
        run_lock.RunDirectoryLock(self.base_dir).acquire()


if __name__ == '__main__':
  absltest.main()
