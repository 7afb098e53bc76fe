"""A smoke test of `python -m benchmarks.learning`, at a tiny size."""

import contextlib
import io
import json
import os

from absl.testing import absltest
from matplotlib import image as image_lib

from benchmarks import learning
from dopamine_per import plot
from tests.support import fixtures
from tests.support import statistics_lines
from tests.support import tiny_cartpole


class LearningBenchmarkTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.directory = fixtures.temp_dir(self)
    self.runs_dir = os.path.join(self.directory, 'runs')

  def _main(self, *args):
    argv = ['--seeds', '1', '--output_dir', self.directory,
            '--runs_dir', self.runs_dir]
    # One short iteration (the learning itself is not checked here).
    for binding in tiny_cartpole.bindings(1):
      argv += ['--gin_bindings', binding]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(
        stderr):
      status = learning.main(argv + list(args))
    return status, stdout.getvalue(), stderr.getvalue()

  def test_tiny_run_writes_the_document_and_the_picture(self):
    status, out, err = self._main('--uniform')
    self.assertEqual(status, 0, err)
    with open(os.path.join(self.directory, 'LEARNING.md')) as f:
      document = f.read()
    self.assertEqual(out.strip(), document.strip())
    self.assertTrue(document.startswith('# Learning quality across seeds'))
    self.assertIn('--uniform', document)
    for scheme in learning.SCHEMES:
      self.assertIn('- {}: '.format(scheme), document)
      self.assertIn('| {} | 1 |'.format(scheme), document)
      with open(os.path.join(self.runs_dir, scheme, 'seed_0', 'logs',
                             'statistics.jsonl')) as f:
        self.assertEqual([json.loads(line)['iteration'] for line in f], [0])
    image = image_lib.imread(os.path.join(self.directory, 'learning.png'),
                             format='png')
    self.assertEqual(image.shape[:2], (plot.HEIGHT_PX, plot.WIDTH_PX))

  def test_odd_statistics_lines_are_skipped_on_resume_and_report(self):
    # Issue 22: `[1, 2]` stopped the resumed trainer (AttributeError), the
    # nested line the benchmark's reader (RecursionError).
    status, _, err = self._main()
    self.assertEqual(status, 0, err)
    path = os.path.join(self.runs_dir, 'prioritized', 'seed_0', 'logs',
                        'statistics.jsonl')
    skipped = statistics_lines.append_odd_lines(path)
    # Run again on the same --runs_dir: the trainer resumes (its one
    # iteration is done) and the report reads the file.
    status, out, err = self._main()
    self.assertEqual(status, 0, err[-2000:])
    self.assertIn('plot: warning: {}: skipped {} line(s) that are not '
                  'statistics records'.format(path, skipped), err)
    self.assertIn('| prioritized | 1 |', out)
    # The trainer said so too, in its log.
    with open(os.path.join(self.runs_dir, 'prioritized', 'seed_0.log')) as f:
      self.assertIn('{}: skipped {} line(s)'.format(path, skipped), f.read())

  def test_failed_run_is_reported(self):
    status, _, err = self._main('--gin_bindings', 'Runner.nope = 1')
    self.assertEqual(status, 1)
    self.assertIn('learning: error: prioritized seed 0 failed', err)
    self.assertIn('nope', err)
    self.assertFalse(os.path.exists(os.path.join(self.directory,
                                                 'LEARNING.md')))

  def test_train_command_binds_seed_and_scheme(self):
    command = learning.train_command('/tmp/run', 3, 'uniform', ['a.gin'],
                                     ['X.y = 1'])
    self.assertEqual(command[1:], [
        '-m', 'dopamine_per.discrete_domains.train', '--base_dir=/tmp/run',
        '--gin_files=a.gin', '--gin_bindings=Runner.seed = 3',
        "--gin_bindings=RainbowAgent.replay_scheme = 'uniform'",
        '--gin_bindings=X.y = 1'])
    with self.assertRaisesRegex(ValueError, "'greedy'"):
      learning.train_command('/tmp/run', 0, 'greedy', ['a.gin'])

  def test_goal(self):
    def summary(best, last):
      return plot.Summary(15, best, last, 100.0, 90.0)
    self.assertTrue(learning.meets_goal(summary(475.0, 450.0)))
    self.assertFalse(learning.meets_goal(summary(474.9, 500.0)))
    self.assertFalse(learning.meets_goal(summary(500.0, 449.9)))
    self.assertFalse(learning.meets_goal(summary(float('nan'), 500.0)))


if __name__ == '__main__':
  absltest.main()
