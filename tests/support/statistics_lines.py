"""Test helper: lines that no reader of ``statistics.jsonl`` may crash on.

Issue 22, point 4: one odd but valid JSON line (`[1, 2]`, 100,000 `[`)
stopped the trainer from resuming and crashed `dopamine_per.plot`. The
resume, plot and benchmark tests append `ODD_LINES` to a real run's file.
"""

from typing import List, Tuple

from dopamine_per.discrete_domains import statistics_file

__all__ = ['ODD_LINES', 'BLANK_LINES', 'append_odd_lines']

_DEEP = 100000
_PAD = b'{"iteration": 1, "pad": "'
# A record, but a line of statistics_file.MAX_LINE_BYTES + 1 bytes.
_OVER_THE_CAP = _PAD + b'a' * (
    statistics_file.MAX_LINE_BYTES + 1 - len(_PAD) - 2) + b'"}'
# (name, the line's bytes without its newline): none is a statistics record.
ODD_LINES: List[Tuple[str, bytes]] = [
    ('list', b'[1, 2]'),
    ('iteration text', b'{"iteration": "x"}'),
    ('nested lists', b'[' * _DEEP),
    ('closed nested lists', b'[' * _DEEP + b']' * _DEEP),
    ('number', b'7'),
    ('string', b'"statistics"'),
    ('null', b'null'),
    ('iteration bool', b'{"iteration": true}'),
    ('iteration negative', b'{"iteration": -1}'),
    ('iteration fraction', b'{"iteration": 1.5}'),
    ('iteration beyond int64', b'{"iteration": 9223372036854775808}'),
    ('iteration of 5000 digits', b'{"iteration": ' + b'9' * 5000 + b'}'),
    ('no iteration', b'{"eval_average_return": 1.0}'),
    ('nested field', b'{"iteration": 1, "x": ' + b'[' * _DEEP + b']' * _DEEP +
     b'}'),
    ('line 1 byte over the cap', _OVER_THE_CAP),
    ('invalid UTF-8', b'{"iteration": 1, "x": "\xff\xfe"}'),
    ('NaN iteration', b'{"iteration": NaN}'),
    ('NaN return', b'{"iteration": 1, "eval_average_return": NaN}'),
    ('Infinity return', b'{"iteration": 1, "eval_average_return": Infinity}'),
    ('1e400 return', b'{"iteration": 1, "eval_average_return": 1e400}'),
    ('int beyond float', b'{"iteration": 1, "eval_average_return": 1' +
     b'0' * 400 + b'}'),
    ('text return', b'{"iteration": 1, "eval_average_return": "500"}'),
    ('bool steps/s', b'{"iteration": 1, "train_average_steps_per_second": '
     b'true}'),
    ('list wall_time', b'{"iteration": 1, "wall_time": [1]}'),
    ('truncated', b'{"iteration": 1, "eval_average_ret'),
    ('not JSON', b'iteration 1'),
]
# Lines that are neither records nor counted as skipped.
BLANK_LINES: List[bytes] = [b'', b'   \t']


def append_odd_lines(path: str) -> int:
  """Appends every odd and blank line to the statistics file at `path`.

  The odd lines are interleaved with the blank ones, the last without a
  newline. Returns the number of odd lines (what a reader should skip).
  """
  lines = []
  for number, (_, line) in enumerate(ODD_LINES):
    lines.append(line)
    if number < len(BLANK_LINES):
      lines.append(BLANK_LINES[number])
  with open(path, 'ab') as f:
    f.write(b'\n'.join(lines))
  return len(ODD_LINES)
