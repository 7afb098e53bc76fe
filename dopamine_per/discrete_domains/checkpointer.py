# coding=utf-8
"""Crash-safe experiment checkpoints, as Dopamine's ``checkpointer``.

Same names and files as ``dopamine.discrete_domains.checkpointer``: each
iteration N writes ``ckpt.N`` (the pickled experiment data: the agent's
bundle, the iteration number, ...) after the agent has written its own files
(``tf_ckpt-N.*``, the replay memory's ``*_ckpt.N.gz``), then the marker
``sentinel_checkpoint_complete.N``; `get_latest_checkpoint_number` returns
the newest N with a marker.

What is added to Dopamine's scheme:

* Every file is written atomically (`checkpoint_io.atomic_write`: temporary
  file, fsync, rename), so a crash never leaves a truncated file under a
  checkpoint name.
* The marker is written last and is a small JSON document listing every file
  of iteration N in the directory with its size and SHA-256. `load_checkpoint`
  returns None for a checkpoint whose marker is missing or whose files are
  missing or changed, so `Runner` falls back to the previous complete one. (A
  marker holding Dopamine's ``done`` is accepted without the check.)
* Garbage collection deletes a stale iteration's marker before its data, so
  a checkpoint is never half deleted while still marked complete.
* ``ckpt.N`` is read with the replay memory's restricted unpickler: plain
  data (dicts, lists, numbers, strings, NumPy arrays) only.
"""

import json
import os
import pickle
import re
from typing import Any, Dict, List, Optional

from absl import logging
import gin
import tensorflow as tf

from dopamine_per.replay_memory import checkpoint_io

__all__ = ['get_latest_checkpoint_number', 'get_complete_checkpoint_numbers',
           'iteration_files', 'Checkpointer']

_MARKER_FORMAT = 'dopamine_per.checkpoint_complete/2'


def _sentinel_prefix(sentinel_file_identifier: str) -> str:
  return 'sentinel_{}_complete'.format(sentinel_file_identifier)


def get_complete_checkpoint_numbers(
    base_directory: str,
    sentinel_file_identifier: str = 'checkpoint') -> List[int]:
  """Returns the iteration numbers that have a completion marker, newest first.

  Args:
    base_directory: str, the checkpoint directory.
    sentinel_file_identifier: str, the marker names' identifier.
  """
  prefix = _sentinel_prefix(sentinel_file_identifier) + '.'
  try:
    names = tf.io.gfile.listdir(base_directory)
  except tf.errors.NotFoundError:
    return []
  numbers = []
  for name in names:
    if name.startswith(prefix) and name[len(prefix):].isdigit():
      numbers.append(int(name[len(prefix):]))
  return sorted(numbers, reverse=True)


@gin.configurable
def get_latest_checkpoint_number(base_directory: str,
                                 override_number: Optional[int] = None,
                                 sentinel_file_identifier: str = 'checkpoint'
                                ) -> int:
  """Returns the newest iteration with a completion marker, or -1.

  Args:
    base_directory: str, the checkpoint directory.
    override_number: int or None, returned as is if not None (a gin override).
    sentinel_file_identifier: str, the marker names' identifier.
  """
  if override_number is not None:
    return override_number
  numbers = get_complete_checkpoint_numbers(base_directory,
                                            sentinel_file_identifier)
  return numbers[0] if numbers else -1


def iteration_files(base_directory: str, iteration_number: int,
                    exclude: Optional[str] = None) -> Dict[str, list]:
  """Returns {file name: [size, sha256]} of one iteration's checkpoint files.

  A file belongs to iteration N if its name has N between a '.' or '-' and a
  '.' or its end: ``ckpt.N``, ``tf_ckpt-N.index``, ``add_count_ckpt.N.gz``.
  Temporary files (names starting with '.') are left out.

  Args:
    base_directory: str, the checkpoint directory.
    iteration_number: int, N.
    exclude: str or None, a name to leave out (the marker itself).
  """
  pattern = re.compile(r'[.-]{}(\.|$)'.format(int(iteration_number)))
  files = {}
  for name in tf.io.gfile.listdir(base_directory):
    if name.startswith('.') or name == exclude or not pattern.search(name):
      continue
    path = os.path.join(base_directory, name)
    if tf.io.gfile.isdir(path):
      continue
    files[name] = list(checkpoint_io.file_digest(path))
  return files


@gin.configurable
class Checkpointer(object):
  """Saves and loads the experiment data of each iteration."""

  def __init__(self, base_directory: str, checkpoint_file_prefix: str = 'ckpt',
               sentinel_file_identifier: str = 'checkpoint',
               checkpoint_frequency: int = 1, checkpoint_duration: int = 4,
               keep_every: Optional[int] = None):
    """Creates the directory if needed.

    Args:
      base_directory: str, the checkpoint directory.
      checkpoint_file_prefix: str, the data files' prefix.
      sentinel_file_identifier: str, the marker names' identifier.
      checkpoint_frequency: int, checkpoint every this many iterations.
      checkpoint_duration: int, checkpoints kept (in units of the frequency).
      keep_every: int or None, never delete iterations that are multiples of
        keep_every * checkpoint_frequency.

    Raises:
      ValueError: If base_directory is empty or cannot be created.
    """
    if not base_directory:
      raise ValueError('No path provided to Checkpointer.')
    self._checkpoint_file_prefix = checkpoint_file_prefix
    self._sentinel_file_prefix = _sentinel_prefix(sentinel_file_identifier)
    self._checkpoint_frequency = checkpoint_frequency
    self._checkpoint_duration = checkpoint_duration
    self._keep_every = keep_every
    self._base_directory = base_directory
    try:
      tf.io.gfile.makedirs(base_directory)
    except tf.errors.PermissionDeniedError as e:
      raise ValueError('Unable to create checkpoint path: {}.'.format(
          base_directory)) from e

  def _generate_filename(self, file_prefix: str, iteration_number: int) -> str:
    return os.path.join(self._base_directory,
                        '{}.{}'.format(file_prefix, iteration_number))

  def save_checkpoint(self, iteration_number: int, data: Any) -> None:
    """Writes `data` and then the completion marker of `iteration_number`.

    Call it after everything else of the iteration (the agent's TF and
    replay files) is written: the marker lists those files.

    Args:
      iteration_number: int, the iteration.
      data: picklable plain data (see the module docstring).
    """
    if iteration_number % self._checkpoint_frequency != 0:
      return
    payload = pickle.dumps(data, protocol=4)
    checkpoint_io.atomic_write(
        self._generate_filename(self._checkpoint_file_prefix,
                                iteration_number),
        lambda f: f.write(payload))
    marker_name = '{}.{}'.format(self._sentinel_file_prefix, iteration_number)
    marker = {
        'format': _MARKER_FORMAT,
        'iteration': int(iteration_number),
        'files': iteration_files(self._base_directory, iteration_number,
                                 exclude=marker_name),
    }
    encoded = json.dumps(marker, indent=1, sort_keys=True).encode('utf-8')
    checkpoint_io.atomic_write(
        os.path.join(self._base_directory, marker_name),
        lambda f: f.write(encoded))
    self._clean_up_old_checkpoints(iteration_number)

  def _clean_up_old_checkpoints(self, iteration_number: int) -> None:
    stale = iteration_number - (self._checkpoint_frequency *
                                self._checkpoint_duration)
    if stale < 0:
      return
    if (self._keep_every is not None and
        stale % (self._keep_every * self._checkpoint_frequency) == 0):
      return
    # The marker goes first: a half-deleted checkpoint is never complete.
    for prefix in (self._sentinel_file_prefix, self._checkpoint_file_prefix):
      checkpoint_io.remove_if_exists(self._generate_filename(prefix, stale))

  def is_complete(self, iteration_number: int) -> bool:
    """Returns whether iteration_number's marker exists and its files match.

    Args:
      iteration_number: int, the iteration.
    """
    path = self._generate_filename(self._sentinel_file_prefix,
                                   iteration_number)
    if not tf.io.gfile.exists(path):
      return False
    with tf.io.gfile.GFile(path, 'rb') as f:
      content = f.read()
    try:
      marker = json.loads(content.decode('utf-8'))
    except ValueError:
      marker = None
    if not isinstance(marker, dict) or marker.get('format') != _MARKER_FORMAT:
      # Dopamine's marker ('done'): nothing to verify.
      return content.strip() in (b'done', b'')
    for name, digest in marker.get('files', {}).items():
      file_path = os.path.join(self._base_directory, name)
      if not tf.io.gfile.exists(file_path):
        logging.warning('Checkpoint %d is incomplete: %s is missing.',
                        iteration_number, name)
        return False
      if tf.io.gfile.stat(file_path).length != digest[0]:
        logging.warning('Checkpoint %d is inconsistent: %s changed size.',
                        iteration_number, name)
        return False
      if tuple(checkpoint_io.file_digest(file_path)) != tuple(digest):
        logging.warning('Checkpoint %d is inconsistent: %s changed (its '
                        'SHA-256 differs).', iteration_number, name)
        return False
    return True

  def load_checkpoint(self, iteration_number: int) -> Optional[Any]:
    """Returns the data saved for iteration_number, or None.

    None when the checkpoint is not complete (see `is_complete`) or its data
    file is missing.

    Args:
      iteration_number: int, the iteration.

    Raises:
      checkpoint_io.CheckpointError: If the data file is corrupt or holds
        more than plain data.
    """
    if not self.is_complete(iteration_number):
      return None
    path = self._generate_filename(self._checkpoint_file_prefix,
                                   iteration_number)
    if not tf.io.gfile.exists(path):
      return None
    with tf.io.gfile.GFile(path, 'rb') as f:
      return checkpoint_io.restricted_loads(f.read(), filename=path)
