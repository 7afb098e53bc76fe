"""Tests for learning_curve: the PNG, its panels, and one per iteration."""

import os
from unittest import mock

from absl.testing import absltest
from matplotlib import image as image_lib
import numpy as np

from dopamine_per.discrete_domains import learning_curve
from dopamine_per.discrete_domains import run_experiment
from tests.support import fixtures
from tests.support import gin_util
from tests.support import tiny_cartpole


def read_png(path):
  """Returns a PNG as a uint8 array [height, width, channels]."""
  return np.rint(image_lib.imread(path, format='png') * 255).astype(np.uint8)


def has_color(image, color):
  """Whether some pixel of `image` is exactly the RGB `color`."""
  return bool(np.any(np.all(image[..., :3] == np.asarray(color, np.uint8),
                            axis=-1)))


def records(num_iterations, steps_per_iteration=4000):
  return [{'iteration': i, 'training_steps': steps_per_iteration * (i + 1),
           'train_average_return': 20.0 + 30 * i,
           'eval_average_return': 10.0 + 40 * i,
           'learner_steps_per_second': 7.0}  # Unknown keys are ignored.
          for i in range(num_iterations)]


class LearningCurveTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.directory = fixtures.temp_dir(self)
    self.path = os.path.join(self.directory, 'curve.png')

  def _panels(self, lines):
    """Plots `lines`; returns the picture's two panels (its halves)."""
    learning_curve.plot_learning_curve(self.path, lines)
    image = read_png(self.path)
    self.assertEqual(image.shape[:2],
                     (learning_curve.HEIGHT_PX, learning_curve.WIDTH_PX))
    half = learning_curve.WIDTH_PX // 2
    return image[:, :half], image[:, half:]

  def test_both_returns_in_both_panels(self):
    for panel in self._panels(
        records(5) + [{'iteration': 5, 'train_average_return': None}]):
      self.assertTrue(has_color(panel, learning_curve.EVAL_COLOR))
      self.assertTrue(has_color(panel, learning_curve.TRAIN_COLOR))

  def test_records_without_training_steps(self):
    lines = records(3)
    for record in lines:
      record['training_steps'] = None
    by_iteration, by_steps = self._panels(lines)
    self.assertTrue(has_color(by_iteration, learning_curve.EVAL_COLOR))
    self.assertFalse(has_color(by_steps, learning_curve.EVAL_COLOR))

  def test_empty_log_gives_axes_only(self):
    for panel in self._panels([]):
      self.assertFalse(has_color(panel, learning_curve.EVAL_COLOR))

  def test_replaces_the_file_and_leaves_no_temporary(self):
    learning_curve.plot_learning_curve(self.path, records(2))
    first = os.path.getsize(self.path)
    learning_curve.plot_learning_curve(self.path, records(30))
    self.assertNotEqual(os.path.getsize(self.path), first)
    self.assertEqual(os.listdir(self.directory), ['curve.png'])

  def test_unwritable_path_raises_os_error(self):
    # The Runner catches OSError and only logs it.
    with self.assertRaises(OSError):
      learning_curve.plot_learning_curve(
          os.path.join(self.directory, 'missing', 'curve.png'), records(2))

  def test_series_keeps_numbers_only(self):
    lines = [{'iteration': 0, 'y': 1.0}, {'iteration': 1, 'y': None},
             {'iteration': 2, 'y': float('nan')}, {'iteration': 3, 'y': True},
             {'iteration': 4, 'y': '5'}, {'y': 6.0}, {'iteration': 7, 'y': 8}]
    self.assertEqual(learning_curve.series(lines, 'iteration', 'y'),
                     ([0, 7], [1.0, 8]))

  def test_new_figure_rejects_bad_sizes(self):
    for name, args in (('width_px', (0, 10, 1)), ('height_px', (10, 2.5, 1)),
                       ('columns', (10, 10, True))):
      with self.assertRaisesRegex(ValueError, name):
        learning_curve.new_figure(*args)

  def test_import_does_not_import_matplotlib(self):
    code = ('import sys\n'
            'from dopamine_per.discrete_domains import learning_curve\n'
            'assert "matplotlib" not in sys.modules, "imported matplotlib"\n')
    result = fixtures.run_python(['-c', code], 120)
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])


class RunnerDrawsEveryIterationTest(absltest.TestCase):

  def test_one_picture_per_iteration(self):
    gin_util.hide_dopamine_configurables(self)
    runner = tiny_cartpole.runner(fixtures.temp_dir(self), 2)
    drawn = []
    draw = learning_curve.plot_learning_curve

    def plot(path, lines, title=None):
      drawn.append([record['iteration'] for record in lines])
      draw(path, lines, title)

    with mock.patch.object(run_experiment.learning_curve,
                           'plot_learning_curve', plot):
      runner.run_experiment()
    self.assertEqual(drawn, [[0], [0, 1]])
    image = read_png(runner.learning_curve_path)
    self.assertEqual(image.shape[:2],
                     (learning_curve.HEIGHT_PX, learning_curve.WIDTH_PX))
    self.assertTrue(has_color(image, learning_curve.EVAL_COLOR))


if __name__ == '__main__':
  absltest.main()
