# coding=utf-8
"""Resuming an experiment from its checkpoints, or moving a run aside.

The `Runner`'s side of resuming: finishing an interrupted save, which
checkpoints to try and in what order, the checks of the runner's part of
``ckpt.N`` and of the statistics file, the global random states saved with
each checkpoint, and the error raised when nothing can be resumed.
`move_run_aside` starts over without deleting anything. How this differs
from Dopamine: docs/compat.md#run_experiment.
"""

import os
import random
import stat
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from dopamine_per.discrete_domains import checkpointer
from dopamine_per.file_io import atomic_files

__all__ = ['CannotResumeError', 'move_run_aside', 'finish_interrupted_save',
           'newest_loadable_checkpoint', 'check_experiment_data',
           'check_statistics_file', 'random_states', 'restore_random_states']

STATISTICS_FILENAME = 'statistics.jsonl'
LEARNING_CURVE_FILENAME = 'learning_curve.png'
CHECKPOINT_DIRNAME = 'checkpoints'
LOGGING_DIRNAME = 'logs'
# TensorBoard's event files, written to base_dir.
_EVENTS_PREFIX = 'events.out.tfevents.'
# Where `move_run_aside` puts an earlier run: base_dir/previous_run_<time>.
PREVIOUS_RUN_PREFIX = 'previous_run_'


class CannotResumeError(atomic_files.CheckpointError):
  """The experiment directory holds a run that cannot be resumed.

  Raised by `Runner` before it has changed any file (but for finishing a
  checkpoint save killed after its commit point). Its message names every
  refused checkpoint with the reason, and how to start over.

  Attributes:
    base_dir: str, the experiment directory.
    refusals: list of (iteration number, reason) of the refused checkpoints,
      newest first (empty when something else blocks the resume).
    message: str, the message (gin appends the configurables it was raised
      in to str() of an exception that passes through them).
  """

  def __init__(self, base_dir: str, problem: str,
               refusals: Sequence[Any] = ()):
    self.base_dir = base_dir
    self.refusals = list(refusals)
    lines = ['cannot resume the experiment in {}: {}; no file was '
             'changed.'.format(base_dir, problem)]
    lines += ['  checkpoint {}: {}'.format(number, reason)
              for number, reason in self.refusals]
    lines.append('To start over, use another base_dir, or move this run\'s '
                 'files aside (train.py --restart_from_scratch does that).')
    self.message = '\n'.join(lines)
    super().__init__(self.message)


def move_run_aside(base_dir: str) -> Optional[str]:
  """Moves an earlier run's files into a new base_dir/previous_run_<time>.

  Moved: ``checkpoints/``, ``logs/``, TensorBoard event files and
  ``learning_curve.png``, the files a `Runner` writes; anything else in
  base_dir stays. Nothing is deleted: a `Runner` on base_dir then starts
  from iteration 0, and the earlier run can be moved back by hand.

  Args:
    base_dir: str, the experiment directory.

  Returns:
    str, the folder the files were moved into, or None if base_dir holds
    none of them.

  Raises:
    OSError or tf.errors.OpError: If a file cannot be moved (those already
      moved stay in the new folder).
  """
  if not tf.io.gfile.isdir(base_dir):
    return None
  names = sorted(name for name in tf.io.gfile.listdir(base_dir)
                 if name.rstrip('/') in (CHECKPOINT_DIRNAME, LOGGING_DIRNAME,
                                         LEARNING_CURVE_FILENAME) or
                 name.startswith(_EVENTS_PREFIX))
  if not names:
    return None
  stamp = time.strftime('%Y%m%d-%H%M%S')
  destination = os.path.join(base_dir, PREVIOUS_RUN_PREFIX + stamp)
  suffix = 0
  while tf.io.gfile.exists(destination):  # Two restarts within a second.
    suffix += 1
    destination = os.path.join(base_dir, '{}{}_{}'.format(
        PREVIOUS_RUN_PREFIX, stamp, suffix))
  atomic_files.make_directories(destination)
  for name in names:
    name = name.rstrip('/')
    tf.io.gfile.rename(os.path.join(base_dir, name),
                       os.path.join(destination, name))
  return destination


def finish_interrupted_save(
    base_dir: str, experiment_checkpointer: checkpointer.Checkpointer) -> None:
  """Finishes a checkpoint save killed after its commit point.

  Call it before choosing a checkpoint: such a save replaced the files of
  checkpoint N only in part (`Checkpointer.finish_interrupted_save`).

  Args:
    base_dir: str, the experiment directory, for the error.
    experiment_checkpointer: the run's checkpointer.

  Raises:
    CannotResumeError: If the save's journal is malformed; no file was
      changed.
  """
  try:
    finished = experiment_checkpointer.finish_interrupted_save()
  except atomic_files.CorruptCheckpointError as e:
    raise CannotResumeError(
        base_dir, 'the journal of an interrupted checkpoint save is '
        'unusable ({}); moving it aside resumes from the checkpoints as they '
        'are'.format(checkpointer.error_summary(e))) from e
  if finished:
    logging.info('Finished the checkpoint save that was interrupted in %s.',
                 base_dir)


def _checkpoint_candidates(checkpoint_dir: str) -> List[int]:
  """The checkpoint numbers to try, in order: newest (or override) first."""
  latest = checkpointer.get_latest_checkpoint_number(checkpoint_dir)
  complete = checkpointer.get_complete_checkpoint_numbers(checkpoint_dir)
  if latest < 0:
    return complete
  return [latest] + [number for number in complete if number != latest]


def newest_loadable_checkpoint(
    checkpoint_dir: str, load: Callable[[int], Dict[str, Any]]
) -> Tuple[Optional[int], Optional[Dict[str, Any]], List[Any]]:
  """Tries the checkpoints newest first until one loads in full.

  Args:
    checkpoint_dir: str, the directory of the checkpoints.
    load: callable taking a checkpoint number and returning its experiment
      data, having loaded all of it or applied nothing (else raising).

  Returns:
    (version, experiment data, refusals): the loaded checkpoint's number
    and data, (None, None) if none loads, and the (number, reason) of
    each refused one.
  """
  refusals = []
  for version in _checkpoint_candidates(checkpoint_dir):
    try:
      return version, load(version), refusals
    except Exception as e:  # pylint: disable=broad-except
      # Whatever reading a damaged checkpoint raises (CheckpointError,
      # TF's errors, OSError, MemoryError, RecursionError, ...), nothing
      # of it was applied: the next older checkpoint is tried.
      refusals.append((version, checkpointer.error_summary(e)))
      logging.info('Checkpoint %d refused: %s', version, refusals[-1][1])
  return None, None, refusals


def check_statistics_file(base_dir: str, path: str) -> None:
  """Refuses a statistics file that reading would block on or fail on.

  Args:
    base_dir: str, the experiment directory, for the error.
    path: str, the statistics file; a missing one is accepted.

  Raises:
    CannotResumeError: If `path` cannot be read or is not a regular file.
  """
  if atomic_files.is_url(path) or not os.path.lexists(path):
    return
  try:
    regular = stat.S_ISREG(os.stat(path).st_mode)
  except OSError as e:  # A dangling link, a loop, no permission.
    raise CannotResumeError(base_dir, '{} cannot be read ({})'.format(
        path, e.strerror or e)) from e
  if not regular:
    raise CannotResumeError(base_dir, '{} is not a regular file'.format(path))


def _python_random_state(saved: Any) -> tuple:
  """Python's random state from its list form in ``ckpt.N``."""
  return (saved[0], tuple(saved[1]), saved[2])


def random_states() -> Dict[str, list]:
  """Python's and NumPy's global random states, as plain data for ``ckpt.N``.

  Returns:
    dict with ``python_random_state`` and ``numpy_random_state``, lists that
    `restore_random_states` turns back into the states.
  """
  python_state = random.getstate()
  return {
      'python_random_state': [python_state[0], list(python_state[1]),
                              python_state[2]],
      'numpy_random_state': list(np.random.get_state()),
  }


def restore_random_states(data: Dict[str, Any]) -> None:
  """Sets the global random states that `data` holds (checked beforehand)."""
  if 'python_random_state' in data:
    random.setstate(_python_random_state(data['python_random_state']))
  if 'numpy_random_state' in data:
    np.random.set_state(tuple(data['numpy_random_state']))


def check_experiment_data(data: Any, version: int) -> None:
  """Checks the runner's part of ``ckpt.N`` before anything is applied.

  Args:
    data: what ``ckpt.N`` holds.
    version: int, N.

  Raises:
    atomic_files.CheckpointError: If data is not a dict, its
      ``current_iteration`` is not N (a file of another iteration), or a
      saved random state would not be accepted.
  """
  if not isinstance(data, dict):
    raise atomic_files.CheckpointError(
        'ckpt.{} holds a {}, not a dict'.format(version, type(data).__name__))
  iteration = data.get('current_iteration')
  if (isinstance(iteration, bool) or
      not isinstance(iteration, (int, np.integer)) or iteration != version):
    raise atomic_files.CheckpointError(
        'ckpt.{} holds current_iteration {!r}, not {}'.format(
            version, iteration, version)[:300])
  # Trial runs on private generators: the global ones change only once the
  # whole checkpoint has loaded.
  checks = (('python_random_state',
             lambda s: random.Random().setstate(_python_random_state(s))),
            ('numpy_random_state',
             lambda s: np.random.RandomState().set_state(tuple(s))))
  for key, check in checks:
    if key not in data:
      continue
    try:
      check(data[key])
    except Exception as e:  # pylint: disable=broad-except
      # A malformed state raises TypeError, ValueError, IndexError, ...
      raise atomic_files.CheckpointError(
          'ckpt.{}: {} is malformed ({})'.format(
              version, key, checkpointer.error_summary(e))) from e
