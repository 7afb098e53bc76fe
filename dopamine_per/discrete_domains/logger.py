# coding=utf-8
"""Experiment logs as plain data: Dopamine's ``Logger`` and a JSON-lines log.

`Logger` has the interface of ``dopamine.discrete_domains.logger.Logger``
but writes JSON instead of a pickle, atomically: files ``{prefix}_{N}``
holding every iteration's statistics so far, the ``logs_duration`` newest
kept. `StatisticsLog` is ``statistics.jsonl``, one JSON object per
iteration, which the `Runner` reads back. What differs from Dopamine:
docs/compat.md#logger.
"""

import json
import math
import os
from typing import Any, Dict, List

from absl import logging
import gin
import numpy as np
import tensorflow as tf

from dopamine_per.discrete_domains import statistics_file
from dopamine_per.file_io import atomic_files

__all__ = ['Logger', 'StatisticsLog', 'to_json_value']


def to_json_value(value: Any) -> Any:
  """Converts NumPy scalars/arrays (recursively) to JSON-ready values.

  Non-finite floats become None (JSON has no NaN or infinity).
  """
  if isinstance(value, dict):
    return {str(k): to_json_value(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [to_json_value(v) for v in value]
  if isinstance(value, np.ndarray):
    return to_json_value(value.tolist())
  if isinstance(value, np.generic):
    value = value.item()
  if isinstance(value, float) and not math.isfinite(value):
    return None
  return value


def _write_text(path: str, text: str) -> None:
  data = text.encode('utf-8')
  atomic_files.atomic_write(path, lambda f: f.write(data))


@gin.configurable
class Logger(object):
  """Keeps a dict of iteration statistics and writes it as JSON."""

  def __init__(self, logging_dir: str, logs_duration: int = 4):
    """Creates the directory.

    Args:
      logging_dir: str, where log files go; empty disables logging.
      logs_duration: int, log files kept.
    """
    self.data: Dict[str, Any] = {}
    self._logs_duration = logs_duration
    self._logging_enabled = bool(logging_dir)
    self._logging_dir = logging_dir
    if not logging_dir:
      logging.info('Logging directory not specified, will not log.')
      return
    atomic_files.make_directories(logging_dir)

  def __setitem__(self, key: str, value: Any) -> None:
    if self._logging_enabled:
      self.data[key] = value

  def _generate_filename(self, filename_prefix: str,
                         iteration_number: int) -> str:
    return os.path.join(self._logging_dir,
                        '{}_{}'.format(filename_prefix, iteration_number))

  def log_to_file(self, filename_prefix: str, iteration_number: int) -> None:
    """Writes `data` as JSON to ``{prefix}_{iteration_number}``.

    Args:
      filename_prefix: str, the file name's prefix.
      iteration_number: int, its suffix.
    """
    if not self._logging_enabled:
      logging.warning('Logging is disabled.')
      return
    _write_text(self._generate_filename(filename_prefix, iteration_number),
                json.dumps(to_json_value(self.data)))
    stale = iteration_number - self._logs_duration
    if stale >= 0:
      atomic_files.remove_if_exists(
          self._generate_filename(filename_prefix, stale))

  def is_logging_enabled(self) -> bool:
    return self._logging_enabled


class StatisticsLog(object):
  """An append-only JSON-lines file of per-iteration records.

  The file is read with `statistics_file.read_records`: lines that are not
  statistics records are skipped, with one warning, and left out when the
  file is next written.

  Attributes:
    path: str, the file.
    records: list of dict, the records in the file, by increasing
      iteration.
  """

  def __init__(self, path: str):
    """Reads the records already in `path`, if it exists.

    Args:
      path: str, the file (a local path or a tf.io.gfile URL).

    Raises:
      atomic_files.CheckpointError: If the file is not a regular file or
        cannot be read (no line of it can raise).
    """
    self.path = path
    self.records: List[Dict[str, Any]] = []
    try:
      read = statistics_file.read_records(path)
    except FileNotFoundError:
      return
    self.records = read.records
    warning = read.warning()
    if warning:
      logging.warning('%s; they are left out when the file is next '
                      'written.', warning)

  def truncate(self, num_iterations: int) -> None:
    """Drops the records of iterations >= num_iterations (not checkpointed).

    Args:
      num_iterations: int, the first iteration to drop.
    """
    kept = [r for r in self.records if r['iteration'] < num_iterations]
    if len(kept) != len(self.records) or not tf.io.gfile.exists(self.path):
      self.records = kept
      self._rewrite()

  def append(self, record: Dict[str, Any]) -> None:
    """Adds a record and rewrites the file atomically.

    Args:
      record: dict of JSON-ready values (NumPy values are converted),
        with its 'iteration'.
    """
    self.records.append(to_json_value(record))
    self._rewrite()

  def _rewrite(self) -> None:
    _write_text(self.path, ''.join(json.dumps(r, sort_keys=True) + '\n'
                                   for r in self.records))
