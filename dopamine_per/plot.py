# coding=utf-8
r"""Compares training runs: a picture and a table across seeds and configs.

  python -m dopamine_per.plot --out compare.png runs/per_s* runs/uniform_s* \
      --label PER='runs/per_s*' --label uniform='runs/uniform_s*'

Reads each run's ``logs/statistics.jsonl`` (lines that are not statistics
records are skipped, with one warning on stderr counting them) and draws,
against the iteration, the average evaluation return (left) and the
training steps per second (right). Runs sharing a label are one group: its
mean is the line and the band spans the group's minimum and maximum, e.g.
across seeds. A run no --label matches is a group of its own, named by its
directory.

It prints two Markdown tables: per run, the best evaluation return, the
mean of the last 5 evaluation returns, the mean training steps/s and the
seconds the iterations took; per group, the mean and the minimum (the
worst seed) of the first two, and the means of the others.

Exit status: 0; 1 for a run directory without statistics (or a --label
that matches no run, or a picture that cannot be written), reported in one
line on stderr; 2 for bad arguments.
"""

import argparse
import dataclasses
import fnmatch
import math
import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from dopamine_per import errors
from dopamine_per.discrete_domains import learning_curve
from dopamine_per.discrete_domains import statistics_file
from dopamine_per.file_io import atomic_files

__all__ = ['STATISTICS_FILE', 'LAST_N', 'WIDTH_PX', 'HEIGHT_PX', 'RunError',
           'Run', 'Summary', 'GroupSummary', 'load_run',
           'parse_label', 'group_runs', 'summarize', 'summarize_group',
           'band', 'format_tables', 'plot_groups', 'main', 'run']

# Where a run's base directory keeps its statistics.
STATISTICS_FILE = os.path.join('logs', 'statistics.jsonl')
# The table's "last-N" mean of the evaluation return.
LAST_N = 5
# The comparison picture's size in pixels.
WIDTH_PX = 1100
HEIGHT_PX = 450

EVAL_KEY = 'eval_average_return'
STEPS_PER_SECOND_KEY = 'train_average_steps_per_second'


class RunError(ValueError):
  """A run directory that cannot be compared; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Run:
  """A run's statistics.

  Attributes:
    path: str, the run's directory as given.
    records: list of dict, one per iteration, by increasing iteration.
  """
  path: str
  records: List[Dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Summary:
  """One run's numbers (NaN where the run has none).

  Attributes:
    iterations: int, the iterations recorded.
    best_eval: float, the highest average evaluation return.
    last_eval: float, the mean of the last `LAST_N` of them.
    steps_per_second: float, the mean training steps/s over iterations.
    seconds: float, the sum of the iterations' durations.
  """
  iterations: int
  best_eval: float
  last_eval: float
  steps_per_second: float
  seconds: float


@dataclasses.dataclass(frozen=True)
class GroupSummary:
  """A group's numbers across its runs (NaN where no run has one).

  Attributes:
    runs: int, the runs in the group.
    best_eval_mean, last_eval_mean, steps_per_second, seconds: float, means
      over the runs of those of their `Summary`.
    best_eval_min, last_eval_min: float, minimums (the worst run).
  """
  runs: int
  best_eval_mean: float
  best_eval_min: float
  last_eval_mean: float
  last_eval_min: float
  steps_per_second: float
  seconds: float


def load_run(run_dir: str) -> Run:
  """Reads the statistics of the run in `run_dir`; warns of skipped lines.

  Args:
    run_dir: str, a run's base directory (the trainer's --base_dir).

  Returns:
    Run.

  Raises:
    RunError: If run_dir is not a directory, has no readable
      logs/statistics.jsonl, or one without any iteration; the message is
      one line naming it.
  """
  if not atomic_files.is_url(run_dir) and not os.path.isdir(run_dir):
    raise RunError('{}: not a directory'.format(run_dir))
  path = os.path.join(run_dir, STATISTICS_FILE)
  try:
    read = statistics_file.read_records(path)
  except FileNotFoundError as e:
    raise RunError('{}: no {} (not a training run\'s --base_dir?)'.format(
        run_dir, STATISTICS_FILE)) from e
  except atomic_files.CheckpointError as e:
    raise RunError(str(e).splitlines()[0]) from e
  if not read.records:
    raise RunError('{}: {} holds no iteration yet'.format(run_dir,
                                                          STATISTICS_FILE))
  warning = read.warning()
  if warning:
    print('plot: warning: {}'.format(warning), file=sys.stderr)
  return Run(run_dir, read.records)


def parse_label(text: str) -> Tuple[str, str]:
  """Splits a --label value 'NAME=GLOB' into (name, glob).

  Raises:
    ValueError: If there is no '=' or the name or glob is empty.
  """
  name, sep, pattern = text.partition('=')
  if not sep or not name.strip() or not pattern.strip():
    raise ValueError('--label must be NAME=GLOB, got {!r}'.format(text))
  return name.strip(), pattern.strip()


def _matches(run_dir: str, pattern: str) -> bool:
  path = os.path.normpath(run_dir)
  return (fnmatch.fnmatchcase(path, os.path.normpath(pattern)) or
          fnmatch.fnmatchcase(os.path.basename(path), pattern))


def group_runs(runs: Sequence[Run], labels: Sequence[Tuple[str, str]] = ()
              ) -> Dict[str, List[Run]]:
  """Groups runs by the first label whose glob matches their directory.

  A glob matches a run's directory path (as given, normalized) or its last
  component. Several labels may share a name (their runs join one group).

  Args:
    runs: the runs, in the order given.
    labels: (name, glob) pairs, in the order given.

  Returns:
    dict of group name -> runs: the labels' groups in label order, then
    one group per unmatched run, named by its directory.

  Raises:
    RunError: If a label matches no run that an earlier label did not take
      (likely a typo).
  """
  groups: Dict[str, List[Run]] = {name: [] for name, _ in labels}
  used = set()
  for run_ in runs:
    for name, pattern in labels:
      if _matches(run_.path, pattern):
        groups[name].append(run_)
        used.add((name, pattern))
        break
    else:
      groups.setdefault(os.path.normpath(run_.path), []).append(run_)
  for name, pattern in labels:
    if (name, pattern) not in used:
      raise RunError('--label {}={} matches no run directory (that an '
                     'earlier --label did not take)'.format(name, pattern))
  return groups


def _mean(values: Sequence[float]) -> float:
  return float(np.mean(values)) if len(values) else math.nan


def summarize(run_: Run) -> Summary:
  """Returns the table's numbers for one run."""
  _, evals = learning_curve.series(run_.records, 'iteration', EVAL_KEY)
  _, speeds = learning_curve.series(run_.records, 'iteration',
                                    STEPS_PER_SECOND_KEY)
  _, seconds = learning_curve.series(run_.records, 'iteration',
                                     'iteration_seconds')
  return Summary(
      iterations=len(run_.records),
      best_eval=float(max(evals)) if evals else math.nan,
      last_eval=_mean(evals[-LAST_N:]),
      steps_per_second=_mean(speeds),
      seconds=float(sum(seconds)) if seconds else math.nan)


def summarize_group(runs: Sequence[Run]) -> GroupSummary:
  """Returns the table's numbers for a group: means and worst runs."""
  summaries = [summarize(r) for r in runs]

  def finite(field):
    return [getattr(s, field) for s in summaries
            if math.isfinite(getattr(s, field))]

  def minimum(values):
    return float(min(values)) if values else math.nan

  return GroupSummary(
      runs=len(runs),
      best_eval_mean=_mean(finite('best_eval')),
      best_eval_min=minimum(finite('best_eval')),
      last_eval_mean=_mean(finite('last_eval')),
      last_eval_min=minimum(finite('last_eval')),
      steps_per_second=_mean(finite('steps_per_second')),
      seconds=_mean(finite('seconds')))


def band(runs: Sequence[Run], key: str
        ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Mean, minimum and maximum of `key` across runs, per iteration.

  An iteration counts the runs that have a number for it.

  Args:
    runs: the group's runs.
    key: str, a statistics key, e.g. 'eval_average_return'.

  Returns:
    (iterations, mean, low, high): float arrays of one length, by
    increasing iteration; empty if no run has the key.
  """
  values: Dict[int, List[float]] = {}
  for run_ in runs:
    for x, y in zip(*learning_curve.series(run_.records, 'iteration', key)):
      values.setdefault(x, []).append(y)
  iterations = sorted(values)
  stacked = [np.asarray(values[i], float) for i in iterations]
  return (np.asarray(iterations, float),
          np.asarray([v.mean() for v in stacked]),
          np.asarray([v.min() for v in stacked]),
          np.asarray([v.max() for v in stacked]))


def _number(value: float, decimals: int = 1) -> str:
  return '{:.{}f}'.format(value, decimals) if math.isfinite(value) else '-'


def format_tables(groups: Mapping[str, Sequence[Run]]) -> str:
  """Returns the per-run and per-group tables, in Markdown.

  Args:
    groups: dict of group name -> runs (as `group_runs` returns).

  Returns:
    str: a 'Runs' table and a 'Groups' table, each under a '###' heading.
  """
  last = 'last-{} eval'.format(LAST_N)
  lines = ['### Runs', '',
           '| group | run | iterations | best eval | {} | steps/s | '
           'seconds |'.format(last),
           '|---|---|--:|--:|--:|--:|--:|']
  for name, runs in groups.items():
    for run_ in runs:
      s = summarize(run_)
      lines.append('| {} | {} | {} | {} | {} | {} | {} |'.format(
          name, run_.path, s.iterations, _number(s.best_eval),
          _number(s.last_eval), _number(s.steps_per_second, 0),
          _number(s.seconds, 0)))
  lines += ['', '### Groups', '',
            '| group | runs | best eval (mean) | best eval (min) | '
            '{0} (mean) | {0} (min) | steps/s (mean) | seconds (mean) |'
            .format(last),
            '|---|--:|--:|--:|--:|--:|--:|--:|']
  for name, runs in groups.items():
    g = summarize_group(runs)
    lines.append('| {} | {} | {} | {} | {} | {} | {} | {} |'.format(
        name, g.runs, _number(g.best_eval_mean), _number(g.best_eval_min),
        _number(g.last_eval_mean), _number(g.last_eval_min),
        _number(g.steps_per_second, 0), _number(g.seconds, 0)))
  return '\n'.join(lines) + '\n'


def plot_groups(path: str, groups: Mapping[str, Sequence[Run]],
                title: Optional[str] = None) -> None:
  """Draws each group's mean and min-max band; writes a PNG atomically.

  The PNG is WIDTH_PX x HEIGHT_PX (see the module docstring).

  Args:
    path: str, the PNG file.
    groups: dict of group name -> runs (as `group_runs` returns).
    title: str, the figure's title; None: says what the lines and bands
      are.

  Raises:
    OSError: If the file cannot be written.
  """
  fig, (returns, speeds) = learning_curve.new_figure(WIDTH_PX, HEIGHT_PX, 2)
  fig.suptitle('Evaluation return and speed (line: mean, band: min to max '
               'across runs)' if title is None else title)
  for number, (name, runs) in enumerate(groups.items()):
    color = 'C{}'.format(number % 10)
    label = '{} (n={})'.format(name, len(runs)) if len(runs) > 1 else name
    for ax, key in ((returns, EVAL_KEY), (speeds, STEPS_PER_SECOND_KEY)):
      iterations, mean, low, high = band(runs, key)
      if not len(iterations):
        continue
      ax.plot(iterations, mean, color=color, linewidth=2, label=label)
      if len(runs) > 1:
        ax.fill_between(iterations, low, high, color=color, alpha=0.2,
                        linewidth=0)
  for ax, y_label in ((returns, 'average evaluation return'),
                      (speeds, 'training steps per second')):
    ax.set_xlabel('iteration')
    ax.set_ylabel(y_label)
    learning_curve.integer_ticks(ax)
  if returns.lines:
    returns.legend(loc='lower right', fontsize='small')
  learning_curve.write_figure(path, fig)


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog='python -m dopamine_per.plot', description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('run_dirs', nargs='+', metavar='RUN_DIR',
                      help="Runs' base directories (each with "
                      'logs/statistics.jsonl).')
  parser.add_argument('--out', required=True, metavar='FILE.png',
                      help='The PNG to write (atomically).')

  def label(text):
    try:
      return parse_label(text)
    except ValueError as e:
      raise argparse.ArgumentTypeError(str(e)) from e

  parser.add_argument(
      '--label', action='append', default=[], type=label,
      metavar='NAME=GLOB',
      help='Put the runs whose directory (or its last component) matches '
      'GLOB in group NAME (repeatable; the first match wins). Quote the '
      'glob so the shell leaves it alone.')
  parser.add_argument('--title', default=None,
                      help="The picture's title.")
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Reads the runs, prints the tables and writes the picture.

  Args:
    argv: the command-line arguments, without the program name (None:
      ``sys.argv[1:]``).

  Returns:
    int: 0, or 1 after a one-line error on stderr (a run directory without
    statistics, a label matching no run, a picture that cannot be written).
    argparse exits with 2 for bad arguments.
  """
  args = _parser().parse_args(argv)
  try:
    groups = group_runs([load_run(d) for d in args.run_dirs], args.label)
    sys.stdout.write(format_tables(groups))
    plot_groups(args.out, groups, args.title)
  except RunError as e:
    return errors.print_error('plot', e)
  except OSError as e:
    return errors.print_error('plot', 'cannot write {}: {}'.format(
        args.out, e.strerror or e))
  return 0


def run() -> None:
  """Exits with `main`'s status (the console-script entry point)."""
  sys.exit(main())


if __name__ == '__main__':
  run()
