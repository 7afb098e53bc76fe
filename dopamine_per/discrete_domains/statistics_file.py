# coding=utf-8
"""Reading ``statistics.jsonl``: the one reader that no line can crash.

The `Runner` writes one JSON object per iteration to
``logs/statistics.jsonl`` (`logger.StatisticsLog`) and reads it back when it
resumes; `dopamine_per.plot` and ``benchmarks/learning.py`` read it to
compare runs. All of them read it with `read_records`, which keeps the
statistics records (`parse_record`) and skips, and counts, every other line,
whatever it holds. Of several records of one iteration the last in the file
is kept (`Records.replaced` counts the others). Nothing here imports
TensorFlow, except `atomic_files` to read a ``gs://``-style path.
"""

import dataclasses
import json
import math
from typing import Any, BinaryIO, Dict, Iterator, List, Optional

from dopamine_per import errors
from dopamine_per.file_io import atomic_files

__all__ = ['MAX_LINE_BYTES', 'MAX_NESTING', 'MAX_ITERATION',
           'NUMERIC_FIELDS', 'Records', 'is_finite_number', 'parse_record',
           'read_records']

# The longest line read, in bytes (a record is about 500 bytes); a longer
# line is skipped without being held in memory.
MAX_LINE_BYTES = 1 << 20
# The deepest nesting of a record (the object itself is level 1). Deeper
# lines are skipped: writing a record back (`json.dumps`, which recurses)
# must not fail where reading it did not.
MAX_NESTING = 32
# Iteration numbers are below this: an int64 (NumPy, TensorBoard) holds them.
MAX_ITERATION = 2**63
# The fields the trainers write as numbers (or null, for a non-finite or
# missing value): `Runner._log_experiment` and the distributed trainer's
# `ApexRunner`. Readers draw and tabulate them.
NUMERIC_FIELDS = (
    'wall_time',
    'iteration_seconds',
    'training_steps',
    'train_episodes',
    'train_average_return',
    'train_average_steps_per_second',
    'eval_episodes',
    'eval_average_return',
    'learner_steps_per_second',
    'learner_steps',
    'actor_steps',
    'actor_restarts',
    'replay_nbytes',
)
# Bytes read per call.
_CHUNK_BYTES = 1 << 16


@dataclasses.dataclass(frozen=True)
class Records:
  """What `read_records` found in a statistics file.

  Attributes:
    path: str, the file.
    records: list of dict, one per iteration, by increasing iteration.
    skipped: int, the lines that are not statistics records (blank lines
      not counted).
    replaced: int, the records dropped for a later one of the same
      iteration.
  """
  path: str
  records: List[Dict[str, Any]]
  skipped: int = 0
  replaced: int = 0

  def warning(self) -> Optional[str]:
    """One line saying what was left out, or None if nothing was.

    Returns:
      str naming the file and the counts, e.g. "logs/statistics.jsonl:
      skipped 2 line(s) that are not statistics records", or None.
    """
    parts = []
    if self.skipped:
      parts.append('skipped {} line(s) that are not statistics records (a '
                   'JSON object with an integer iteration)'.format(
                       self.skipped))
    if self.replaced:
      parts.append('kept the last of several records of an iteration, '
                   'dropping {}'.format(self.replaced))
    return '{}: {}'.format(self.path, '; '.join(parts)) if parts else None


def is_finite_number(value: Any) -> bool:
  """Whether `value` is a finite int or float (not a bool, None or text).

  An int too large for a float (10**400) is not: drawing or averaging it
  would overflow.

  Args:
    value: any value, e.g. a field of a record.

  Returns:
    bool.
  """
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return False
  try:
    return math.isfinite(value)
  except OverflowError:  # An int beyond float's range.
    return False


def _finite_float(text: str) -> float:
  """json's parse_float: refuses what rounds to infinity (1e400)."""
  value = float(text)
  if not math.isfinite(value):
    raise ValueError('a number beyond any float')
  return value


def _refuse_constant(name: str) -> None:
  """json's parse_constant: NaN and Infinity are not JSON (RFC 8259)."""
  raise ValueError('{} is not a JSON value'.format(name))


def _nesting_within(value: Any, limit: int) -> bool:
  """Whether `value`'s lists and dicts nest at most `limit` deep (no recursion).

  A flat dict is 1 deep.
  """
  stack = [(value, 1)]
  while stack:
    item, depth = stack.pop()
    if isinstance(item, dict):
      children = item.values()
    elif isinstance(item, list):
      children = item
    else:
      continue
    if depth > limit:
      return False
    stack.extend((child, depth + 1) for child in children
                 if isinstance(child, (dict, list)))
  return True


def parse_record(line: bytes) -> Optional[Dict[str, Any]]:
  """Parses one line of a statistics file; never raises.

  A statistics record is a line of at most `MAX_LINE_BYTES` of UTF-8 holding
  a JSON object whose ``iteration`` is an integer in [0, MAX_ITERATION)
  (not a bool), whose `NUMERIC_FIELDS` are finite numbers (not bools) or
  null, nested at most `MAX_NESTING` deep, with finite floats only (no
  ``NaN``, ``Infinity`` or 1e400): it can be written back and read again.

  Args:
    line: bytes, the line without its newline.

  Returns:
    dict, the record, if the line is a statistics record; None otherwise
    (blank lines too).
  """
  if len(line) > MAX_LINE_BYTES:
    return None
  try:
    text = line.decode('utf-8')
    record = json.loads(text, parse_float=_finite_float,
                        parse_constant=_refuse_constant)
  except (ValueError, RecursionError, MemoryError):
    # Invalid UTF-8 or JSON (UnicodeDecodeError and JSONDecodeError are
    # ValueErrors; so is an int of more digits than Python converts), NaN,
    # 1e400, or nesting deeper than the interpreter's recursion limit.
    return None
  if not isinstance(record, dict):
    return None
  iteration = record.get('iteration')
  if (isinstance(iteration, bool) or not isinstance(iteration, int) or
      not 0 <= iteration < MAX_ITERATION):
    return None
  for key in NUMERIC_FIELDS:
    value = record.get(key)
    if value is not None and not is_finite_number(value):
      return None
  if not _nesting_within(record, MAX_NESTING):
    return None
  return record


def _lines(file: BinaryIO, limit: int) -> Iterator[Optional[bytes]]:
  """Yields each line of `file` without its newline; None if over `limit`.

  At most `limit` + `_CHUNK_BYTES` bytes of a line are held at once: a
  longer line is skipped up to its newline.
  """
  pending = bytearray()
  too_long = False
  while True:
    chunk = file.read(_CHUNK_BYTES)
    if not chunk:
      break
    start = 0
    while True:
      end = chunk.find(b'\n', start)
      if end < 0:
        if not too_long:
          pending += chunk[start:]
          if len(pending) > limit:
            too_long = True
            pending.clear()
        break
      if not too_long:
        pending += chunk[start:end]
      yield None if too_long or len(pending) > limit else bytes(pending)
      pending.clear()
      too_long = False
      start = end + 1
  if too_long:
    yield None
  elif pending:
    yield bytes(pending)


def read_records(path: str) -> Records:
  """Reads a statistics file, keeping its statistics records only.

  No line can make this raise: a line that is not a statistics record
  (`parse_record`) is skipped and counted, one longer than `MAX_LINE_BYTES`
  without being held in memory. Of the records of one iteration the last is
  kept.

  Args:
    path: str, the file (a local path, or a tf.io.gfile URL).

  Returns:
    Records: the records by increasing iteration, and the counts of what
    was left out (`Records.warning` says it in one line).

  Raises:
    FileNotFoundError: If the file does not exist.
    atomic_files.CheckpointError: If the file is not a regular file or
      cannot be read (the message names it).
  """
  by_iteration: Dict[int, Dict[str, Any]] = {}
  skipped = replaced = 0
  try:
    with atomic_files.open_for_reading(path) as f:
      for line in _lines(f, MAX_LINE_BYTES):
        if line is not None and not line.strip():
          continue
        record = None if line is None else parse_record(line)
        if record is None:
          skipped += 1
          continue
        if record['iteration'] in by_iteration:
          replaced += 1
        by_iteration[record['iteration']] = record
  except (FileNotFoundError, atomic_files.CheckpointError):
    raise
  except Exception as e:  # pylint: disable=broad-except
    # OSError locally; tf.errors.OpError through tf.io.gfile.
    raise atomic_files.CorruptCheckpointError(
        '{}: cannot be read: {}'.format(path, errors.describe(e, 200))) from e
  return Records(path, [by_iteration[i] for i in sorted(by_iteration)],
                 skipped, replaced)
