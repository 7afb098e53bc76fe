"""Short learning checks: seeded agents on CartPole-v1 beat chance clearly.

Each runs a shipped config with seed 0, cut to 2 iterations:
configs/rainbow_cartpole.gin of 3,000 training steps (the shipped run has
15 of 4,000) and configs/implicit_quantile_cartpole.gin of its 4,000 (the
shipped run: 15 iterations, 2,500 evaluation steps). A uniformly random
policy averages about 22 steps on CartPole, and none of 10,000 simulated
episodes (seed 0, `test_random_policy_baseline`) reaches 150 steps: the
chance that one does is below 3e-4 (the 95% "rule of three" bound 3/n). An
evaluation average of at least 150 needs at least one evaluation episode of
150 steps or more (in fact most of them), so a policy no better than chance
passes with probability below 1e-3 (at most a handful of evaluation
episodes, each below 3e-4).
"""

from absl.testing import absltest
from absl.testing import parameterized
import gin
import numpy as np

from dopamine_per.discrete_domains import gym_lib
from dopamine_per.discrete_domains import run_experiment
from tests.support import fixtures
from tests.support import gin_util

_BOUND = 150.0


class LearningTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)

  def test_random_policy_baseline(self):
    env = gym_lib.create_gym_environment('CartPole', 'v1')
    env.seed(0)
    rng = np.random.default_rng(0)
    lengths = []
    for _ in range(10000):
      env.reset()
      length, terminal = 0, False
      while not terminal and length < 500:
        _, _, terminal, _ = env.step(int(rng.integers(2)))
        length += 1
      lengths.append(length)
    self.assertLess(np.mean(lengths), 25)
    self.assertLess(max(lengths), _BOUND)

  @parameterized.named_parameters(
      ('rainbow', 'rainbow_cartpole.gin', ['Runner.training_steps = 3000']),
      ('iqn', 'implicit_quantile_cartpole.gin', []),
  )
  def test_learns_cartpole(self, config, bindings):
    gin.clear_config()
    run_experiment.load_gin_configs(
        [fixtures.repo_path('configs', config)],
        ['Runner.num_iterations = 2', 'Runner.evaluation_steps = 1000',
         'Runner.fine_grained_print_to_console = False'] + bindings)
    runner = run_experiment.create_runner(fixtures.temp_dir(self))
    runner.run_experiment()
    record = runner._statistics_log.records[-1]
    self.assertGreaterEqual(record['eval_average_return'], _BOUND, record)


if __name__ == '__main__':
  absltest.main()
