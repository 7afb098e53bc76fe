"""Tests for port_gin: the import rewrites, untouched text and the command."""

import contextlib
import io
import os
import stat
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized

from dopamine_per import port_gin
from tests.support import fixtures


# (Dopamine import line, the line port_gin writes for it).
_REWRITES = (
    ('import dopamine.tf.agents.rainbow.rainbow_agent',
     'import dopamine_per.agents.rainbow_agent'),
    ('import dopamine.tf.agents.dqn.dqn_agent',
     'import dopamine_per.agents.dqn_agent'),
    # Dopamine before 4.0 had no `tf` level.
    ('import dopamine.agents.rainbow.rainbow_agent',
     'import dopamine_per.agents.rainbow_agent'),
    ('import dopamine.agents.dqn.dqn_agent',
     'import dopamine_per.agents.dqn_agent'),
    ('import dopamine.discrete_domains.atari_lib',
     'import dopamine_per.discrete_domains.atari_lib'),
    ('import dopamine.discrete_domains.gym_lib',
     'import dopamine_per.discrete_domains.gym_lib'),
    ('import dopamine.discrete_domains.run_experiment',
     'import dopamine_per.discrete_domains.run_experiment'),
    ('import dopamine.tf.replay_memory.prioritized_replay_buffer',
     'import dopamine_per.replay_memory.prioritized_replay_buffer'),
    ('import dopamine.tf.replay_memory.circular_replay_buffer',
     'import dopamine_per.replay_memory.circular_replay_buffer'),
    ('import dopamine.replay_memory.prioritized_replay_buffer',
     'import dopamine_per.replay_memory.prioritized_replay_buffer'),
    ('import dopamine.replay_memory.sum_tree',
     'import dopamine_per.replay_memory.sum_tree'),
    ('import gin.tf.external_configurables',
     'import dopamine_per.external_configurables'),
    # gin's other import forms; aliases, spacing and comments are kept.
    ('from dopamine.tf.agents.dqn import dqn_agent',
     'from dopamine_per.agents import dqn_agent'),
    ('from dopamine.discrete_domains import gym_lib',
     'from dopamine_per.discrete_domains import gym_lib'),
    ('from gin.tf import external_configurables',
     'from dopamine_per import external_configurables'),
    ('import dopamine.discrete_domains.gym_lib as gym  # CartPole',
     'import dopamine_per.discrete_domains.gym_lib as gym  # CartPole'),
    ('import   dopamine.tf.replay_memory.sum_tree\t# spaced',
     'import   dopamine_per.replay_memory.sum_tree\t# spaced'),
)

# Lines that must come out exactly as they went in.
_UNTOUCHED = (
    '# import dopamine.tf.agents.rainbow.rainbow_agent',
    "  # Was: import gin.tf.external_configurables",
    'import numpy',
    'import gin.torch.external_configurables',
    'from __gin__ import dynamic_registration',
    'import dopamine_per.agents.rainbow_agent',
    'RainbowAgent.num_atoms = 51',
    "create_gym_environment.version = 'v2'",
    "Runner.create_environment_fn = @gym_lib.create_gym_environment",
    "include 'dopamine/tf/agents/rainbow/configs/rainbow.gin'",
    "train.note = 'import dopamine.discrete_domains.gym_lib'",
    "WrappedPrioritizedReplayBuffer.replay_capacity = 50000  # transitions",
    '',
)

# A gin file written as Dopamine's are, with each kind of line.
_DOPAMINE_GIN = '''\
# Rainbow on CartPole, from Dopamine (import dopamine.* below).
import dopamine.discrete_domains.gym_lib
import dopamine.discrete_domains.run_experiment
import dopamine.tf.agents.rainbow.rainbow_agent
import dopamine.tf.replay_memory.prioritized_replay_buffer
import gin.tf.external_configurables

RainbowAgent.observation_shape = %gym_lib.CARTPOLE_OBSERVATION_SHAPE
RainbowAgent.network = @gym_lib.CartpoleRainbowNetwork
RainbowAgent.optimizer = @tf.train.AdamOptimizer()
tf.train.AdamOptimizer.learning_rate = 0.09
notes.text = """
import dopamine.jax.agents.dqn.dqn_agent
"""
create_gym_environment.environment_name = 'CartPole'
Runner.max_steps_per_episode = 200  # agent steps
WrappedPrioritizedReplayBuffer.replay_capacity = 50000
'''


def _ported_line(line):
  return port_gin.port(line + '\n')[:-1]


class PortTest(parameterized.TestCase):

  @parameterized.parameters(*_REWRITES)
  def test_rewrites(self, dopamine_line, expected):
    # port_module checks that the ported module exists.
    self.assertEqual(_ported_line(dopamine_line), expected)
    # Ported again, nothing changes.
    self.assertEqual(_ported_line(expected), expected)

  @parameterized.parameters(*_UNTOUCHED)
  def test_untouched_lines(self, line):
    self.assertEqual(_ported_line(line), line)

  def test_only_import_lines_change(self):
    ported = port_gin.port(_DOPAMINE_GIN)
    before = _DOPAMINE_GIN.splitlines()
    after = ported.splitlines()
    self.assertLen(after, len(before))
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    self.assertEqual(changed, [1, 2, 3, 4, 5])  # The five imports.
    self.assertEqual(after[3], 'import dopamine_per.agents.rainbow_agent')
    # The multi-line string's "import" line is text, not an import.
    self.assertIn('import dopamine.jax.agents.dqn.dqn_agent', after)
    self.assertTrue(ported.endswith('= 50000\n'))

  def test_line_endings_are_kept(self):
    text = _DOPAMINE_GIN.replace('\n', '\r\n')
    ported = port_gin.port(text)
    self.assertEqual(ported, port_gin.port(_DOPAMINE_GIN).replace('\n',
                                                                  '\r\n'))
    self.assertEqual(port_gin.port('import dopamine.discrete_domains.gym_lib'),
                     'import dopamine_per.discrete_domains.gym_lib')

  @parameterized.named_parameters(
      ('jax_agent', 'import dopamine.jax.agents.dqn.dqn_agent'),
      ('jax_replay', 'from dopamine.jax.replay_memory import replay_buffer'),
      ('labs', 'import dopamine.labs.atari_100k.atari_100k_rainbow_agent'),
      ('missing_agent', 'import dopamine.tf.agents.foo.no_such_agent'),
      ('missing_domain', 'import dopamine.discrete_domains.no_such_lib'),
      ('package', 'import dopamine'),
  )
  def test_import_without_equivalent(self, line):
    module = line.split()[1]
    text = '# A comment.\nRunner.num_iterations = 3\n{}\n'.format(line)
    with self.assertRaisesRegex(
        port_gin.PortError,
        r'^line 3: {}.* has no dopamine_per equivalent'.format(
            module.replace('.', r'\.'))) as raised:
      port_gin.port(text)
    self.assertEqual(raised.exception.line_number, 3)

  def test_unreadable_text(self):
    with self.assertRaisesRegex(port_gin.PortError, '^line 2: cannot be read'):
      port_gin.port('import dopamine.discrete_domains.gym_lib\nx = """\n')


class MainTest(absltest.TestCase):

  def _write(self, name, text, directory=None):
    directory = directory or fixtures.temp_dir(self)
    path = os.path.join(directory, name)
    with open(path, 'w', encoding='utf-8', newline='') as f:
      f.write(text)
    return path

  def _read(self, path):
    with open(path, encoding='utf-8', newline='') as f:
      return f.read()

  def _main(self, argv):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(
        stderr):
      status = port_gin.main(argv)
    return status, stdout.getvalue(), stderr.getvalue()

  def test_prints_the_ported_files(self):
    first = self._write('a.gin', _DOPAMINE_GIN)
    second = self._write('b.gin', 'import dopamine.agents.dqn.dqn_agent\n')
    status, stdout, stderr = self._main([first, second])
    self.assertEqual((status, stderr), (0, ''))
    self.assertEqual(stdout, port_gin.port(_DOPAMINE_GIN) +
                     'import dopamine_per.agents.dqn_agent\n')
    self.assertEqual(self._read(first), _DOPAMINE_GIN)  # Not modified.

  def test_in_place(self):
    directory = fixtures.temp_dir(self)
    first = self._write('a.gin', _DOPAMINE_GIN, directory)
    ported_already = 'import dopamine_per.agents.dqn_agent\n'
    second = self._write('b.gin', ported_already, directory)
    os.chmod(first, 0o640)
    link = os.path.join(directory, 'link.gin')
    target = self._write('target.gin', 'import gin.tf.external_configurables',
                         directory)
    os.symlink(target, link)
    second_mtime = os.stat(second).st_mtime_ns
    status, stdout, stderr = self._main(['--in_place', first, second, link])
    self.assertEqual((status, stdout, stderr), (0, '', ''))
    self.assertEqual(self._read(first), port_gin.port(_DOPAMINE_GIN))
    self.assertEqual(stat.S_IMODE(os.stat(first).st_mode), 0o640)
    self.assertEqual(self._read(second), ported_already)
    self.assertEqual(os.stat(second).st_mtime_ns, second_mtime)
    # The link still points to its file, which was ported.
    self.assertTrue(os.path.islink(link))
    self.assertEqual(self._read(target),
                     'import dopamine_per.external_configurables')
    # No temporary file is left behind.
    self.assertCountEqual(os.listdir(directory),
                          ['a.gin', 'b.gin', 'link.gin', 'target.gin'])

  def test_in_place_error_changes_no_file(self):
    first = self._write('a.gin', _DOPAMINE_GIN)
    bad = self._write('bad.gin', '\nimport dopamine.jax.agents.dqn.dqn_agent\n')
    status, stdout, stderr = self._main(['--in_place', first, bad])
    self.assertEqual((status, stdout), (1, ''))
    self.assertEqual(
        stderr, 'port_gin: {}:2: dopamine.jax.agents.dqn.dqn_agent has no '
        'dopamine_per equivalent\n'.format(bad))
    self.assertEqual(self._read(first), _DOPAMINE_GIN)

  def test_missing_file(self):
    first = self._write('a.gin', _DOPAMINE_GIN)
    missing = os.path.join(fixtures.temp_dir(self), 'missing.gin')
    for flags in ([], ['--in_place']):
      status, stdout, stderr = self._main(flags + [first, missing])
      self.assertEqual((status, stdout), (2, ''))
      self.assertEqual(stderr, 'port_gin: cannot read {}: No such file or '
                       'directory\n'.format(missing))
    self.assertEqual(self._read(first), _DOPAMINE_GIN)

  def test_command_line(self):
    path = self._write('a.gin', _DOPAMINE_GIN)
    env = fixtures.subprocess_env()
    command = [sys.executable, '-m', 'dopamine_per.port_gin']
    result = subprocess.run(command + [path], capture_output=True, text=True,
                            env=env, cwd=fixtures.REPO_ROOT, timeout=120)
    self.assertEqual((result.returncode, result.stderr), (0, ''))
    self.assertEqual(result.stdout, port_gin.port(_DOPAMINE_GIN))
    # Errors: test_missing_file; --help: packaging_test.


if __name__ == '__main__':
  absltest.main()
