# coding=utf-8
r"""Trains an agent: the command-line entry point, as Dopamine's ``train``.

  dopamine-per-train \
      --base_dir=runs/rainbow_cartpole \
      --gin_files=rainbow_cartpole \
      --gin_bindings='Runner.num_iterations = 10'

(or ``python -m dopamine_per.discrete_domains.train``). --gin_files takes
paths of gin files, or the names of the configs shipped with the package
(--list_configs lists them; see `dopamine_per.configs`).

Checks that --base_dir can hold the run's files, locks it (one trainer per
--base_dir; `run_lock`), loads the gin files, then the bindings, creates the
runner (`run_experiment.create_runner`) and runs the experiment, resuming
after the last checkpoint that loads. If --base_dir holds checkpoints and
none loads, it exits with status 1 and one message naming each and why,
changing no file. What differs from Dopamine's: docs/compat.md#train.
"""

import os
import sys
import tempfile
from typing import Any, Callable, Optional, Sequence

from absl import app
from absl import flags
from absl import logging

from dopamine_per import configs
from dopamine_per import errors
from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import run_lock

flags.DEFINE_string('base_dir', None,
                    'Directory for checkpoints, logs and summaries.')
flags.DEFINE_multi_string(
    'gin_files', [], 'Gin configuration files, e.g. configs/rainbow.gin, '
    'or the names of shipped configs, e.g. rainbow_cartpole (see '
    '--list_configs); an existing file wins over a shipped name. Repeatable; '
    'later files override earlier ones.')
flags.DEFINE_multi_string(
    'gin_bindings', [], 'Gin bindings applied after the files, e.g. '
    '"Runner.num_iterations = 10" (repeatable).')

flags.DEFINE_boolean(
    'restart_from_scratch', False,
    'Start again from iteration 0 even if --base_dir holds an earlier run '
    '(e.g. one whose checkpoints are damaged). The earlier run\'s '
    'checkpoints/, logs/, TensorBoard event files and learning curve are '
    'first moved into --base_dir/previous_run_<time>/; nothing is deleted. '
    'Without it the trainer resumes after the last checkpoint that loads, '
    'or stops, changing nothing, if none does.')

flags.DEFINE_boolean(
    'list_configs', False,
    'Print the shipped gin configs (the names --gin_files takes) and exit.')

FLAGS = flags.FLAGS

__all__ = ['check_base_dir', 'describe_in_help', 'main', 'run']


def _nearest_existing(path: str) -> str:
  """Returns `path` or its closest ancestor that exists (a broken link too).

  A path below a regular file does not exist (ENOTDIR), so the file is
  returned.
  """
  while not os.path.lexists(path):
    parent = os.path.dirname(path)
    if parent == path:
      break
    path = parent
  return path


def check_base_dir(base_dir: Optional[str]) -> None:
  """Checks that the run's directory exists or can be created, writably.

  This check creates nothing (a probe file is deleted at once); `main`
  then creates the directory, if missing, and its lock file when it locks
  it (`run_lock.RunDirectoryLock.acquire`). Paths with a URL scheme
  (``gs://...``, `atomic_files.is_url`) are left to ``tf.io.gfile``.

  Args:
    base_dir: str, the --base_dir flag.

  Raises:
    ValueError: If base_dir is None or empty, is not a directory, lies
      below a path that is not a directory, or is (or would be created in)
      a directory where no file can be created; the message names the path.
  """
  if not base_dir:
    raise ValueError('--base_dir is required: the directory for '
                     'checkpoints, logs and summaries')
  if atomic_files.is_url(base_dir):
    return
  path = os.path.abspath(base_dir)
  existing = _nearest_existing(path)
  if not os.path.isdir(existing):
    if existing == path:
      raise ValueError('--base_dir={} is not a directory'.format(base_dir))
    raise ValueError('--base_dir={} cannot be created: {} is not a '
                     'directory'.format(base_dir, existing))
  try:
    # Creating a file is the only test that root, read-only filesystems and
    # access control lists all answer truthfully (os.access does not).
    with tempfile.TemporaryFile(dir=existing):
      pass
  except OSError as e:
    where = 'in it' if existing == path else 'in {}'.format(existing)
    raise ValueError('--base_dir={} is not writable: cannot create a file '
                     '{} ({})'.format(base_dir, where,
                                      e.strerror or e)) from e


def _train(base_dir: str, gin_files: Sequence[str],
           gin_bindings: Sequence[str], restart_from_scratch: bool,
           create_runner_fn: Optional[Callable[[str], Any]]) -> int:
  """Loads the configuration and runs the experiment (see `main`).

  Returns:
    int, the exit status: 0, or 1 when the run in base_dir cannot be
    resumed (reported on stderr, nothing changed).
  """
  # Imported here, after the flags are checked: TensorFlow takes seconds to
  # import and logs to stderr, which would bury a one-line flag error.
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from dopamine_per.discrete_domains import experiment_resume
  from dopamine_per.discrete_domains import run_experiment
  # pylint: enable=g-import-not-at-top
  if not FLAGS['verbosity'].present:
    # TensorFlow's own deprecation notices (e.g. from the checkpoint saver's
    # clean-up) are not actionable for a user of the trainer.
    tf.get_logger().setLevel('ERROR')
  try:
    run_experiment.load_gin_configs(gin_files, gin_bindings)
  except (FileNotFoundError, ValueError) as e:
    raise app.UsageError(str(e)) from e
  if restart_from_scratch:
    moved_to = experiment_resume.move_run_aside(base_dir)
    if moved_to:
      print('train: moved the earlier run in {} to {}'.format(
          base_dir, moved_to))
  try:
    runner = (create_runner_fn or run_experiment.create_runner)(base_dir)
  except experiment_resume.CannotResumeError as e:
    return errors.print_error('train', e.message)
  runner.run_experiment()
  return 0


def main(argv: Sequence[str],
         create_runner_fn: Optional[Callable[[str], Any]] = None,
         before_unlock_fn: Optional[Callable[[], None]] = None) -> int:
  """Checks and locks --base_dir, then trains; returns the exit status.

  The lock (`run_lock.RunDirectoryLock`, which creates --base_dir if it is
  missing) is taken before the gin files are loaded and the runner is
  created (the distributed trainer starts Ray there), and held until
  training ends, however it ends.

  Args:
    argv: the arguments left after absl's flags (the program name only).
    create_runner_fn: callable(base_dir) returning the runner, called once
      the gin configuration is loaded (the distributed trainer's); None:
      `run_experiment.create_runner`.
    before_unlock_fn: callable run once training ends, however it ends,
      before the lock is released (the distributed trainer stops Ray there,
      so that no shard still writes into the unlocked directory); None:
      nothing.

  Returns:
    int, 0 after training or --list_configs; 1, with one message on stderr
    and no file changed, for an unusable --base_dir, one that another
    trainer holds, a --gin_files entry that is neither a file nor a shipped
    config (these before TensorFlow is imported), or a run in --base_dir
    that cannot be resumed.

  Raises:
    app.UsageError: For extra arguments or a gin file or binding that does
      not load (absl prints it with the usage).
  """
  if len(argv) > 1:
    raise app.UsageError('Unexpected arguments: {}'.format(' '.join(argv[1:])))
  if FLAGS.list_configs:
    print(configs.listing())
    return 0
  try:
    check_base_dir(FLAGS.base_dir)
  except ValueError as e:
    return errors.print_error('train', e)
  if not FLAGS['verbosity'].present:
    # The runner's status line and summaries are the console output; absl's
    # INFO messages (--verbosity=0) would interleave with them.
    logging.set_verbosity(logging.WARNING)
  try:
    gin_files = [configs.resolve(gin_file) for gin_file in FLAGS.gin_files]
  except FileNotFoundError as e:
    return errors.print_error('train', e)
  lock = run_lock.RunDirectoryLock(FLAGS.base_dir)
  try:
    lock.acquire()
  except run_lock.RunDirectoryLockedError as e:
    return errors.print_error('train', e)
  except OSError as e:
    return errors.print_error('train', 'cannot lock --base_dir={}: {}'.format(
        FLAGS.base_dir, e.strerror or e))
  try:
    return _train(FLAGS.base_dir, gin_files, FLAGS.gin_bindings,
                  FLAGS.restart_from_scratch, create_runner_fn)
  finally:
    try:
      if before_unlock_fn is not None:
        before_unlock_fn()
    finally:
      lock.release()


def describe_in_help(module_name: str) -> None:
  """Makes absl's --help show a module's flags and docstring.

  absl's --help shows the flags of the module sys.argv[0] names and the
  docstring of ``__main__``: under a console script (``dopamine-per-train``)
  that is pip's wrapper, which has neither.

  Args:
    module_name: str, the name of a module whose flags --help lists (its
      docstring is shown too, if ``__main__`` has none).
  """
  for flag in FLAGS.get_key_flags_for_module(module_name):
    FLAGS.register_key_flag_for_module(sys.argv[0], flag)
  main_module = sys.modules['__main__']
  if not main_module.__doc__:
    main_module.__doc__ = sys.modules[module_name].__doc__


def run() -> None:
  """Runs `main` with absl: ``python -m`` and ``dopamine-per-train``.

  --base_dir is not marked required: `main` reports it missing in one line,
  and --list_configs needs none.
  """
  describe_in_help(__name__)
  app.run(main)


if __name__ == '__main__':
  run()
