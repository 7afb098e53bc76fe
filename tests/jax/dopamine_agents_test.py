"""Dopamine's own JAX agents train on our memory (issue 34, item 4).

`python -m dopamine_per.jax.train_cartpole` (the README's example) runs
Dopamine 4.1.2's JaxDQNAgent and JaxRainbowAgent on CartPole after
`redirect.install()`, each in a fresh interpreter, checkpoints the agent
(its bundle and our memory) and restores it into a fresh agent.
"""

import re

from absl.testing import absltest
from absl.testing import parameterized

from tests.support import fixtures


def _train(test, agent, steps):
  directory = fixtures.temp_dir(test)
  run = fixtures.run_python(
      ['-m', 'dopamine_per.jax.train_cartpole', f'--agent={agent}',
       f'--steps={steps}', f'--checkpoint_dir={directory}'], 600)
  test.assertEqual(run.returncode, 0, run.stderr[-3000:])
  return run.stdout


class DopamineAgentsTest(parameterized.TestCase):

  def test_dqn_learns_cartpole_from_our_memory(self):
    out = _train(self, 'dqn', 5000)
    memory = re.search(r'memory: (\S+) with (\d+) elements', out)
    self.assertEqual(memory.group(1),
                     'dopamine_per.jax.replay_memory.replay_buffer.'
                     'ReplayBuffer')
    self.assertGreater(int(memory.group(2)), 4000)
    first, last = map(float, re.search(
        r'first 10: ([\d.]+), of the last 10: ([\d.]+)', out).groups())
    # Seeded (0): a random policy's episodes last about 22 steps; after
    # 5,000 steps this run's last 10 average about 100.
    self.assertLess(first, 40)
    self.assertGreater(last, 50)
    self.assertIn('restored: {} elements'.format(memory.group(2)), out)

  def test_rainbow_updates_our_priorities(self):
    out = _train(self, 'rainbow', 3000)
    total, elements = re.search(
        r'total priority: ([\d.]+) over (\d+) elements', out).groups()
    # Every element came with priority 1: the agent's updates moved them.
    self.assertGreater(int(elements), 2000)
    self.assertNotAlmostEqual(float(total), float(elements), delta=1.0)
    self.assertIn('restored: {} elements'.format(elements), out)


if __name__ == '__main__':
  absltest.main()
