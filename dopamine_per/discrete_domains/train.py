# coding=utf-8
r"""Trains an agent: the command-line entry point, as Dopamine's ``train``.

  python -m dopamine_per.discrete_domains.train \
      --base_dir=runs/rainbow_cartpole \
      --gin_files=configs/rainbow_cartpole.gin \
      --gin_bindings='Runner.num_iterations = 10'

Loads the gin files, then the bindings, creates the runner
(`run_experiment.create_runner`) and runs the experiment. Started again with
the same --base_dir, it resumes after the last complete checkpoint.
"""

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from dopamine_per.discrete_domains import run_experiment

flags.DEFINE_string('base_dir', None,
                    'Directory for checkpoints, logs and summaries.')
flags.DEFINE_multi_string(
    'gin_files', [], 'Gin configuration files, e.g. configs/rainbow.gin '
    '(repeatable; later files override earlier ones).')
flags.DEFINE_multi_string(
    'gin_bindings', [], 'Gin bindings applied after the files, e.g. '
    '"Runner.num_iterations = 10" (repeatable).')

FLAGS = flags.FLAGS

__all__ = ['main', 'run']


def main(argv):
  """Loads the configuration and runs the experiment."""
  if len(argv) > 1:
    raise app.UsageError('Unexpected arguments: {}'.format(' '.join(argv[1:])))
  if not FLAGS['verbosity'].present:
    # The runner's status line and summaries are the console output; absl's
    # INFO messages (--verbosity=0) would interleave with them.
    logging.set_verbosity(logging.WARNING)
    # TensorFlow's own deprecation notices (e.g. from the checkpoint saver's
    # clean-up) are not actionable for a user of the trainer.
    tf.get_logger().setLevel('ERROR')
  try:
    run_experiment.load_gin_configs(FLAGS.gin_files, FLAGS.gin_bindings)
  except (FileNotFoundError, ValueError) as e:
    raise app.UsageError(str(e)) from e
  runner = run_experiment.create_runner(FLAGS.base_dir)
  runner.run_experiment()


def run():
  """Runs `main` with absl (the console-script entry point)."""
  flags.mark_flag_as_required('base_dir')
  app.run(main)


if __name__ == '__main__':
  run()
