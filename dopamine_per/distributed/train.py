# coding=utf-8
r"""Trains an agent Ape-X style on Ray: the distributed trainer's command line.

  python -m dopamine_per.distributed.train \
      --base_dir=runs/apex_cartpole \
      --gin_files=configs/apex_cartpole.gin \
      [--gin_bindings='Runner.num_iterations = 10'] \
      [--ray_address=auto]

The single-machine trainer's flags (`discrete_domains.train`: --base_dir,
--gin_files, --gin_bindings, --restart_from_scratch), checks, logs and
resuming, with `runner.ApexRunner` as the runner. --ray_address joins a
running Ray cluster (``auto``: the one this machine belongs to, e.g. after
``ray start --head``), as does the RAY_ADDRESS environment variable; without
either a local Ray is started on this machine, on the loopback interface,
and stopped at the end. A shard that dies ends
the run with one line naming it and exit status 1: run the same command
again to resume from the last checkpoint. See docs/distributed.md.
"""

import os
import sys
from typing import Any, Optional, Sequence

from absl import app
from absl import flags

from dopamine_per import errors
from dopamine_per.discrete_domains import train

flags.DEFINE_string(
    'ray_address', None,
    'Address of a running Ray cluster to join (e.g. "auto", or '
    '"ray://head:10001" for Ray Client); without it, a local Ray is started '
    'on this machine.')

FLAGS = flags.FLAGS

__all__ = ['main', 'run', 'init_ray']


def init_ray(address: Optional[str]) -> None:
  """Joins the Ray cluster at `address`, or starts a local one.

  A Ray already initialized in this process is kept as it is.

  Args:
    address: str or None; None joins the cluster named by the RAY_ADDRESS
      environment variable (Ray's convention) if it is set, else starts a
      local Ray with this machine's CPUs, reachable on 127.0.0.1 only,
      without its dashboard.
  """
  import ray  # pylint: disable=g-import-not-at-top
  if ray.is_initialized():
    return
  if address or os.environ.get('RAY_ADDRESS'):
    ray.init(address=address)  # None: Ray reads RAY_ADDRESS.
    return
  # The local processes inherit this environment. TensorFlow's start-up
  # notices from every actor would bury the trainer's progress lines. Ray
  # runs its workers at nice 15, below this process: on a small machine the
  # learner would then starve the shards and actors it waits for.
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  os.environ.setdefault('RAY_worker_niceness', '0')
  ray.init(include_dashboard=False, _node_ip_address='127.0.0.1')


def _create_runner(base_dir: str) -> Any:
  """Starts or joins Ray, then builds the Ape-X runner (after gin loads)."""
  # pylint: disable=g-import-not-at-top
  from dopamine_per.distributed import runner
  # pylint: enable=g-import-not-at-top
  init_ray(FLAGS.ray_address)
  return runner.create_apex_runner(base_dir)


def _shutdown_ray() -> None:
  """Stops this process's Ray, and the local cluster it started if any.

  `train.main` runs it before it releases the run directory's lock, so
  that no shard or actor still writes into the directory.
  """
  import ray  # pylint: disable=g-import-not-at-top
  ray.shutdown()


def main(argv: Sequence[str]) -> int:
  """Trains with `runner.ApexRunner`; returns the exit status.

  Args:
    argv: the arguments left after absl's flags (the program name only).

  Returns:
    int, as `discrete_domains.train.main`, and 1 when a replay shard or an
    actor died beyond recovery (one line on stderr naming it).
  """
  try:
    return train.main(argv, create_runner_fn=_create_runner,
                      before_unlock_fn=_shutdown_ray)
  except Exception as error:  # pylint: disable=broad-except
    # Imported only now: the runner imports TensorFlow, which the flag
    # checks in `train.main` run without.
    # pylint: disable=g-import-not-at-top
    from dopamine_per.distributed import runner
    from dopamine_per.distributed import shard
    # pylint: enable=g-import-not-at-top
    if not isinstance(error, (shard.ShardError, runner.ActorFailedError)):
      raise
    # The exception a Ray task raised, without Ray's wrapping traceback.
    cause = getattr(error, 'cause', None) or error
    return errors.print_error(
        'train', '{} (run the same command again to resume from the last '
        'checkpoint)'.format(str(cause).strip().splitlines()[0]))
  finally:
    # Ray starts only while `train.main` holds the lock (in _create_runner),
    # and `train.main` stops it before unlocking; this stops one it left
    # running. Ray not imported (e.g. after a flag error): none to stop.
    if 'ray' in sys.modules:
      _shutdown_ray()


def run():
  """Runs `main` with absl (the dopamine-per-train-distributed script)."""
  train.describe_in_help(__name__)
  train.describe_in_help(train.__name__)
  app.run(main)


if __name__ == '__main__':
  run()
