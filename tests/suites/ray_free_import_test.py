"""The single-machine package works without Ray (the `distributed` extra).

In a fresh interpreter where `import ray` fails, every module outside
`dopamine_per.distributed` imports and a memory runs; that package's
`replay` fails with an ImportError naming Ray.
"""

import textwrap

from absl.testing import absltest

from tests.support import build_files
from tests.support import fixtures

# Makes `import ray` (and its submodules) fail as if Ray were not installed.
_BLOCK_RAY = """
import sys
sys.modules['ray'] = None
"""


def _single_machine_modules():
  """Dotted names of the package's modules outside `distributed`."""
  names = []
  for path in build_files.first_party_files(fixtures.REPO_ROOT, '.py'):
    if (path.startswith('dopamine_per/') and
        not path.startswith('dopamine_per/distributed/')):
      module = path[:-len('.py')].replace('/', '.')
      names.append(module[:-len('.__init__')]
                   if module.endswith('.__init__') else module)
  return names


def _run(code):
  return fixtures.run_python(['-c', _BLOCK_RAY + code], 600)


class RayFreeTest(absltest.TestCase):

  def test_single_machine_modules_import_and_run_without_ray(self):
    modules = _single_machine_modules()
    self.assertIn('dopamine_per.discrete_domains.run_experiment', modules)
    code = ''.join('import {}\n'.format(name) for name in modules)
    code += textwrap.dedent("""
        import numpy as np
        from dopamine_per.replay_memory import prioritized_replay_buffer
        memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
            (4,), stack_size=1, replay_capacity=50, batch_size=8)
        for step in range(20):
          memory.add(np.zeros(4, np.uint8), 0, 1.0, step % 10 == 9, None)
        assert memory.sample_transition_batch()[0].shape == (8, 4, 1)
        assert 'ray' not in sys.modules or sys.modules['ray'] is None
        """)
    result = _run(code)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])

  def test_distributed_replay_says_it_needs_ray(self):
    result = _run('import dopamine_per.distributed.replay\n')
    self.assertNotEqual(result.returncode, 0)
    self.assertIn('ray', result.stderr.splitlines()[-1].lower())


if __name__ == '__main__':
  absltest.main()
