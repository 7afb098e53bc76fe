# coding=utf-8
"""Tests for the Ape-X runner and trainer on a local Ray (loopback only).

`runner.ApexRunner` runs in this process on a small CartPole configuration
(configs/apex_cartpole.gin with a small network and short iterations): its
logs, checkpoints of the learner and every shard, resuming, the learner's
pace, an actor killed mid-run and a dead shard; then the config itself,
cut to 5 iterations, learning. Then the command line
(`python -m dopamine_per.distributed.train`) as a user runs it: a run killed
with SIGKILL and started again resumes after its last checkpoint.
"""

import io
import json
import math
import os
import pickle
import signal
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import gin
import ray

from dopamine_per.discrete_domains import run_experiment
from dopamine_per.distributed import runner as runner_lib
from dopamine_per.distributed import shard
from dopamine_per.distributed import train
from tests.support import fixtures
from tests.support import gin_util
from tests.support import ray_util

_CONFIG = fixtures.repo_path('configs', 'apex_cartpole.gin')
_SMALL = [
    'gym_lib.CartpoleRainbowNetwork.hidden_units = (16,)',
    'RainbowAgent.num_atoms = 11',
    'RainbowAgent.min_replay_history = 50',
    'WrappedPrioritizedReplayBuffer.batch_size = 16',
    'ShardedPrioritizedReplayBuffer.batch_size = 16',
    'ShardedPrioritizedReplayBuffer.replay_capacity = 4000',
    'ShardedPrioritizedReplayBuffer.num_cpus_per_shard = 0.1',
    'create_actors.num_cpus_per_actor = 0.5',
    'ApexRunner.actor_steps_per_call = 50',
    'Runner.training_steps = 400',
    'Runner.evaluation_steps = 100',
    'Runner.max_steps_per_episode = 100',
    'Runner.fine_grained_print_to_console = False',
]
_RATIO = 0.25  # apex_cartpole.gin's learner_steps_per_actor_step.


def setUpModule():  # pylint: disable=invalid-name
  ray_util.start_local_ray()


def tearDownModule():  # pylint: disable=invalid-name
  ray.shutdown()


@ray.remote(num_cpus=0)  # The runner's actors hold the test's CPUs.
def _raise_shard_error(number):
  raise shard.ShardError(number, 'gone')


def _statistics(base_dir):
  path = os.path.join(base_dir, 'logs', 'statistics.jsonl')
  with open(path) as f:
    return [json.loads(line) for line in f]


class ApexRunnerTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)
    self.base_dir = fixtures.temp_dir(self)

  def _runner(self, num_iterations, extra=(), small=True):
    """apex_cartpole.gin's runner; `small`: with the _SMALL bindings."""
    gin.clear_config()
    run_experiment.load_gin_configs([_CONFIG], (_SMALL if small else []) + [
        'Runner.num_iterations = {}'.format(num_iterations)] + list(extra))
    runner = runner_lib.create_apex_runner(self.base_dir)
    self.addCleanup(runner.close)
    return runner

  def test_iterations_log_checkpoint_and_resume(self):
    runner = self._runner(num_iterations=2)
    self.assertLen(runner.actor_handles, 2)
    close = runner.close
    saved = {}

    def count_then_close():  # The shards' counts as checkpoint 1 has them.
      if 'counts' not in saved:  # (The test's clean-up closes it again.)
        saved['counts'] = runner.memory.shard_add_counts()
      close()

    runner.close = count_then_close
    runner.run_experiment()
    self.assertEqual(runner.actor_handles, [])  # Closed at the end.
    records = _statistics(self.base_dir)
    self.assertEqual([r['iteration'] for r in records], [0, 1])
    for record in records:
      self.assertGreaterEqual(record['actor_steps'], 400)
      # The learner makes exactly its share of training steps.
      self.assertEqual(record['learner_steps'],
                       math.ceil(_RATIO * record['actor_steps']))
      self.assertGreater(record['train_average_steps_per_second'], 0)
      self.assertGreater(record['learner_steps_per_second'], 0)
      self.assertGreater(record['train_episodes'], 0)
      self.assertGreater(record['eval_episodes'], 0)
      self.assertIn('eval_average_return', record)
      self.assertEqual(record['actor_restarts'], 0)
    trained = sum(r['learner_steps'] for r in records)
    self.assertEqual(runner._agent.training_steps, trained)
    self.assertTrue(os.path.isfile(
        os.path.join(self.base_dir, 'learning_curve.png')))
    self.assertTrue(any(name.startswith('events.out.tfevents')
                        for name in os.listdir(self.base_dir)))
    checkpoints = os.path.join(self.base_dir, 'checkpoints')
    for k in (0, 1):
      self.assertTrue(any('.1.' in name or name.endswith('.1') for name in
                          os.listdir(os.path.join(checkpoints,
                                                  'shard_{}'.format(k)))))
    # Started again, it resumes after iteration 1 with the learner's
    # counters and every shard's transitions.
    resumed = self._runner(num_iterations=3)
    self.assertEqual(resumed._start_iteration, 2)
    self.assertEqual(resumed._agent.training_steps, trained)
    self.assertGreater(min(saved['counts']), 0)
    self.assertEqual(resumed.memory.shard_add_counts(), saved['counts'])
    resumed.run_experiment()
    self.assertEqual([r['iteration'] for r in _statistics(self.base_dir)],
                     [0, 1, 2])

  def test_learner_trains_free_running_without_a_ratio(self):
    runner = self._runner(num_iterations=1, extra=[
        'ApexRunner.learner_steps_per_actor_step = None'])
    runner.run_experiment()
    record = _statistics(self.base_dir)[0]
    self.assertGreater(record['learner_steps'], 0)
    self.assertGreaterEqual(record['actor_steps'], 400)

  @parameterized.named_parameters(
      ('process_dies', lambda runner, pid: os.kill(pid, signal.SIGKILL)),
      ('killed_through_ray', lambda runner, pid: ray.kill(
          runner.actor_handles[0], no_restart=False)))
  def test_an_actor_that_dies_is_restarted(self, kill):
    # kill(runner, pid) on actor 0's second result. Long enough that actor 0
    # still has calls to play when the kill lands.
    runner = self._runner(num_iterations=1,
                          extra=['Runner.training_steps = 1200'])
    collect = runner._collect
    results = []

    def collect_then_kill(ref, index):
      result = collect(ref, index)
      if index == 0 and result is not None and result['steps']:
        results.append(result)
        if len(results) == 2:  # Actor 0 dies with calls queued.
          kill(runner, result['pid'])
      return result

    runner._collect = collect_then_kill
    runner.run_experiment()
    record = _statistics(self.base_dir)[0]
    self.assertEqual(record['actor_restarts'], 1)
    self.assertGreaterEqual(record['actor_steps'], 1200)
    self.assertEqual(record['learner_steps'],
                     math.ceil(_RATIO * record['actor_steps']))
    # Actor 0's later results came from a new process.
    self.assertNotEqual(results[-1]['pid'], results[0]['pid'])

  def test_a_dead_shard_fails_the_run_naming_it(self):
    runner = self._runner(num_iterations=1)
    ray.kill(runner.memory.shard_handles[1], no_restart=True)
    with self.assertRaisesRegex(shard.ShardError, 'replay shard 1 is dead'):
      runner.run_experiment()
    self.assertEqual(runner.actor_handles, [])  # Closed all the same.
    self.assertFalse(os.path.exists(
        os.path.join(self.base_dir, 'checkpoints',
                     'sentinel_checkpoint_complete.0')))

  def test_a_dead_shard_an_actor_meets_first_fails_the_run_naming_it(self):
    # Which of the learner and an actor meets the dead shard first is a
    # race; the actor's ShardError reaches the learner through Ray
    # (pickled), and the runner raises it as the learner's own.
    runner = self._runner(num_iterations=1)
    ref = _raise_shard_error.remote(1)
    with self.assertRaisesRegex(shard.ShardError,
                                r'^replay shard 1 is dead .*Cause: gone$'):
      runner._collect(ref, 0)  # pylint: disable=protected-access

  def test_refuses_an_agent_on_a_single_memory(self):
    with self.assertRaisesRegex(ValueError, 'needs an agent on a sharded '
                                'memory.*OutOfGraphPrioritizedReplayBuffer'):
      self._runner(num_iterations=1, extra=[
          'WrappedPrioritizedReplayBuffer.wrapped_memory = None',
          'WrappedPrioritizedReplayBuffer.replay_capacity = 1000'])

  def test_refuses_bad_arguments(self):
    for name, value in (('learner_steps_per_actor_step', '-1.0'),
                        ('num_actors', '0'), ('weight_publish_period', '0')):
      gin.clear_config()
      run_experiment.load_gin_configs(
          [_CONFIG], _SMALL + ['ApexRunner.{} = {}'.format(name, value)])
      with self.assertRaisesRegex(ValueError, name):
        runner_lib.create_apex_runner(self.base_dir)

  def test_apex_cartpole_learns(self):
    # configs/apex_cartpole.gin, cut to 5 iterations. The bound is
    # tests/agents/learning_test.py's: a policy no better than chance
    # averages 150 or more over an evaluation phase with probability below
    # 1e-3, so the best of 5 evaluations reaches it by chance with
    # probability below 5e-3 (union bound). The full run reaches 450+
    # (docs/distributed.md).
    runner = self._runner(num_iterations=5, small=False, extra=[
        'Runner.evaluation_steps = 1000',
        'Runner.fine_grained_print_to_console = False'])
    runner.run_experiment()
    returns = [r['eval_average_return'] for r in _statistics(self.base_dir)]
    self.assertLen(returns, 5)
    self.assertGreaterEqual(max(returns), 150.0, returns)


class TrainerErrorTest(absltest.TestCase):

  def test_a_shard_error_pickles_with_its_shard_and_message(self):
    error = shard.ShardError(3, RuntimeError('the actor died'))
    copy = pickle.loads(pickle.dumps(error))
    self.assertIsInstance(copy, shard.ShardError)
    self.assertEqual((copy.shard, str(copy)), (3, str(error)))

  def test_a_dead_shard_is_one_line_and_status_1(self):
    error = shard.ShardError(1, RuntimeError('the actor died'))
    stderr = io.StringIO()
    with mock.patch.object(train.train, 'main', side_effect=error), \
        mock.patch.object(sys, 'stderr', stderr):
      self.assertEqual(train.main(['train']), 1)
    line = stderr.getvalue()
    self.assertEqual(line.count('\n'), 1)
    self.assertRegex(line, r'^train: error: replay shard 1 is dead .* \(run '
                     r'the same command again to resume')

  def test_other_errors_propagate(self):
    with mock.patch.object(train.train, 'main',
                           side_effect=KeyError('other')):
      with self.assertRaises(KeyError):
        train.main(['train'])
    # The trainer stops Ray when it ends; the module's Ray is started again.
    ray_util.start_local_ray()


class TrainerKillAndResumeTest(absltest.TestCase):
  """The command line, killed with SIGKILL mid-run, then started again."""

  def _command(self, base_dir, num_iterations):
    # The console lines, which say where the run resumed.
    bindings = [b for b in _SMALL if 'fine_grained' not in b]
    bindings.append('Runner.num_iterations = {}'.format(num_iterations))
    return ([sys.executable, '-m', 'dopamine_per.distributed.train',
             '--base_dir=' + base_dir, '--gin_files=' + _CONFIG] +
            ['--gin_bindings=' + b for b in bindings])

  def test_killed_run_resumes_after_its_last_checkpoint(self):
    base_dir = fixtures.temp_dir(self)
    marker = os.path.join(base_dir, 'checkpoints',
                          'sentinel_checkpoint_complete.0')
    process = subprocess.Popen(
        self._command(base_dir, 3), env=fixtures.subprocess_env(),
        cwd=fixtures.REPO_ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    try:
      fixtures.wait_until(
          lambda: os.path.exists(marker) or process.poll() is not None,
          timeout_s=240, message='no checkpoint 0 and no exit')
      self.assertTrue(os.path.exists(marker), 'the trainer ended early')
    finally:
      # The whole session: the trainer and the local Ray it started.
      if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
      process.wait(60)
    result = subprocess.run(
        self._command(base_dir, 2), env=fixtures.subprocess_env(),
        cwd=fixtures.REPO_ROOT, capture_output=True, text=True, timeout=300)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertIn('Resumed from the checkpoint of iteration 0',
                  result.stdout)
    self.assertEqual([r['iteration'] for r in _statistics(base_dir)],
                     [0, 1])


if __name__ == '__main__':
  absltest.main()
