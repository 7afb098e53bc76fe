"""Smoke tests for benchmarks/native_benchmark.py: its tables and helpers."""

import re
import threading
import unittest

from absl.testing import absltest
import tensorflow as tf

from benchmarks import native_benchmark
from dopamine_per.native import build
from dopamine_per.replay_memory.graph import native_ops

_NUMBER = r'[0-9][0-9,]*(\.[0-9]+)?'
_RATIO = r'[0-9]+\.[0-9]{2}x'


def _row(label, *cells):
  """A regex matching a table row: `label`, then the cells' regexes."""
  return (r'^\| ' + re.escape(label) + ''.join(r' \| ' + c for c in cells) +
          r' \|$')


class NativeBenchmarkTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    try:
      native_ops.load()
    except build.NativeBuildError as e:
      raise unittest.SkipTest(f'the native ops cannot be built: {e}')
    cls.messages = []
    cls.results = native_benchmark.run_benchmark(
        capacity=2**11, transitions=600, rounds=2, steps=2,
        progress=cls.messages.append)
    cls.section = native_benchmark.format_section(cls.results)

  def assertRow(self, label, *cells):  # pylint: disable=invalid-name
    self.assertRegex(self.section, re.compile(_row(label, *cells),
                                              re.MULTILINE))

  def test_every_case_is_timed_for_both_paths(self):
    for run, how in native_benchmark.SAMPLE_ROWS:
      for path in native_benchmark.PATHS:
        self.assertGreater(self.results[(run, how, path)], 0, (run, how))
    for name in native_benchmark.STEP_ROWS:
      for path in native_benchmark.PATHS:
        self.assertGreater(self.results[(name, path)], 0, name)
    self.assertGreater(self.results[(native_benchmark.COPY_FLOOR,)], 0)
    self.assertEqual(self.results['transitions'], 600)
    self.assertIn('round 2/2', self.messages)

  def test_session_runs_table(self):
    self.assertIn('\n## Native ops: graph-mode sampling without Python\n',
                  '\n' + self.section)
    self.assertRow('session run', r'native ops \(µs\)',
                   r'tf\.numpy_function \(µs\)', r'copy floor \(µs\)',
                   'native ops / floor', r'tf\.numpy_function / floor',
                   r'tf\.numpy_function / native ops')
    for run, how in native_benchmark.SAMPLE_ROWS:
      self.assertRow(f'{run}, {how}', _NUMBER, _NUMBER, _NUMBER, _RATIO,
                     _RATIO, _RATIO)
    self.assertIn('SOFTWARE_TRACE step stats', self.section)

  def test_spinning_table(self):
    for title in ('native ops', 'tf.numpy_function'):
      self.assertRow(title, _NUMBER, _NUMBER, _RATIO, _NUMBER, _NUMBER,
                     _RATIO)

  def test_training_step_table(self):
    for name in ('train', 'step, no staging', 'step, staging'):
      self.assertRow(name, _NUMBER, _NUMBER, _RATIO)
    self.assertRegex(self.section, r'- native ops: step with staging / '
                     r'max\(sample, train\) = [0-9.]+; speed-up from staging '
                     r'[0-9.]+x')

  def test_targets_table(self):
    verdict = _RATIO + r' \((met|NOT met)\)'
    self.assertRow('a graph sample within 1.2x the copy floor',
                   re.escape('sample, `make_callable`'), r'1\.2x', verdict,
                   verdict)
    self.assertRow('sample + set_priority within 1.5x the copy floor',
                   re.escape('sample + set_priority, `make_callable`'),
                   r'1\.5x', verdict, verdict)
    self.assertRow('memory ops with Python spinning within 1.2x alone',
                   re.escape('sample + set_priority, memory ops (step '
                             'stats)'), r'1\.2x', verdict, verdict)


class HelpersTest(absltest.TestCase):

  def test_python_spinning_starts_and_stops_its_thread(self):
    def spinners():
      return [t for t in threading.enumerate()
              if t.name == 'python_spinning']

    with native_benchmark.python_spinning():
      self.assertLen(spinners(), 1)
      self.assertTrue(spinners()[0].is_alive())
    self.assertEmpty(spinners())

  def test_memory_ops_micros_sums_the_named_nodes(self):
    metadata = tf.compat.v1.RunMetadata()
    for device in ('/job:localhost/replica:0/task:0/device:CPU:0',
                   '/host:CPU'):
      stats = metadata.step_stats.dev_stats.add(device=device)
      for name, micros in (('sample', 300), ('set', 20), ('other', 1000)):
        stats.node_stats.add(node_name=name, all_end_rel_micros=micros)
    # A node listed under two devices counts once.
    self.assertEqual(
        native_benchmark.memory_ops_micros(metadata, ['sample', 'set']),
        320.0)
    with self.assertRaisesRegex(RuntimeError, 'missing_op'):
      native_benchmark.memory_ops_micros(metadata, ['sample', 'missing_op'])

  def test_unavailable_native_ops_are_reported(self):
    section = native_benchmark.format_section(
        {'unavailable': 'no C++ compiler'})
    self.assertIn('Not run: the native ops cannot be built here: no C++ '
                  'compiler', section)


if __name__ == '__main__':
  absltest.main()
