"""Test helper: a tiny Rainbow agent on CartPole, for tests that run a Runner.

`BINDINGS` shrink `GIN_FILE` so that an iteration takes well under a
second: enough for checkpoints, resuming and logs, not for learning. A test
that builds Runners in process first hides Dopamine's gin configurables
(`gin_util.hide_dopamine_configurables`).
"""

import atexit
import shutil
import tempfile
from typing import List, Sequence

import gin

from tests.support import fixtures

__all__ = ['GIN_FILE', 'REPLAY_CAPACITY', 'BATCH_SIZE', 'BINDINGS',
           'TRAINED_ITERATIONS', 'bindings', 'runner', 'copy_trained_run']

GIN_FILE = fixtures.repo_path('configs', 'rainbow_cartpole.gin')

# The replay memory's size.
REPLAY_CAPACITY = 500
BATCH_SIZE = 8

BINDINGS = (
    'gym_lib.CartpoleRainbowNetwork.hidden_units = (8,)',
    'RainbowAgent.min_replay_history = 20',
    'WrappedPrioritizedReplayBuffer.replay_capacity = {}'.format(
        REPLAY_CAPACITY),
    'WrappedPrioritizedReplayBuffer.batch_size = {}'.format(BATCH_SIZE),
    'Runner.training_steps = 100',
    'Runner.evaluation_steps = 10',
    'Runner.max_steps_per_episode = 50',
    'Runner.fine_grained_print_to_console = False',
)

# The iterations of `copy_trained_run`'s run: checkpoints 0, 1 and 2.
TRAINED_ITERATIONS = 3

# The run `copy_trained_run` copies, once trained.
_TRAINED = []


def bindings(num_iterations: int, extra: Sequence[str] = ()) -> List[str]:
  """`BINDINGS`, `num_iterations`, then `extra` (which override them)."""
  return list(BINDINGS) + ['Runner.num_iterations = {}'.format(
      num_iterations)] + list(extra)


def runner(base_dir: str, num_iterations: int, extra: Sequence[str] = ()):
  """A Runner on `base_dir` (resumed if it has checkpoints).

  Gin's configuration is cleared, then `GIN_FILE` and
  `bindings(num_iterations, extra)` loaded.
  """
  # Imported here: tests that only need the constants (file_modes_test runs
  # the trainer in subprocesses) do not load TensorFlow.
  from dopamine_per.discrete_domains import run_experiment  # pylint: disable=g-import-not-at-top
  gin.clear_config()
  run_experiment.load_gin_configs([GIN_FILE],
                                  bindings(num_iterations, extra))
  return run_experiment.create_runner(base_dir)


def copy_trained_run(destination: str) -> str:
  """Copies a run trained for `TRAINED_ITERATIONS` to new path `destination`.

  The run is trained by the first call in a process (in the caller's gin
  registry) and deleted when the process exits. Returns `destination`.
  """
  if not _TRAINED:
    template = tempfile.mkdtemp()
    atexit.register(shutil.rmtree, template, ignore_errors=True)
    runner(template, TRAINED_ITERATIONS).run_experiment()
    _TRAINED.append(template)
  shutil.copytree(_TRAINED[0], destination)
  return destination
