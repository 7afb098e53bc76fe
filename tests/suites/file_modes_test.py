"""Every file the trainer writes gets the mode a plain `open` gives it.

Issue 22, point 8: files were created 0600 (a temporary file's mode, the
umask ignored), so on shared storage a teammate could not read a run.
"""

import os
import stat
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized

from tests.support import fixtures
from tests.support import tiny_cartpole

_ONE_SHORT_ITERATION = list(tiny_cartpole.BINDINGS) + [
    'Runner.num_iterations = 1']


class TrainerFileModesTest(parameterized.TestCase):

  @parameterized.parameters(0o022, 0o002)
  def test_every_file_follows_the_umask(self, umask):
    base_dir = fixtures.temp_dir(self)
    command = [sys.executable, '-m', 'dopamine_per.discrete_domains.train',
               '--base_dir=' + os.path.join(base_dir, 'run'),
               '--gin_files=' + tiny_cartpole.GIN_FILE]
    command += ['--gin_bindings=' + binding
                for binding in _ONE_SHORT_ITERATION]
    done = subprocess.run(command, env=fixtures.subprocess_env(),
                          cwd=fixtures.REPO_ROOT,
                          capture_output=True, text=True, timeout=600,
                          preexec_fn=lambda: os.umask(umask), check=False)
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    modes = {}
    for root, directories, names in os.walk(os.path.join(base_dir, 'run')):
      for name in directories + names:
        path = os.path.join(root, name)
        modes[os.path.relpath(path, base_dir)] = os.lstat(path).st_mode
    written = [path for path in modes if stat.S_ISREG(modes[path])]
    # The files this package writes itself, not only TensorFlow's.
    for expected in ('run/logs/statistics.jsonl', 'run/learning_curve.png',
                     'run/checkpoints/ckpt.0',
                     'run/checkpoints/sentinel_checkpoint_complete.0',
                     'run/checkpoints/add_count_ckpt.0.gz',
                     'run/checkpoints/dopamine_per_state_ckpt.0.gz',
                     'run/checkpoints/sum_tree_ckpt.0.gz'):
      self.assertIn(expected, written)
    wrong = {path: oct(stat.S_IMODE(mode)) for path, mode in modes.items()
             if stat.S_IMODE(mode) != (
                 (0o777 if stat.S_ISDIR(mode) else 0o666) & ~umask)}
    self.assertEqual(wrong, {})


if __name__ == '__main__':
  absltest.main()
