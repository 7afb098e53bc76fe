"""Tests for atari_lib: the area resize, the preprocessing, a Pong smoke run.

ale-py is in the ``test`` extra (it ships the ROMs): nothing is skipped.
"""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import gin
import numpy as np

from dopamine_per import errors
from dopamine_per.discrete_domains import atari_lib
from dopamine_per.discrete_domains import checkpointer
from dopamine_per.discrete_domains import run_experiment
from tests.support import fixtures
from tests.support import gin_util


def _brute_force_area_resize(image, size):
  """Area averaging by splitting every pixel into size x size sub-pixels."""
  height, width = image.shape
  fine = np.repeat(np.repeat(image.astype(np.float64), size, axis=0), size,
                   axis=1)
  return fine.reshape(size, height, size, width).mean(axis=(1, 3))


class AreaResizeTest(parameterized.TestCase):

  @parameterized.parameters((210, 84), (160, 84), (10, 4), (84, 84), (7, 3))
  def test_rows_sum_to_one(self, source, target):
    matrix = atari_lib.area_resize_matrix(source, target)
    self.assertEqual(matrix.shape, (target, source))
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=1e-6)
    self.assertTrue(np.all(matrix >= 0))

  def test_matches_brute_force(self):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, size=(21, 16)).astype(np.uint8)
    rows = atari_lib.area_resize_matrix(21, 8)
    columns = atari_lib.area_resize_matrix(16, 8)
    np.testing.assert_allclose(rows @ image.astype(np.float64) @ columns.T,
                               _brute_force_area_resize(image, 8), atol=1e-4)


class _FakeAle(object):

  def __init__(self):
    self.frame = 0
    self.lives_left = 3

  def lives(self):
    return self.lives_left

  def getScreenGrayscale(self, out):  # pylint: disable=invalid-name
    out.fill(self.frame)


class _FakeEnv(object):
  """A 210x160 'game' whose screen shows the frame number."""

  def __init__(self, lose_life_at=None, end_at=None):
    import gymnasium  # pylint: disable=g-import-not-at-top
    self.ale = _FakeAle()
    self.observation_space = gymnasium.spaces.Box(0, 255, (210, 160, 3),
                                                  np.uint8)
    self.action_space = gymnasium.spaces.Discrete(3)
    self.metadata = {}
    self.lose_life_at = lose_life_at
    self.end_at = end_at

  def reset(self, seed=None):
    del seed
    self.ale.frame = 0
    return None, {}

  def step(self, action):
    del action
    self.ale.frame += 1
    if self.ale.frame == self.lose_life_at:
      self.ale.lives_left -= 1
    done = self.ale.frame == self.end_at
    return None, 1.0, done, False, {}


class AtariPreprocessingTest(absltest.TestCase):

  def test_frame_skip_and_max_pool(self):
    env = atari_lib.AtariPreprocessing(_FakeEnv())
    first = env.reset()
    self.assertEqual(first.shape, (84, 84, 1))
    self.assertEqual(first.dtype, np.uint8)
    observation, reward, terminal, _ = env.step(0)
    self.assertEqual(reward, 4.0)  # Summed over the 4 skipped frames.
    self.assertFalse(terminal)
    # Max of the last two frames (3 and 4).
    np.testing.assert_array_equal(observation, 4)
    self.assertEqual(env.observation_space.shape, (84, 84, 1))

  def test_terminal_on_life_loss(self):
    env = atari_lib.AtariPreprocessing(_FakeEnv(lose_life_at=2),
                                       terminal_on_life_loss=True)
    env.reset()
    _, reward, terminal, _ = env.step(0)
    self.assertTrue(terminal)
    self.assertFalse(env.game_over)
    self.assertEqual(reward, 2.0)  # Stopped at the lost life.
    env = atari_lib.AtariPreprocessing(_FakeEnv(lose_life_at=2))
    env.reset()
    self.assertFalse(env.step(0)[2])

  def test_game_over(self):
    env = atari_lib.AtariPreprocessing(_FakeEnv(end_at=6))
    env.reset()
    self.assertFalse(env.step(0)[2])
    self.assertTrue(env.step(0)[2])
    self.assertTrue(env.game_over)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'frame_skip'):
      atari_lib.AtariPreprocessing(_FakeEnv(), frame_skip=0)
    with self.assertRaisesRegex(ValueError, 'screen_size'):
      atari_lib.AtariPreprocessing(_FakeEnv(), screen_size=0)

  def test_needs_a_game_name(self):
    # Dopamine asserts: both except clauses must catch it.
    for caught in (ValueError, AssertionError, errors.ArgumentError):
      with self.assertRaisesRegex(caught, 'game_name'):
        atari_lib.create_atari_environment()


class PongTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)

  def test_pong_environment(self):
    env = atari_lib.create_atari_environment('Pong', sticky_actions=True)
    self.assertAlmostEqual(
        env.environment.ale.getFloat('repeat_action_probability'), 0.25)
    observation = env.reset()
    self.assertEqual(observation.shape, (84, 84, 1))
    self.assertEqual(env.action_space.n, 6)
    total = 0
    for _ in range(50):
      observation, reward, terminal, _ = env.step(env.action_space.sample())
      total += reward
      self.assertFalse(terminal)
    self.assertGreater(int(observation.max()), int(observation.min()))

  def test_rainbow_gin_on_pong_runs_and_checkpoints(self):
    base_dir = fixtures.temp_dir(self)
    gin.clear_config()
    run_experiment.load_gin_configs(
        [fixtures.repo_path('configs', 'rainbow.gin')],
        ['WrappedPrioritizedReplayBuffer.replay_capacity = 1000',
         'RainbowAgent.min_replay_history = 100',
         'RainbowAgent.target_update_period = 50',
         'Runner.num_iterations = 1',
         'Runner.training_steps = 300',
         'Runner.evaluation_steps = 20',
         'Runner.max_steps_per_episode = 300',
         'Runner.seed = 0'])
    runner = run_experiment.create_runner(base_dir)
    runner.run_experiment()
    checkpoint_dir = os.path.join(base_dir, 'checkpoints')
    self.assertEqual(checkpointer.get_latest_checkpoint_number(checkpoint_dir),
                     0)
    files = os.listdir(checkpoint_dir)
    # rainbow.gin compresses the frames: the memory saves in chunks.
    for expected in ('ckpt.0', 'tf_ckpt-0.index', 'chunk_index_ckpt.0.gz',
                     'chunk_pack_ckpt.0.gz'):
      self.assertIn(expected, files)
    agent = runner._agent
    self.assertGreaterEqual(agent.training_steps, 300)
    # Training ran: some priorities differ from the initial 1.0.
    priorities = agent._replay.memory.get_priority(np.arange(300))
    self.assertGreater(len(np.unique(priorities)), 2)
    with open(os.path.join(base_dir, 'logs', 'statistics.jsonl')) as f:
      record = json.loads(f.readline())
    self.assertEqual(record['iteration'], 0)
    self.assertIn('eval_average_return', record)


if __name__ == '__main__':
  absltest.main()
