r"""Learning quality across seeds: the main job's config, and uniform replay.

From the repository root, in the project's environment (`gym` extra):

  python -m benchmarks.learning --seeds 5             # prioritized replay
  python -m benchmarks.learning --seeds 5 --uniform   # and uniform replay

Trains configs/rainbow_cartpole.gin (the README's main job, `bash
scripts/train.sh`) with `Runner.seed = 0 .. N-1`, one `python -m
dopamine_per.discrete_domains.train` subprocess after another (so that the
steps/s are not shared between runs); with --uniform, the same again with
`RainbowAgent.replay_scheme = 'uniform'`. It then writes LEARNING.md (the
machine, the command, whether each seed meets issue 15's goal, and
`dopamine_per.plot`'s tables) and learning.png (its picture) into
--output_dir (benchmarks/).

Each run's files stay under --runs_dir (default: a new temporary directory,
printed); a --runs_dir holding earlier runs resumes them, as the trainer
does, so an interrupted benchmark continues where it stopped. Each run's
console output is in ``<runs_dir>/<scheme>/seed_<N>.log``.
"""

import argparse
import dataclasses
import os
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from dopamine_per import plot  # pylint: disable=g-import-not-at-top
from dopamine_per.file_io import atomic_files  # pylint: disable=g-import-not-at-top

__all__ = ['CONFIG', 'BEST_GOAL', 'LAST_GOAL', 'SCHEMES', 'train_command',
           'train', 'meets_goal', 'report', 'main']

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The main job's config (scripts/train.sh).
CONFIG = os.path.join('configs', 'rainbow_cartpole.gin')
# Issue 15's goal for every seed, within the config's iterations
# (CartPole-v1's maximum return is 500).
BEST_GOAL = 475.0
LAST_GOAL = 450.0
SCHEMES = ('prioritized', 'uniform')
_LOG_TAIL_LINES = 20


def train_command(base_dir: str, seed: int, scheme: str,
                  gin_files: Sequence[str],
                  gin_bindings: Sequence[str] = ()) -> List[str]:
  """The trainer's command line for one run.

  Args:
    base_dir: str, the run's directory.
    seed: int, bound to `Runner.seed`.
    scheme: str, one of SCHEMES, bound to `RainbowAgent.replay_scheme`.
    gin_files: the gin files.
    gin_bindings: bindings applied after the seed and the scheme.

  Returns:
    list of str, for subprocess.

  Raises:
    ValueError: If scheme is not one of SCHEMES.
  """
  if scheme not in SCHEMES:
    raise ValueError('scheme must be one of {}, got {!r}'.format(SCHEMES,
                                                                 scheme))
  bindings = ['Runner.seed = {:d}'.format(seed),
              "RainbowAgent.replay_scheme = '{}'".format(scheme)]
  return ([sys.executable, '-m', 'dopamine_per.discrete_domains.train',
           '--base_dir=' + base_dir] +
          ['--gin_files=' + f for f in gin_files] +
          ['--gin_bindings=' + b for b in bindings + list(gin_bindings)])


def train(runs_dir: str, seeds: int, schemes: Sequence[str],
          gin_files: Sequence[str], gin_bindings: Sequence[str] = ()
         ) -> Dict[str, List[str]]:
  """Trains every scheme on every seed, one run after another.

  Args:
    runs_dir: str, where the runs go (``<scheme>/seed_<N>``).
    seeds: int, seeds 0 .. seeds - 1.
    schemes: the replay schemes.
    gin_files: the gin files.
    gin_bindings: extra bindings for every run.

  Returns:
    dict of scheme -> the runs' directories, by seed.

  Raises:
    RuntimeError: If a run fails; the message names its log and ends with
      the log's last lines.
  """
  runs = {}
  env = dict(os.environ)
  # TensorFlow's C++ start-up messages are not worth a log line.
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  for scheme in schemes:
    runs[scheme] = []
    os.makedirs(os.path.join(runs_dir, scheme), exist_ok=True)
    for seed in range(seeds):
      base_dir = os.path.join(runs_dir, scheme, 'seed_{}'.format(seed))
      log_path = base_dir + '.log'
      print('{} seed {}: training (log: {})'.format(scheme, seed, log_path),
            file=sys.stderr, flush=True)
      start = time.time()
      with open(log_path, 'w', encoding='utf-8') as log:
        status = subprocess.run(
            train_command(base_dir, seed, scheme, gin_files, gin_bindings),
            cwd=_REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            check=False).returncode
      if status:
        with open(log_path, encoding='utf-8', errors='replace') as log:
          tail = ''.join(log.readlines()[-_LOG_TAIL_LINES:])
        raise RuntimeError('{} seed {} failed with status {} (log: {}):\n{}'
                           .format(scheme, seed, status, log_path, tail))
      summary = plot.summarize(plot.load_run(base_dir))
      print('{} seed {}: {:.0f} s, best eval {:.1f}, last-{} eval {:.1f}'
            .format(scheme, seed, time.time() - start, summary.best_eval,
                    plot.LAST_N, summary.last_eval),
            file=sys.stderr, flush=True)
      runs[scheme].append(base_dir)
  return runs


def meets_goal(summary: plot.Summary) -> bool:
  """Whether a run meets issue 15's goal (NaN never does)."""
  return summary.best_eval >= BEST_GOAL and summary.last_eval >= LAST_GOAL


def report(groups: Dict[str, List[plot.Run]], command: str, config: str,
           image_name: str) -> str:
  """The LEARNING.md document.

  Args:
    groups: dict of scheme -> its runs.
    command: str, the command that made it.
    config: str, the gin files it trained.
    image_name: str, the picture's file name, beside the document.

  Returns:
    str, Markdown.
  """
  lines = [
      'Written by `{}` (benchmarks/learning.py): {}, one seed after '
      'another; the table and the picture are `python -m dopamine_per.plot`'
      "'s.".format(command, config), '',
      '## Goal', '',
      'On every seed, within the config\'s iterations: best evaluation '
      'return >= {:.0f} and mean of the last {} >= {:.0f} (CartPole-v1\'s '
      'maximum is 500).'.format(BEST_GOAL, plot.LAST_N, LAST_GOAL), '']
  for scheme, runs in groups.items():
    failed = [r for r in runs if not meets_goal(plot.summarize(r))]
    lines.append('- {}: {} of {} runs meet it{}'.format(
        scheme, len(runs) - len(failed), len(runs),
        '; not: ' + ', '.join(os.path.basename(r.path) for r in failed)
        if failed else '.'))
  lines += ['', '## Results', '', plot.format_tables(groups),
            '![Evaluation return and steps/s per iteration]({})'.format(
                image_name), '']
  section = '\n'.join(lines)
  return common.document('Learning quality across seeds',
                         common.describe_machine(), section)


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog='python -m benchmarks.learning', description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--seeds', type=int, default=5,
                      help='Seeds 0 .. N-1 per replay scheme.')
  parser.add_argument('--uniform', action='store_true',
                      help='Also train with uniform replay.')
  parser.add_argument('--gin_files', action='append', default=None,
                      help='Gin files (repeatable; default: {}).'.format(
                          CONFIG))
  parser.add_argument('--gin_bindings', action='append', default=[],
                      help="Extra bindings for every run, e.g. "
                      "'Runner.num_iterations = 2' (repeatable).")
  parser.add_argument('--output_dir',
                      default=os.path.join(_REPO_ROOT, 'benchmarks'),
                      help='Where LEARNING.md and learning.png go.')
  parser.add_argument('--runs_dir', default='',
                      help="Where the runs go; empty: a new temporary "
                      'directory. Runs already there are resumed.')
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Trains, then writes LEARNING.md and learning.png; returns the status.

  Args:
    argv: the arguments without the program name (None: sys.argv[1:]).

  Returns:
    int: 0, or 1 if a run failed (reported on stderr).
  """
  argv = sys.argv[1:] if argv is None else list(argv)
  args = _parser().parse_args(argv)
  if args.seeds < 1:
    print('learning: error: --seeds must be at least 1, got {}'.format(
        args.seeds), file=sys.stderr)
    return 1
  runs_dir = args.runs_dir or tempfile.mkdtemp(prefix='learning_benchmark_')
  print('Runs in {}'.format(runs_dir), file=sys.stderr)
  gin_files = [os.path.abspath(f) for f in
               args.gin_files or [os.path.join(_REPO_ROOT, CONFIG)]]
  schemes = SCHEMES if args.uniform else SCHEMES[:1]
  try:
    run_dirs = train(runs_dir, args.seeds, schemes, gin_files,
                     args.gin_bindings)
  except RuntimeError as e:
    print('learning: error: {}'.format(e), file=sys.stderr)
    return 1
  # Named by scheme and seed: the temporary directory is no news.
  groups = {scheme: [dataclasses.replace(plot.load_run(d),
                                         path=os.path.relpath(d, runs_dir))
                     for d in dirs]
            for scheme, dirs in run_dirs.items()}
  os.makedirs(args.output_dir, exist_ok=True)
  image_name = 'learning.png'
  config = ' + '.join(os.path.relpath(f, _REPO_ROOT) for f in gin_files)
  plot.plot_groups(os.path.join(args.output_dir, image_name), groups,
                   title='{}: evaluation return and speed (line: mean, '
                   'band: min to max across seeds)'.format(config))
  command = ' '.join(['python -m benchmarks.learning'] +
                     [shlex.quote(a) for a in argv])
  text = report(groups, command, config, image_name)
  print(text)
  data = text.encode('utf-8')
  atomic_files.atomic_write(os.path.join(args.output_dir, 'LEARNING.md'),
                            lambda f: f.write(data))
  return 0


if __name__ == '__main__':
  sys.exit(main())
