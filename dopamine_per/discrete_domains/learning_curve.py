# coding=utf-8
"""The per-run learning curve, and the plotting helpers `plot` shares.

The `Runner` calls `plot_learning_curve` after every iteration, which
redraws ``base_dir/learning_curve.png``. Figures are drawn on matplotlib's
Agg canvas directly (no pyplot: no global figure state, no GUI backend),
and matplotlib is imported on the first drawing only, so importing this
module (and `run_experiment`) stays cheap. New:
docs/compat.md#learning_curve.
"""

import io
from typing import Any, Mapping, Optional, Sequence, Tuple

from dopamine_per.discrete_domains import statistics_file
from dopamine_per.file_io import atomic_files

__all__ = ['TRAIN_COLOR', 'EVAL_COLOR', 'WIDTH_PX', 'HEIGHT_PX', 'DPI',
           'series', 'rgb', 'new_figure', 'integer_ticks', 'write_figure',
           'plot_learning_curve']

Color = Tuple[int, int, int]

TRAIN_COLOR: Color = (230, 120, 20)
EVAL_COLOR: Color = (30, 90, 200)
# The learning curve's size in pixels (DPI pixels per inch).
WIDTH_PX = 1000
HEIGHT_PX = 400
DPI = 100
# Markers on the points only while they stay apart.
_MAX_MARKED_POINTS = 40


def series(records: Sequence[Mapping[str, Any]], x_key: str,
           y_key: str) -> Tuple[list, list]:
  """Returns the (xs, ys) of the records where both keys hold numbers.

  A value that is not a finite number (None, text, a bool, an int beyond
  any float) leaves its record out.

  Args:
    records: statistics records (dicts); other keys are ignored.
    x_key: str, e.g. 'iteration' or 'training_steps'.
    y_key: str, e.g. 'eval_average_return'.

  Returns:
    two lists of equal length, in the records' order.
  """
  xs, ys = [], []
  for record in records:
    x, y = record.get(x_key), record.get(y_key)
    if (statistics_file.is_finite_number(x) and
        statistics_file.is_finite_number(y)):
      xs.append(x)
      ys.append(y)
  return xs, ys


def rgb(color: Color) -> Tuple[float, float, float]:
  """An (r, g, b) of 0-255 integers as matplotlib's 0-1 floats."""
  return tuple(channel / 255.0 for channel in color)


def new_figure(width_px: int, height_px: int, columns: int):
  """Returns (figure, axes): a matplotlib Figure on an Agg canvas.

  Args:
    width_px: int, the PNG's width in pixels.
    height_px: int, its height.
    columns: int, side-by-side panels sharing nothing.

  Returns:
    (matplotlib.figure.Figure, list of its Axes, left to right).

  Raises:
    ValueError: If a size or `columns` is not a positive integer.
  """
  for name, value in (('width_px', width_px), ('height_px', height_px),
                      ('columns', columns)):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
      raise ValueError('{} must be a positive integer, got {!r}'.format(
          name, value))
  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg
  from matplotlib import figure as figure_lib
  # pylint: enable=g-import-not-at-top
  fig = figure_lib.Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)
  backend_agg.FigureCanvasAgg(fig)
  axes = [fig.add_subplot(1, columns, i + 1) for i in range(columns)]
  # Fixed margins: a layout engine would cost more than the drawing itself.
  fig.subplots_adjust(left=0.07, right=0.98, bottom=0.14, top=0.88,
                      wspace=0.22)
  for ax in axes:
    ax.grid(True, color='0.9')
  return fig, axes


def integer_ticks(ax) -> None:
  """Puts the x ticks of `ax` on integers (for iteration numbers)."""
  ax.xaxis.get_major_locator().set_params(integer=True)


def write_figure(path: str, fig) -> None:
  """Writes a figure as a PNG of its exact pixel size, atomically.

  Args:
    path: str, the PNG file (a local path or a tf.io.gfile URL).
    fig: a Figure from `new_figure`.

  Raises:
    OSError: If the file cannot be written (it is then left as it was).
  """
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png', dpi=DPI)
  data = buffer.getvalue()
  atomic_files.atomic_write(path, lambda f: f.write(data))


def _draw(ax, xs: Sequence[float], ys: Sequence[float], color: Color,
          label: str) -> None:
  marker = 'o' if len(xs) <= _MAX_MARKED_POINTS else None
  ax.plot(xs, ys, color=rgb(color), linewidth=2, marker=marker,
          markersize=4, label=label)


def plot_learning_curve(path: str, records: Sequence[Mapping[str, Any]],
                        title: Optional[str] = None) -> None:
  """Writes the average training and evaluation returns as a PNG.

  Left panel: against the iteration; right panel: against the agent's
  training steps (the records' 'training_steps', cumulative). A record
  without a number for a key (None, missing) is left out of that line; an
  empty list gives empty axes. The PNG is WIDTH_PX x HEIGHT_PX.

  Args:
    path: str, the PNG file, replaced atomically.
    records: the `logger.StatisticsLog` records (dicts with 'iteration',
      'training_steps', 'train_average_return', 'eval_average_return';
      other keys are ignored).
    title: str, the figure's title; None: 'Average return per iteration'.

  Raises:
    OSError: If the file cannot be written.
  """
  fig, (by_iteration, by_steps) = new_figure(WIDTH_PX, HEIGHT_PX, 2)
  fig.suptitle('Average return per iteration' if title is None else title)
  for ax, x_key, x_label in ((by_iteration, 'iteration', 'iteration'),
                             (by_steps, 'training_steps', 'training steps')):
    for label, key, color in (('train', 'train_average_return', TRAIN_COLOR),
                              ('eval', 'eval_average_return', EVAL_COLOR)):
      xs, ys = series(records, x_key, key)
      if xs:
        _draw(ax, xs, ys, color, label)
    ax.set_xlabel(x_label)
    ax.set_ylabel('average return')
  integer_ticks(by_iteration)
  if by_iteration.lines:
    by_iteration.legend(loc='lower right')
  write_figure(path, fig)
