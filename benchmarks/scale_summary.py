r"""The scale section's headline: one table and one plot at 2**20 (issue 33).

benchmarks/scale_benchmark.py measures every implementation on every game
and extrapolates its figures to 2**20; this module summarizes one game's
(the least compressible measured) for readers who want the key figures
only:

* `headline_table`: a Markdown table of the key figures (`FIGURES`), one
  column per implementation, and issue 33's target for each, under a
  heading that starts with `HEADLINE_HEADING`;
* `plot`: the same figures as bars, one panel each, the targets drawn as
  dashed lines, written as a PNG (matplotlib on an Agg canvas, as
  dopamine_per's learning curves, and atomically);
* `results_pointer`: the paragraph benchmarks/RESULTS.md carries for the
  opt-in section: where its results are (benchmarks/SCALE.md, the plot)
  and the headline table copied from SCALE.md, so that RESULTS.md stays the
  one place to look without repeating every table.

Nothing here measures or imports the section: the figures and targets come
in as arguments, in the section's units (MiB, ms, MB, s, x).
"""

import collections
import os
from typing import Mapping, Optional, Sequence

from dopamine_per.discrete_domains import learning_curve

__all__ = ['FIGURES', 'HEADLINE_HEADING', 'Figure', 'extract_headline',
           'headline_table', 'plot', 'results_pointer']

HEADLINE_HEADING = '### Headline at 2**20'

# key: the section's figure (scale_benchmark.METRICS); label and unit as
# shown; scale: from the section's unit to the shown one; decimals; log:
# whether its panel has a logarithmic axis (figures that span decades
# across implementations); panel: whether it is plotted.
Figure = collections.namedtuple(
    'Figure', ['key', 'label', 'unit', 'scale', 'decimals', 'log', 'panel'])

FIGURES = (
    Figure('resident', 'resident after filling', 'GiB', 1 / 1024, 2, False,
           True),
    Figure('floor_ratio', 'sample(32) + set_priority(32) / copy floor',
           'x', 1.0, 2, False, True),
    Figure('step', 'staged graph training step', 'ms', 1.0, 2, False, True),
    Figure('step_ratio', 'staged step / ours uncompressed', 'x', 1.0, 2,
           False, False),
    Figure('stall', 'save stall seen by the trainer', 'ms', 1.0, 0, True,
           True),
    Figure('save', 'save wall time', 's', 1.0, 1, True, False),
    Figure('checkpoint', 'bytes on disk per checkpoint', 'MB', 1.0, 0,
           False, True),
    Figure('retained', 'bytes on disk, checkpoints retained', 'MB', 1.0, 0,
           False, False),
    Figure('load', 'load into a fresh memory', 's', 1.0, 1, False, True),
)

# The plot's size in pixels (at learning_curve.DPI).
WIDTH_PX = 1500
HEIGHT_PX = 800


def _shown(figure: Figure, value: Optional[float]) -> Optional[float]:
  return None if value is None else value * figure.scale


def _text(figure: Figure, value: Optional[float]) -> str:
  shown = _shown(figure, value)
  return 'n/a' if shown is None else f'{shown:,.{figure.decimals}f}'


def _label(figure: Figure, retained: int) -> str:
  if figure.key == 'retained':
    return f'bytes on disk, {retained} retained checkpoints'
  return figure.label


def headline_table(at_target: Mapping[str, Mapping[str, Optional[float]]],
                   titles: Mapping[str, str], game: str,
                   targets: Mapping[str, str], retained: int) -> str:
  """The key figures at 2**20 as Markdown, under a `HEADLINE_HEADING`.

  Args:
    at_target: {implementation: {figure key: value at 2**20, in the
      section's units}}, in the columns' order; a value None where the
      implementation has no equivalent.
    titles: {implementation: column title}.
    game: str, the game the figures are of.
    targets: {figure key: issue 33's target, as text}; a figure without
      one gets '—'.
    retained: int, how many checkpoints the 'retained' figure holds.

  Returns:
    str: the heading, a blank line, the table (no trailing newline).
  """
  names = list(at_target)
  header = ['figure (at 2**20)'] + [titles[n] for n in names] + ['target']
  lines = [f'{HEADLINE_HEADING} ({game}, extrapolated)', '',
           '| ' + ' | '.join(header) + ' |',
           '|---|' + '---:|' * len(names) + '---|']
  for figure in FIGURES:
    cells = [f'{_label(figure, retained)} ({figure.unit})']
    cells += [_text(figure, at_target[n].get(figure.key)) for n in names]
    cells.append(targets.get(figure.key, '—'))
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def _bars(ax, figure: Figure, at_target, titles, target: Optional[float]):
  """One panel: a bar per implementation, 'n/a' where none, the target."""
  names = list(at_target)
  values = [_shown(figure, at_target[n].get(figure.key)) for n in names]
  positions = list(range(len(names)))
  measured = [v for v in values if v]
  ax.bar([p for p, v in zip(positions, values) if v is not None],
         [v for v in values if v is not None],
         color=[f'C{p % 10}' for p, v in zip(positions, values)
                if v is not None])
  for position, value in zip(positions, values):
    if value is None:  # At the bottom of the axes, whatever its scale.
      ax.annotate('n/a', (position, 0.02), xycoords=('data', 'axes fraction'),
                  ha='center', va='bottom', fontsize='small')
    else:
      ax.annotate(f'{value:,.{figure.decimals}f}', (position, value),
                  ha='center', va='bottom', fontsize='small')
  if target is not None:
    ax.axhline(target * figure.scale, color='red', linestyle='--',
               linewidth=1.5)
    measured.append(target * figure.scale)
  if figure.log and measured:
    ax.set_yscale('log')
    ax.set_ylim(min(measured) / 2, max(measured) * 4)
    ax.yaxis.set_major_formatter(_plain_numbers())
  elif measured:  # Room above the tallest bar for its label.
    ax.set_ylim(0, max(measured) * 1.15)
  ax.set_xlim(-0.6, len(names) - 0.4)  # A slot for every implementation.
  ax.set_xticks(positions)
  ax.set_xticklabels([titles[n] for n in names], fontsize='small',
                     rotation=15)
  ax.set_title(f'{figure.label} ({figure.unit})', fontsize='medium')


def _plain_numbers():
  """A tick formatter writing 100000 as '100,000' (not 10^5)."""
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  return ticker.FuncFormatter(lambda value, _: f'{value:,g}')


def plot(path: str, at_target: Mapping[str, Mapping[str, Optional[float]]],
         titles: Mapping[str, str], game: str,
         targets: Mapping[str, float]) -> None:
  """Draws the plotted `FIGURES` as bars at 2**20; writes a PNG atomically.

  Args:
    path: str, the PNG file.
    at_target: {implementation: {figure key: value at 2**20}}, as for
      `headline_table`.
    titles: {implementation: bar label}.
    game: str, the game, in the title.
    targets: {figure key: target in the section's units}, drawn dashed.

  Raises:
    OSError: If the file cannot be written.
  """
  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg
  from matplotlib import figure as figure_lib
  # pylint: enable=g-import-not-at-top
  dpi = learning_curve.DPI
  fig = figure_lib.Figure(figsize=(WIDTH_PX / dpi, HEIGHT_PX / dpi), dpi=dpi)
  backend_agg.FigureCanvasAgg(fig)
  panels = [f for f in FIGURES if f.panel]
  columns = (len(panels) + 1) // 2
  for number, figure in enumerate(panels):
    ax = fig.add_subplot(2, columns, number + 1)
    ax.grid(True, axis='y', color='0.9')
    _bars(ax, figure, at_target, titles, targets.get(figure.key))
  fig.suptitle(f'Atari at scale, {game}, extrapolated to 2**20 (red dashes: '
               'issue 33\'s target; the step\'s is ours uncompressed\'s; '
               'lower is better)')
  fig.subplots_adjust(left=0.05, right=0.98, bottom=0.09, top=0.9,
                      wspace=0.3, hspace=0.45)
  learning_curve.write_figure(path, fig)


def extract_headline(report: str) -> Optional[str]:
  """The headline block (heading and table) of a section's text, or None."""
  lines = report.splitlines()
  for start, line in enumerate(lines):
    if line.startswith(HEADLINE_HEADING):
      end = start + 2
      while end < len(lines) and lines[end].startswith('|'):
        end += 1
      return '\n'.join(lines[start:end])
  return None


def results_pointer(scale_path: str, plot_name: str = 'scale.png') -> str:
  """RESULTS.md's section for the opt-in `scale` section.

  Args:
    scale_path: str, benchmarks/SCALE.md (read if it exists).
    plot_name: str, the plot's file name beside it (linked if it exists).

  Returns:
    str: a `##` heading, where the results are, and SCALE.md's headline
    table (or a line saying it has none yet).
  """
  name = os.path.basename(scale_path)
  headline = None
  if os.path.exists(scale_path):
    with open(scale_path, encoding='utf-8') as f:
      headline = extract_headline(f.read())
  plotted = os.path.exists(os.path.join(os.path.dirname(scale_path),
                                        plot_name))
  lines = [
      '## Atari at scale (opt-in section `scale`, issue 33)', '',
      'Not part of the default run (it takes about half an hour): '
      '`python -m benchmarks --sections=scale`, or '
      '`python -m benchmarks.scale_benchmark`. Its measured tables (every '
      'game, ours compressed and uncompressed beside Dopamine TF and cpprb, '
      'issue 33\'s targets) and how they were run are in '
      f'[{name}]({name})' +
      (f', plotted in [{plot_name}]({plot_name})' if plotted else '') +
      '; its headline, copied from there:', '',
      headline or f'({name} has no headline table yet: rerun the section.)',
  ]
  return '\n'.join(lines) + '\n'
