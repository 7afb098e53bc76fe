"""Smoke tests for benchmarks/scale_benchmark.py (the `scale` section).

The derived figures, the extrapolation to 2**20 and the targets' verdicts
are computed from fake measurements whose answers are known; a tiny run of
every implementation (capacity 2**10, 300 frames of Pong, each memory in
its own process) gives every figure the table prints.
"""

import importlib
import os
import tempfile

from absl.testing import absltest

from benchmarks import scale_benchmark as benchmark

benchmarks_main = importlib.import_module('benchmarks.__main__')

CAPACITY = 2**19


def fake_figures(resident_per=7000, nbytes_per=7100, cycle_us=400.0,
                 floor_us=200.0, stall_s=0.05, save_s=20.0,
                 checkpoint_bytes=170e6, written_bytes=170e6, load_s=4.0,
                 saves=True):
  """Raw figures as `measure_memory` returns them, with chosen medians."""
  figures = {
      'capacity': CAPACITY,
      'baseline_bytes': 10**9,
      'resident_bytes': resident_per * CAPACITY,
      'nbytes': None if nbytes_per is None else nbytes_per * CAPACITY,
      'add_fill_us': [30.0, 10.0, 20.0],
      'add_wrapped_us': [15.0, 25.0, 5.0],
      'cycle_us': [cycle_us, cycle_us * 2, cycle_us / 2],
      'floor_us': [floor_us] * 3,
      'stall_s': None, 'save_s': None, 'checkpoint_bytes': None,
      'written_bytes': None, 'retained_bytes': None, 'load_s': None,
      'load_average': ('1.00', '1.50'), 'seconds': 60.0,
  }
  if saves:
    figures.update(
        stall_s=[stall_s, stall_s / 2, stall_s * 3, stall_s],
        save_s=[save_s, save_s * 2, save_s / 2, save_s],
        checkpoint_bytes=int(checkpoint_bytes),
        # The first save's bytes are the full checkpoint's; the median of
        # the others is the incremental figure.
        written_bytes=[int(checkpoint_bytes)] + [int(written_bytes)] * 3,
        retained_bytes=int(4 * checkpoint_bytes),
        load_s=[load_s, load_s * 3, load_s / 3])
  return figures


def verdicts(rows):
  """{target title: {implementation: met}} of `evaluate_targets` rows."""
  return {title: {name: met for name, (_, met) in by_name.items()}
          for title, by_name in rows}


class DerivedFiguresTest(absltest.TestCase):

  def test_medians_and_extrapolation(self):
    derived = benchmark.derive(fake_figures())
    self.assertEqual(derived['resident_per'], 7000)
    self.assertEqual(derived['add_fill'], 20.0)
    self.assertEqual(derived['add_wrapped'], 15.0)
    self.assertEqual(derived['cycle'], 400.0)
    self.assertEqual(derived['floor_ratio'], 2.0)
    self.assertAlmostEqual(derived['stall'], 50.0)
    self.assertEqual(derived['save'], 20.0)
    self.assertEqual(derived['checkpoint'], 170.0)
    self.assertEqual(derived['incremental_share'], 100.0)
    self.assertEqual(derived['load'], 4.0)
    at_target = benchmark.extrapolate(derived, CAPACITY)
    # Bytes and whole-memory times double from 2**19 to 2**20 ...
    for key in ('resident', 'nbytes', 'stall', 'save', 'checkpoint',
                'retained', 'incremental', 'load'):
      self.assertAlmostEqual(at_target[key], 2 * derived[key], msg=key)
    self.assertAlmostEqual(at_target['resident'], 7000 * 2**20 / 2**20)
    # ... per-operation times and ratios do not.
    for key in ('resident_per', 'add_fill', 'add_wrapped', 'cycle', 'floor',
                'floor_ratio', 'incremental_share'):
      self.assertEqual(at_target[key], derived[key], msg=key)
    self.assertEqual(set(at_target), {key for key, *_ in benchmark.METRICS})

  def test_no_equivalent_is_none(self):
    derived = benchmark.derive(fake_figures(nbytes_per=None, saves=False))
    for key in ('nbytes', 'stall', 'save', 'checkpoint', 'retained',
                'incremental', 'incremental_share', 'load'):
      self.assertIsNone(derived[key], key)
    self.assertIsNone(benchmark.extrapolate(derived, CAPACITY)['save'])

  def test_targets_follow_the_numbers(self):
    def at_target(**changes):
      return benchmark.extrapolate(
          benchmark.derive(fake_figures(**changes)), CAPACITY)

    # Compressed: every target met (at 2**20: 1.4 GiB, 80 ms, 2%, 120 MB,
    # a save faster than ours', 8 s, 4x the floor).
    good = at_target(resident_per=1400, stall_s=0.04, written_bytes=1.2e6,
                     checkpoint_bytes=60e6, save_s=5.0, load_s=4.0,
                     cycle_us=800.0)
    uncompressed = at_target()
    table = verdicts(benchmark.evaluate_targets(
        {'ours_compressed': good, 'ours': uncompressed}))
    self.assertLen(table, 7)
    self.assertTrue(all(v['ours_compressed'] for v in table.values()), table)
    # Ours: 6.7 GiB, 100 ms, 100%, 340 MB, itself the reference, 8 s, 2x.
    self.assertEqual([v['ours'] for v in table.values()],
                     [False, True, False, False, None, True, True])
    # Each figure past its threshold flips its verdict alone.
    for change, title in [
        (dict(resident_per=1600), 'resident ≤ 1.5 GiB'),
        (dict(stall_s=0.06), 'save stall ≤ 100 ms'),
        (dict(written_bytes=4e6),
         'save after new transitions writes ≤ 5% of a full save'),
        (dict(checkpoint_bytes=70e6), 'checkpoint ≤ 138 MB'),
        (dict(save_s=25.0), 'save faster than ours uncompressed'),
        (dict(load_s=6.0), 'load ≤ 10 s'),
        (dict(cycle_us=1100.0), 'sample + set_priority ≤ 5x the copy floor'),
    ]:
      with self.subTest(title=title):
        arguments = dict(resident_per=1400, stall_s=0.04,
                         written_bytes=1.2e6, checkpoint_bytes=60e6,
                         save_s=5.0, load_s=4.0, cycle_us=800.0)
        arguments.update(change)
        table = verdicts(benchmark.evaluate_targets(
            {'ours_compressed': at_target(**arguments),
             'ours': uncompressed}))
        self.assertEqual([t for t, v in table.items()
                          if not v['ours_compressed']], [title])

  def test_least_compressible(self):
    results = {'games': {
        'A': {'ours_compressed': fake_figures(nbytes_per=900)},
        'B': {'ours_compressed': fake_figures(nbytes_per=1500),
              'dopamine': fake_figures(nbytes_per=None)},
        'C': {'ours_compressed': fake_figures(nbytes_per=1200)}}}
    self.assertEqual(benchmark.least_compressible(results), 'B')
    # Without the compressed memory: the largest checkpoint of ours.
    results = {'games': {
        'A': {'ours': fake_figures(checkpoint_bytes=300e6)},
        'B': {'ours': fake_figures(checkpoint_bytes=200e6)}}}
    self.assertEqual(benchmark.least_compressible(results), 'A')

  def test_bytes_written(self):
    with tempfile.TemporaryDirectory() as directory:
      def write(name, size):
        with open(os.path.join(directory, name), 'wb') as out:
          out.write(b'x' * size)
      write('kept', 10)
      write('rewritten', 20)
      before = benchmark._files(directory)  # pylint: disable=protected-access
      write('new', 30)
      os.replace(os.path.join(directory, 'new'),
                 os.path.join(directory, 'rewritten'))
      write('added', 5)
      after = benchmark._files(directory)  # pylint: disable=protected-access
      written = benchmark._bytes_written(before, after)  # pylint: disable=protected-access
      # 'rewritten' (30 bytes now) and 'added' (5); 'kept' is unchanged.
      self.assertEqual(written, 35)


class SectionTest(absltest.TestCase):

  def test_registered_opt_in(self):
    self.assertIn('scale', benchmarks_main.SECTIONS)
    self.assertNotIn('scale', benchmarks_main.DEFAULT_SECTIONS)
    self.assertEqual(benchmarks_main.DEFAULT_SETTINGS.scale_capacity, 2**19)

  def test_tiny_run(self):
    # Every implementation must take part: the peers are test dependencies.
    self.assertEqual(benchmark.available_implementations(),
                     list(benchmark.IMPLEMENTATIONS))
    with tempfile.TemporaryDirectory() as cache_dir:
      results = benchmark.run_benchmark(
          games=('Pong',), peer_games=('Pong',), capacity=2**10,
          frame_count=300, rounds=2, saves=3, adds_between_saves=200,
          load_repeats=2, load_budget_seconds=60.0, cache_dir=cache_dir,
          add_burst=100, burst_seconds=0.005)
    memories = results['games']['Pong']
    self.assertEqual(list(memories), list(benchmark.IMPLEMENTATIONS))
    for name, figures in memories.items():
      with self.subTest(name=name):
        self.assertLen(figures['add_fill_us'], 2**10 // 100 + 1)
        self.assertLen(figures['add_wrapped_us'], 2 * 2)
        self.assertLen(figures['cycle_us'], 2)
        self.assertGreater(min(figures['floor_us']), 0)
        if name == 'cpprb':
          self.assertIsNone(figures['save_s'])
          self.assertIsNone(figures['nbytes'])
          continue
        self.assertLen(figures['save_s'], 3)
        self.assertBetween(len(figures['load_s']), 1, 2)
        self.assertGreater(figures['checkpoint_bytes'], 0)
        self.assertEqual(figures['written_bytes'][0],
                         figures['checkpoint_bytes'])
        # Three checkpoints retained: about three times one.
        self.assertBetween(figures['retained_bytes'],
                           2.5 * figures['checkpoint_bytes'],
                           3.5 * figures['checkpoint_bytes'])
        self.assertLessEqual(max(figures['stall_s']),
                             max(figures['save_s']))
    self.assertLess(memories['ours_compressed']['nbytes'],
                    memories['ours']['nbytes'] / 3)
    report = benchmark.format_section(results)
    self.assertTrue(report.startswith(
        '## Atari at scale: memory, sampling and checkpoints (issue 33)\n'))
    self.assertIn('\n### Pong\n', report)
    self.assertIn('| figure | ours, compressed, 2**10 | ours, 2**10 | '
                  'Dopamine TF, 2**10 | cpprb, 2**10 | ours, compressed, '
                  '2**20 |', report)
    self.assertRegex(report, r'\| load into a fresh memory \(median\) \(s\) '
                     r'\| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| n/a \|')
    self.assertIn("Issue 33's targets at 2**20 (extrapolated) on Pong", report)
    self.assertRegex(report, r'\| resident ≤ 1.5 GiB \| -?[0-9.]+ GiB '
                     r'\((met|NOT met)\) \| [0-9.]+ GiB \(NOT met\) \|')
    self.assertIn('(reference)', report)


if __name__ == '__main__':
  absltest.main()
