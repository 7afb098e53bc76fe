"""Tests for run_experiment: gin loading, agents, the Runner's files, resume."""

import json
import os
import threading
import types
from unittest import mock

from absl.testing import absltest
import gin

from dopamine_per.discrete_domains import checkpointer
from dopamine_per.discrete_domains import run_experiment
from dopamine_per.replay_memory.checkpoint import checkpoints
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from tests.support import fixtures
from tests.support import gin_util
from tests.support import tiny_cartpole

_CARTPOLE = tiny_cartpole.GIN_FILE


class LoadGinConfigsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)

  def test_missing_file(self):
    with self.assertRaisesRegex(FileNotFoundError,
                                'gin file not found: .*nope.gin'):
      run_experiment.load_gin_configs(['nope.gin'], [])

  def test_unknown_configurable_or_parameter(self):
    with self.assertRaisesRegex(ValueError,
                                r"Invalid gin binding 'Nope.x = 1'.*Nope"):
      run_experiment.load_gin_configs([], ['Nope.x = 1'])
    with self.assertRaisesRegex(ValueError, 'num_iteration'):
      run_experiment.load_gin_configs([], ['Runner.num_iteration = 1'])

  def test_bindings_override_files(self):
    run_experiment.load_gin_configs([_CARTPOLE],
                                    ['Runner.num_iterations = 3'])
    self.assertEqual(gin.query_parameter('Runner.num_iterations'), 3)


class CreateAgentTest(absltest.TestCase):

  def test_unknown_agent(self):
    env = types.SimpleNamespace(action_space=types.SimpleNamespace(n=2))
    with self.assertRaisesRegex(ValueError, 'Unknown agent: sarsa'):
      run_experiment.create_agent(None, env, agent_name='sarsa')
    with self.assertRaisesRegex(ValueError, 'agent_name'):
      run_experiment.create_agent(None, env)

  def test_unknown_schedule(self):
    with self.assertRaisesRegex(ValueError, 'Unknown schedule'):
      run_experiment.create_runner('/tmp/x', schedule='forever')


class RunnerTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)
    self.base_dir = fixtures.temp_dir(self)

  def _records(self):
    with open(os.path.join(self.base_dir, 'logs', 'statistics.jsonl')) as f:
      return [json.loads(line) for line in f]

  def test_files(self):
    # Resuming: train_test.TrainTest.test_sigkill_and_resume.
    runner = tiny_cartpole.runner(self.base_dir, 2)
    runner.run_experiment()
    records = self._records()
    self.assertEqual([r['iteration'] for r in records], [0, 1])
    for key in ('train_average_return', 'eval_average_return',
                'train_average_steps_per_second', 'train_episodes',
                'eval_episodes', 'training_steps'):
      self.assertIn(key, records[0])
    # The memory's resident bytes, as it fills.
    self.assertEqual(records[-1]['replay_nbytes'],
                     runner._agent.replay_memory.nbytes)
    self.assertLessEqual(records[0]['replay_nbytes'],
                         records[1]['replay_nbytes'])
    files = os.listdir(self.base_dir)
    self.assertIn('learning_curve.png', files)
    self.assertTrue(any(f.startswith('events.out.tfevents') for f in files))
    with open(os.path.join(self.base_dir, 'logs', 'log_1')) as f:
      self.assertEqual(sorted(json.load(f)), ['iteration_0', 'iteration_1'])
    checkpoint_dir = os.path.join(self.base_dir, 'checkpoints')
    self.assertEqual(
        checkpointer.get_complete_checkpoint_numbers(checkpoint_dir), [1, 0])

  def test_an_iteration_without_a_bundle_is_not_checkpointed(self):
    runner = tiny_cartpole.runner(self.base_dir, 1)
    bundle_and_checkpoint = runner._agent.bundle_and_checkpoint

    def no_bundle(directory, iteration):
      bundle_and_checkpoint(directory, iteration)  # Its files are staged.
      return None

    with mock.patch.object(runner._agent, 'bundle_and_checkpoint',
                           side_effect=no_bundle) as saved:
      runner.run_experiment()
    saved.assert_called_once()
    checkpoint_dir = os.path.join(self.base_dir, 'checkpoints')
    self.assertEqual(os.listdir(checkpoint_dir), [])
    self.assertEqual([r['iteration'] for r in self._records()], [0])

  def test_an_override_of_run_one_episode_is_called_as_dopamine_calls_it(
      self):
    runner = tiny_cartpole.runner(self.base_dir, 1)
    run_one_episode = runner._run_one_episode
    calls = []

    def override():  # Dopamine's hook takes no argument.
      calls.append(1)
      return run_one_episode()

    runner._run_one_episode = override
    runner.run_experiment()
    self.assertNotEmpty(calls)

  def test_the_memory_is_written_while_the_next_iteration_runs(self):
    runner = tiny_cartpole.runner(self.base_dir, 2)
    checkpoint_dir = os.path.join(self.base_dir, 'checkpoints')
    stage = memory_checkpoint.stage
    trained = threading.Event()
    seen = []

    def held_stage(*args):
      # Checkpoint 0's memory files wait for iteration 1 to train (in the
      # foreground, that would never come).
      self.assertTrue(trained.wait(30), 'the memory was saved in the '
                      'foreground')
      return stage(*args)

    run_one_iteration = runner._run_one_iteration

    def watched_iteration(iteration):
      statistics = run_one_iteration(iteration)
      seen.append(checkpointer.get_complete_checkpoint_numbers(
          checkpoint_dir))
      if iteration == 1:
        trained.set()
      return statistics

    with mock.patch.object(memory_checkpoint, 'stage', held_stage), \
        mock.patch.object(runner, '_run_one_iteration', watched_iteration):
      runner.run_experiment()
    # Iteration 1 trained before checkpoint 0 was complete; the run ended
    # with both complete.
    self.assertEqual(seen, [[], []])
    self.assertEqual(
        checkpointer.get_complete_checkpoint_numbers(checkpoint_dir), [1, 0])
    resumed = tiny_cartpole.runner(self.base_dir, 3)
    self.assertEqual(resumed._start_iteration, 2)
    self.assertEqual(resumed._agent.replay_memory.add_count,
                     runner._agent.replay_memory.add_count)

  def test_a_background_memory_save_that_fails_ends_the_run(self):
    runner = tiny_cartpole.runner(self.base_dir, 3)
    checkpoint_dir = os.path.join(self.base_dir, 'checkpoints')
    stage = memory_checkpoint.stage
    saves = []

    def second_fails(*args):
      saves.append(args[-1])
      if len(saves) == 2:
        raise OSError('disk gone')
      return stage(*args)

    with mock.patch.object(memory_checkpoint, 'stage', second_fails):
      with self.assertRaisesRegex(OSError, 'disk gone'):
        runner.run_experiment()
    # Checkpoint 1 was given up, and the error raised before checkpoint 2
    # began (iteration 2 ran while 1 was written): 0 is the newest.
    self.assertEqual(saves, [0, 1])
    self.assertEqual(
        checkpointer.get_complete_checkpoint_numbers(checkpoint_dir), [0])
    self.assertEqual([r['iteration'] for r in self._records()], [0, 1, 2])
    self.assertEqual(tiny_cartpole.runner(self.base_dir, 3)._start_iteration,
                     1)

  def test_checkpoints_in_the_foreground_when_told(self):
    runner = tiny_cartpole.runner(
        self.base_dir, 1, ['Runner.checkpoint_in_background = False'])
    with mock.patch.object(checkpoints, 'save_in_background') as background:
      runner.run_experiment()
    background.assert_not_called()
    self.assertEqual(checkpointer.get_complete_checkpoint_numbers(
        os.path.join(self.base_dir, 'checkpoints')), [0])

  def test_train_runner(self):
    runner = tiny_cartpole.runner(
        self.base_dir, 1, ["create_runner.schedule = 'continuous_train'"])
    self.assertIsInstance(runner, run_experiment.TrainRunner)
    runner.run_experiment()
    record = self._records()[0]
    self.assertIn('train_average_return', record)
    self.assertNotIn('eval_average_return', record)


if __name__ == '__main__':
  absltest.main()
