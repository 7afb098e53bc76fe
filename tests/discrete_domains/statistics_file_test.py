"""statistics.jsonl readers never crash on a log line (issue 22, point 4)."""

import json
import os
import tracemalloc

from absl.testing import absltest

from dopamine_per.discrete_domains import statistics_file
from dopamine_per.file_io import atomic_files
from tests.support import fixtures
from tests.support import gin_util
from tests.support import statistics_lines
from tests.support import tiny_cartpole


def _record(iteration, **fields):
  return dict(iteration=iteration, eval_average_return=10.0 * iteration,
              **fields)


class ParseRecordTest(absltest.TestCase):

  def test_odd_lines_are_not_records(self):
    for name, line in statistics_lines.ODD_LINES:
      with self.subTest(name=name):
        self.assertIsNone(statistics_file.parse_record(line))
    for line in statistics_lines.BLANK_LINES:
      self.assertIsNone(statistics_file.parse_record(line))

  def test_records(self):
    for text, expected in (
        ('{"iteration": 0}', {'iteration': 0}),
        (' {"iteration": 3, "eval_average_return": null}\r',
         {'iteration': 3, 'eval_average_return': None}),
        ('{"iteration": 9223372036854775807, "wall_time": 1.5e9}',
         {'iteration': 2**63 - 1, 'wall_time': 1.5e9}),
        # Unknown keys hold any JSON value nested up to the bound.
        ('{"iteration": 1, "note": "x", "more": {"a": [1, {"b": null}]}}',
         {'iteration': 1, 'note': 'x', 'more': {'a': [1, {'b': None}]}}),
    ):
      with self.subTest(text=text):
        self.assertEqual(statistics_file.parse_record(text.encode('utf-8')),
                         expected)

  def test_nesting_bound(self):
    within = '{"iteration": 2, "x": ' + '[' * 31 + ']' * 31 + '}'
    beyond = '{"iteration": 2, "x": ' + '[' * 32 + ']' * 32 + '}'
    self.assertIsNotNone(statistics_file.parse_record(within.encode()))
    self.assertIsNone(statistics_file.parse_record(beyond.encode()))
    # What is kept can be written back and read again unchanged.
    record = statistics_file.parse_record(within.encode())
    self.assertEqual(statistics_file.parse_record(
        json.dumps(record).encode()), record)

  def test_is_finite_number(self):
    for value in (0, -3, 1.5, 2**1000, 1e308):
      self.assertTrue(statistics_file.is_finite_number(value), value)
    for value in (True, None, '1', float('nan'), float('inf'), 10**400,
                  [1], {}):
      self.assertFalse(statistics_file.is_finite_number(value), value)


class ReadRecordsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = fixtures.temp_dir(self)
    self.path = os.path.join(self.dir, 'statistics.jsonl')

  def _write(self, records):
    with open(self.path, 'w') as f:
      for record in records:
        f.write(json.dumps(record) + '\n')

  def test_odd_lines_are_skipped_and_counted(self):
    records = [_record(i) for i in range(3)]
    self._write(records)
    skipped = statistics_lines.append_odd_lines(self.path)
    read = statistics_file.read_records(self.path)
    self.assertEqual(read.records, records)
    self.assertEqual((read.skipped, read.replaced), (skipped, 0))
    self.assertEqual(read.warning(), '{}: skipped {} line(s) that are not '
                     'statistics records (a JSON object with an integer '
                     'iteration)'.format(self.path, skipped))

  def test_the_last_record_of_an_iteration_is_kept(self):
    self._write([_record(0), _record(2), _record(1), _record(2, x=1),
                 _record(0, x=2)])
    read = statistics_file.read_records(self.path)
    self.assertEqual(read.records, [_record(0, x=2), _record(1),
                                    _record(2, x=1)])
    self.assertEqual((read.skipped, read.replaced), (0, 2))
    self.assertIn('dropping 2', read.warning())
    self._write([_record(0)])
    self.assertIsNone(statistics_file.read_records(self.path).warning())

  def test_long_lines_are_skipped_without_being_held(self):
    with open(self.path, 'wb') as f:
      f.write(b'{"iteration": 0}\n')
      # Eight times the cap: holding it would take twice the bound below.
      f.write(b'{"iteration": 1, "pad": "' +
              b'a' * (8 * statistics_file.MAX_LINE_BYTES) + b'"}\n')
      f.write(b'{"iteration": 2}\n')
      f.write(b'x' * (statistics_file.MAX_LINE_BYTES + 1))
    tracemalloc.start()
    try:
      read = statistics_file.read_records(self.path)
      _, peak = tracemalloc.get_traced_memory()
    finally:
      tracemalloc.stop()
    self.assertEqual([r['iteration'] for r in read.records], [0, 2])
    self.assertEqual(read.skipped, 2)
    # The cap plus a chunk or two, not the long line.
    self.assertLess(peak, 4 * statistics_file.MAX_LINE_BYTES)

  def test_a_line_at_the_cap_is_read(self):
    line = b'{"iteration": 0, "pad": "'
    line += b'a' * (statistics_file.MAX_LINE_BYTES - len(line) - 2) + b'"}'
    self.assertLen(line, statistics_file.MAX_LINE_BYTES)
    with open(self.path, 'wb') as f:
      f.write(line + b'\n' + line[:-2] + b'aa"}')
    read = statistics_file.read_records(self.path)
    self.assertEqual([r['iteration'] for r in read.records], [0])
    self.assertEqual(read.skipped, 1)

  def test_file_errors(self):
    with self.assertRaises(FileNotFoundError):
      statistics_file.read_records(self.path)
    os.mkfifo(self.path)  # Refused without blocking on the open.
    with self.assertRaisesRegex(atomic_files.CheckpointError, 'a FIFO'):
      statistics_file.read_records(self.path)


class ResumeWithOddLinesTest(absltest.TestCase):
  """A real run's file with every odd line: the Runner resumes past them."""

  def test_resume_keeps_the_records_and_counts_the_lines(self):
    gin_util.hide_dopamine_configurables(self)
    base_dir = fixtures.temp_dir(self)
    runner = tiny_cartpole.runner(base_dir, 2)
    runner.run_experiment()
    path = runner.statistics_path
    del runner
    with open(path) as f:
      written = [json.loads(line) for line in f]
    self.assertEqual([r['iteration'] for r in written], [0, 1])
    skipped = statistics_lines.append_odd_lines(path)

    with self.assertLogs('absl', 'WARNING') as logs:
      runner = tiny_cartpole.runner(base_dir, 4)
    warnings = [r.getMessage() for r in logs.records
                if 'statistics records' in r.getMessage()]
    self.assertEqual(warnings, [
        '{}: skipped {} line(s) that are not statistics records (a JSON '
        'object with an integer iteration); they are left out when the '
        'file is next written.'.format(path, skipped)])
    runner.run_experiment()
    with open(path) as f:
      resumed = [json.loads(line) for line in f]
    # Every iteration once, the first two as they were written.
    self.assertEqual([r['iteration'] for r in resumed], [0, 1, 2, 3])
    self.assertEqual(resumed[:2], written)


if __name__ == '__main__':
  absltest.main()
