"""Tests for `python -m dopamine_per.plot`: tables, groups, picture, errors."""

import contextlib
import io
import json
import math
import os
import sys
from unittest import mock

from absl.testing import absltest
from matplotlib import image as image_lib

from dopamine_per import plot
from tests.support import fixtures
from tests.support import statistics_lines


def write_run(run_dir, evals, speeds=None, extra_lines=()):
  """Writes a run's logs/statistics.jsonl: one record per eval return."""
  os.makedirs(os.path.join(run_dir, 'logs'))
  with open(os.path.join(run_dir, 'logs', 'statistics.jsonl'), 'w') as f:
    for i, value in enumerate(evals):
      f.write(json.dumps({
          'iteration': i, 'eval_average_return': value,
          'train_average_return': value,
          'train_average_steps_per_second': (
              speeds[i] if speeds else 100.0),
          'iteration_seconds': 2.0,
          # The distributed trainer's key, unknown here.
          'learner_steps_per_second': 50.0}) + '\n')
    for line in extra_lines:
      f.write(line + '\n')


class PlotTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.directory = fixtures.temp_dir(self)
    self.runs = os.path.join(self.directory, 'runs')
    # Two seeds of two configurations; 7 iterations, so "last 5" differs
    # from "all".
    write_run(os.path.join(self.runs, 'per_s0'),
              [10, 100, 200, 300, 400, 500, 450], speeds=[100] * 7)
    write_run(os.path.join(self.runs, 'per_s1'),
              [10, 50, 100, 150, 200, 250, 300], speeds=[200] * 7)
    write_run(os.path.join(self.runs, 'uniform_s0'),
              [10, 20, 30, 40, 50, 60, 70])
    write_run(os.path.join(self.runs, 'uniform_s1'),
              [10, 20, 30, 40, 50, 60, 80])
    self.out = os.path.join(self.directory, 'compare.png')

  def _main(self, *args):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(
        stderr):
      status = plot.main(list(args))
    return status, stdout.getvalue(), stderr.getvalue()

  def test_tables_and_picture(self):
    status, out, err = self._main(
        '--out', self.out, os.path.join(self.runs, 'per_s0'),
        os.path.join(self.runs, 'per_s1'),
        os.path.join(self.runs, 'uniform_s0'),
        os.path.join(self.runs, 'uniform_s1'),
        '--label', 'PER=per_*', '--label', 'uniform=' + os.path.join(
            self.runs, 'uniform_*'))
    self.assertEqual(status, 0, err)
    self.assertEqual(err, '')
    rows = [line for line in out.splitlines() if line.startswith('| ')]
    run_rows = [r.split(' | ') for r in rows if self.runs in r]
    self.assertEqual([r[0] for r in run_rows],
                     ['| PER', '| PER', '| uniform', '| uniform'])
    # iterations, best, last-5 mean (of 200..450), steps/s, seconds.
    self.assertEqual(run_rows[0][2:7], ['7', '500.0', '370.0', '100', '14 |'])
    group_rows = {r.split(' | ')[0][2:]: r.split(' | ')[1:]
                  for r in rows if r.startswith(('| PER | 2', '| uniform | 2'))}
    # runs, best (mean), best (min), last-5 (mean), last-5 (min), steps/s,
    # seconds (mean).
    self.assertEqual(group_rows['PER'][:7],
                     ['2', '400.0', '300.0', '285.0', '200.0', '150', '14 |'])
    self.assertEqual(group_rows['uniform'][:5],
                     ['2', '75.0', '70.0', '51.0', '50.0'])
    image = image_lib.imread(self.out, format='png')
    self.assertEqual(image.shape[:2], (plot.HEIGHT_PX, plot.WIDTH_PX))
    # Something was drawn besides white and grey: the groups' colors.
    self.assertGreater(
        (abs(image[..., 0] - image[..., 2]) > 0.3).sum(), 500)

  def test_unlabelled_runs_are_their_own_groups(self):
    runs = [plot.load_run(os.path.join(self.runs, name))
            for name in ('per_s0', 'uniform_s0', 'uniform_s1')]
    groups = plot.group_runs(runs, [('uniform', 'uniform_*')])
    self.assertEqual(list(groups),
                     ['uniform', os.path.join(self.runs, 'per_s0')])
    self.assertEqual([r.path for r in groups['uniform']],
                     [runs[1].path, runs[2].path])

  def test_band_over_runs_of_different_lengths(self):
    write_run(os.path.join(self.runs, 'short'), [0, 40])
    runs = [plot.load_run(os.path.join(self.runs, name))
            for name in ('uniform_s0', 'short')]
    iterations, mean, low, high = plot.band(runs, 'eval_average_return')
    self.assertEqual(list(iterations), [0, 1, 2, 3, 4, 5, 6])
    self.assertEqual(list(mean[:3]), [5.0, 30.0, 30.0])
    self.assertEqual(list(low[:2]), [0.0, 20.0])
    self.assertEqual(list(high[:2]), [10.0, 40.0])

  def test_tolerant_reading(self):
    run_dir = os.path.join(self.runs, 'messy')
    write_run(run_dir, [1, 2, 3], extra_lines=[
        '', 'not json', '[1, 2]', '{"no_iteration": 1}',
        '{"iteration": 2, "eval_average_return": 9}'])
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
      run = plot.load_run(run_dir)
    # The last record of an iteration wins; 3 unreadable lines skipped.
    self.assertEqual([r['eval_average_return'] for r in run.records],
                     [1, 2, 9])
    self.assertIn('skipped 3 line(s) that are not statistics records',
                  stderr.getvalue())
    self.assertIn('dropping 1', stderr.getvalue())
    self.assertTrue(math.isnan(plot.summarize(plot.Run('x', [
        {'iteration': 0}])).best_eval))

  def test_odd_lines_are_skipped_and_the_picture_drawn(self):
    # Issue 22: the nested line raised RecursionError.
    run_dir = os.path.join(self.runs, 'odd')
    write_run(run_dir, [10, 20, 30])
    path = os.path.join(run_dir, plot.STATISTICS_FILE)
    skipped = statistics_lines.append_odd_lines(path)
    status, out, err = self._main('--out', self.out, run_dir)
    self.assertEqual(status, 0, err[:1000])
    self.assertEqual(err, 'plot: warning: {}: skipped {} line(s) that are not '
                     'statistics records (a JSON object with an integer '
                     'iteration)\n'.format(path, skipped))
    row = [line for line in out.splitlines() if run_dir in line][0]
    # 3 iterations, best eval 30, last-5 mean 20.
    self.assertEqual(row.split(' | ')[2:5], ['3', '30.0', '20.0'])
    image = image_lib.imread(self.out, format='png')
    self.assertEqual(image.shape[:2], (plot.HEIGHT_PX, plot.WIDTH_PX))

  def test_one_line_errors(self):
    write_run(os.path.join(self.runs, 'nothing_yet'), [])
    empty = os.path.join(self.directory, 'empty')
    os.makedirs(empty)
    for args, message in (
        ([os.path.join(self.runs, 'per_s0'), empty],
         'plot: error: {}: no logs/statistics.jsonl (not a training run\'s '
         '--base_dir?)'.format(empty)),
        ([os.path.join(self.runs, 'nothing_yet')], 'holds no iteration'),
        ([os.path.join(self.directory, 'missing')], 'not a directory'),
        ([os.path.join(self.runs, 'per_s0'), '--label', 'x=typo_*'],
         '--label x=typo_* matches no run'),
    ):
      with self.subTest(message=message):
        status, _, err = self._main('--out', self.out, *args)
        self.assertEqual(status, 1)
        self.assertLen(err.splitlines(), 1)
        self.assertIn(message, err)
        self.assertFalse(os.path.exists(self.out))
    status, _, err = self._main(
        '--out', os.path.join(self.directory, 'no', 'such', 'dir.png'),
        os.path.join(self.runs, 'per_s0'))
    self.assertEqual(status, 1)
    self.assertRegex(err, r'^plot: error: cannot write .*dir\.png')

  def test_bad_label(self):  # --help: packaging_test.
    with self.assertRaisesRegex(ValueError, "NAME=GLOB, got 'x'"):
      plot.parse_label('x')
    with self.assertRaises(SystemExit) as exit_, contextlib.redirect_stderr(
        io.StringIO()):
      plot.main(['--out', self.out, self.runs, '--label', '=x'])
    self.assertEqual(exit_.exception.code, 2)

  def test_run_exits_with_the_status(self):
    with mock.patch.object(sys, 'argv', [
        'dopamine-per-plot', '--out', self.out,
        os.path.join(self.runs, 'per_s0')]), contextlib.redirect_stdout(
            io.StringIO()):
      with self.assertRaises(SystemExit) as exit_:
        plot.run()
    self.assertEqual(exit_.exception.code, 0)
    self.assertTrue(os.path.isfile(self.out))


if __name__ == '__main__':
  absltest.main()
