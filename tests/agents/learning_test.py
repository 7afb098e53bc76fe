"""Short learning checks: seeded agents on CartPole-v1 beat chance clearly.

Each runs a shipped config with seed 0, cut to 2 iterations (Rainbow's of
3,000 training steps, IQN's of its 4,000) and 1,000 evaluation steps, and
must reach an evaluation average of `_BOUND` = 75 steps. A uniformly random
policy averages 22 steps an episode; over an evaluation phase (episodes
until 1,000 steps, about 45 of them) its average spreads by about 1.5 steps,
and `test_random_policy_baseline` checks that none of about 220 simulated
phases (10,000 episodes, seed 0) averages even half the bound: a phase at
75 would lie over 30 standard deviations above chance. The bound is far
below what the runs reach (Rainbow about 180, IQN about 120, with seed 0
here), so a change in floating-point rounding between machines is unlikely
to flip the check, while an agent that stops learning (back to chance, or
to the 9-step episodes of a constant action) fails it.
"""

from absl.testing import absltest
from absl.testing import parameterized
import gin
import numpy as np

from dopamine_per.discrete_domains import gym_lib
from dopamine_per.discrete_domains import run_experiment
from tests.support import fixtures
from tests.support import gin_util

_BOUND = 75.0


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
    # Evaluation phases as the Runner runs them: whole episodes until the
    # phase has taken 1,000 steps.
    phases, phase = [], []
    for length in lengths:
      phase.append(length)
      if sum(phase) >= 1000:
        phases.append(np.mean(phase))
        phase = []
    self.assertLess(abs(np.mean(lengths) - 22), 1)
    self.assertGreater(len(phases), 200)
    self.assertLess(max(phases), _BOUND / 2)

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
