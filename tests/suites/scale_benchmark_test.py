"""Smoke tests for benchmarks/scale_benchmark.py (the `scale` section).

The derived figures (benchmarks/scale_figures.py), the extrapolation to
2**20 and the targets' verdicts are computed from fake measurements whose
answers are known; a tiny run of every implementation (capacity 2**10, 300
frames of Pong, each memory in its own process, then their staged training
steps, training Rainbow's Atari network, in one more) gives every figure the table prints, the headline table
(benchmarks/scale_summary.py), the plot, and RESULTS.md's pointer to it. The calibrated dense chain,
which the step can train instead, is timed alone.
"""

import importlib
import os
import tempfile

from absl.testing import absltest
from matplotlib import image as image_lib
import numpy as np

from benchmarks import scale_benchmark as benchmark
from benchmarks import scale_figures
from benchmarks import scale_step
from benchmarks import scale_summary
from benchmarks import staging_benchmark

benchmarks_main = importlib.import_module('benchmarks.__main__')

CAPACITY = 2**19
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


def fake_steps(ratio=0.9, reference_ms=2.0):
  """`scale_step.measure_steps`' dict: ours compressed `ratio` x ours."""
  return {'capacity': CAPACITY, 'layers': 3,
          'step_ms': {'ours_compressed': [ratio * reference_ms] * 3,
                      'ours': [reference_ms, 3 * reference_ms,
                               reference_ms / 2]},
          'train_ms': [1.0] * 3, 'fill_s': {}, 'load_average': ('1', '1'),
          'seconds': 5.0}


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
    derived = scale_figures.derive(fake_figures(), 'ours_compressed',
                                   fake_steps(ratio=0.75))
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
    # The staged steps: medians, and the ratio of medians to ours'.
    self.assertEqual(derived['step'], 1.5)
    self.assertEqual(derived['step_ratio'], 0.75)
    at_target = scale_figures.extrapolate(derived, CAPACITY)
    # Bytes and whole-memory times double from 2**19 to 2**20 ...
    for key in ('resident', 'nbytes', 'stall', 'save', 'checkpoint',
                'retained', 'incremental', 'load'):
      self.assertAlmostEqual(at_target[key], 2 * derived[key], msg=key)
    self.assertAlmostEqual(at_target['resident'], 7000 * 2**20 / 2**20)
    # ... per-operation times and ratios do not.
    for key in ('resident_per', 'add_fill', 'add_wrapped', 'cycle', 'floor',
                'floor_ratio', 'incremental_share', 'step', 'step_ratio'):
      self.assertEqual(at_target[key], derived[key], msg=key)
    self.assertEqual(set(at_target),
                     {key for key, *_ in scale_figures.METRICS})

  def test_round_by_round(self):
    # Rounds 1.8/2, 1.8/6, 1.8/1: ratios 0.9, 0.3, 1.8; slower in one.
    self.assertEqual(
        scale_step.describe_pairs(fake_steps(ratio=0.9), 'ours_compressed'),
        'ours_compressed / ours round by round: median 0.900x, slower in 1 '
        'of 3 rounds')
    self.assertEqual(scale_step.describe_pairs(fake_steps(), 'dopamine'), '')
    self.assertEqual(scale_step.describe_pairs({}, 'ours_compressed'), '')

  def test_no_equivalent_is_none(self):
    derived = scale_figures.derive(fake_figures(nbytes_per=None, saves=False),
                                   'cpprb', fake_steps())
    for key in ('nbytes', 'stall', 'save', 'checkpoint', 'retained',
                'incremental', 'incremental_share', 'load', 'step',
                'step_ratio'):
      self.assertIsNone(derived[key], key)
    self.assertIsNone(scale_figures.extrapolate(derived, CAPACITY)['save'])
    # Steps not measured at all: None for ours too.
    self.assertIsNone(scale_figures.derive(fake_figures())['step'])

  def test_targets_follow_the_numbers(self):
    def at_target(name='ours_compressed', step_ratio=0.9, **changes):
      return scale_figures.extrapolate(scale_figures.derive(
          fake_figures(**changes), name, fake_steps(step_ratio)), CAPACITY)

    # Compressed: every target met (at 2**20: 1.4 GiB, 80 ms, 2%, 120 MB,
    # a save faster than ours', 8 s, 4x the floor, a staged step 0.9x).
    good = at_target(resident_per=1400, stall_s=0.04, written_bytes=1.2e6,
                     checkpoint_bytes=60e6, save_s=5.0, load_s=4.0,
                     cycle_us=800.0)
    uncompressed = at_target('ours')
    table = verdicts(scale_figures.evaluate_targets(
        {'ours_compressed': good, 'ours': uncompressed}))
    self.assertLen(table, 8)
    self.assertTrue(all(v['ours_compressed'] for v in table.values()), table)
    # Ours: 6.7 GiB, 100 ms, 100%, 340 MB, itself the reference, 8 s, 2x,
    # itself the reference.
    self.assertEqual([v['ours'] for v in table.values()],
                     [False, True, False, False, None, True, True, None])
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
        (dict(step_ratio=1.1),
         'staged graph training step ≤ 1x ours uncompressed'),
    ]:
      with self.subTest(title=title):
        arguments = dict(resident_per=1400, stall_s=0.04,
                         written_bytes=1.2e6, checkpoint_bytes=60e6,
                         save_s=5.0, load_s=4.0, cycle_us=800.0)
        arguments.update(change)
        table = verdicts(scale_figures.evaluate_targets(
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
    self.assertEqual(scale_figures.least_compressible(results), 'B')
    # Without the compressed memory: the largest checkpoint of ours.
    results = {'games': {
        'A': {'ours': fake_figures(checkpoint_bytes=300e6)},
        'B': {'ours': fake_figures(checkpoint_bytes=200e6)}}}
    self.assertEqual(scale_figures.least_compressible(results), 'A')

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
          add_burst=100, burst_seconds=0.005, step_rounds=2, step_steps=3)
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
    # The staged steps: every memory but cpprb's, timed each round.
    steps = results['steps']['Pong']
    self.assertEqual(list(steps['step_ms']), list(scale_step.IMPLEMENTATIONS))
    for name, times in steps['step_ms'].items():
      self.assertLen(times, 2, name)
      self.assertGreater(min(times), 0, name)
    self.assertGreater(min(steps['train_ms']), 0)
    # By default the step trains the Rainbow network, and says so.
    self.assertEqual(steps['network'], 'rainbow')
    self.assertIsNone(steps['layers'])
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
    self.assertIn('the Rainbow network, 2 rounds', report)
    self.assertIn("the Rainbow agent's Atari training", report)
    # The staged step: ms for all but cpprb, the ratio 1 for ours itself.
    self.assertRegex(report, r'\| graph training step, staged \(median\) '
                     r'\(ms\) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| n/a \|')
    self.assertRegex(report, r'\| that / ours uncompressed \(x\) \| '
                     r'[0-9.]+ \| 1.00 \| [0-9.]+ \| n/a \|')
    self.assertRegex(report, r'\| staged graph training step ≤ 1x ours '
                     r'uncompressed \| [0-9.]+x \((met|NOT met)\) \| '
                     r'1.00x \(reference\) \|')
    self.assertIn('| bytes on disk for the 3 retained checkpoints (MB) |',
                  report)
    self._check_headline(report)
    self._check_plot(results)

  def _check_headline(self, report):
    """The headline table, and RESULTS.md's pointer quoting it."""
    headline = scale_summary.extract_headline(report)
    self.assertIsNotNone(headline)
    self.assertTrue(headline.startswith(
        '### Headline at 2**20 (Pong, extrapolated)\n\n| figure (at 2**20) | '
        'ours, compressed | ours | Dopamine TF | cpprb | target |'), headline)
    self.assertLen(headline.splitlines(), 4 + len(scale_summary.FIGURES))
    self.assertRegex(headline, r'\| resident after filling \(GiB\) \| '
                     r'(-?[0-9.]+ \| ){4}≤ 1.5 GiB \|')
    self.assertRegex(headline, r'\| staged step / ours uncompressed \(x\) \| '
                     r'[0-9.]+ \| 1.00 \| [0-9.]+ \| n/a \| ≤ 1x \|')
    with tempfile.TemporaryDirectory() as directory:
      scale_md = os.path.join(directory, 'SCALE.md')
      missing = scale_summary.results_pointer(scale_md)
      self.assertIn('has no headline table yet', missing)
      with open(scale_md, 'w', encoding='utf-8') as f:
        f.write('# Scale\n\n' + report)
      unplotted = scale_summary.results_pointer(scale_md)
      with open(os.path.join(directory, 'scale.png'), 'wb') as f:
        f.write(PNG_SIGNATURE)
      pointer = scale_summary.results_pointer(scale_md)
    self.assertTrue(pointer.startswith(
        '## Atari at scale (opt-in section `scale`, issue 33)\n'))
    self.assertIn('[SCALE.md](SCALE.md)', pointer)
    self.assertIn(headline, pointer)
    # The plot is linked only where it is.
    self.assertIn('[scale.png](scale.png)', pointer)
    self.assertNotIn('scale.png', unplotted)

  def _check_plot(self, results):
    with tempfile.TemporaryDirectory() as directory:
      path = os.path.join(directory, 'scale.png')
      self.assertEqual(benchmark.write_plot(results, path), 'Pong')
      with open(path, 'rb') as f:
        self.assertEqual(f.read(8), PNG_SIGNATURE)
      pixels = image_lib.imread(path)
    self.assertEqual(pixels.shape[:2],
                     (scale_summary.HEIGHT_PX, scale_summary.WIDTH_PX))
    # Not blank: bars, text and target lines in several colours.
    self.assertGreater(len(np.unique(pixels.reshape(-1, pixels.shape[2]),
                                     axis=0)), 10)


class ResultsPointerTest(absltest.TestCase):

  def test_every_run_without_scale_points_to_scale_md(self):
    document = benchmarks_main.run(
        benchmarks_main.DEFAULT_SETTINGS._replace(sections=()))
    self.assertIn('\n## Atari at scale (opt-in section `scale`, issue 33)\n',
                  document)
    self.assertEqual(os.path.basename(benchmarks_main.SCALE_RESULTS),
                     'SCALE.md')

  def test_results_md_points_to_scale_md(self):
    with open(benchmarks_main.DEFAULT_OUTPUT, encoding='utf-8') as f:
      results = f.read()
    self.assertIn('\n## Atari at scale (opt-in section `scale`, issue 33)\n',
                  results)
    self.assertIn('[SCALE.md](SCALE.md)', results)
    # The headline quoted is SCALE.md's, as it is now.
    with open(benchmarks_main.SCALE_RESULTS, encoding='utf-8') as f:
      headline = scale_summary.extract_headline(f.read())
    self.assertIsNotNone(headline)
    self.assertEqual(scale_summary.extract_headline(results), headline)


class StepGraphTest(absltest.TestCase):

  def test_compressed_memory(self):
    """`compress_observations` reaches the memory StepGraph builds."""
    for compress in (False, True):
      graph = staging_benchmark.StepGraph(
          True, 1, 2**10, 100, compress_observations=compress)
      frames = graph.replay.memory._store['observation']  # pylint: disable=protected-access
      self.assertEqual(not isinstance(frames, np.ndarray), compress)
      self.assertGreater(graph.time(graph.step, 3), 0)
      graph.session.close()

  def test_rainbow_training(self):
    """The Rainbow step sets positive priorities that follow the network."""
    graph = staging_benchmark.StepGraph(
        True, None, 2**10, 100, compress_observations=True,
        network='rainbow')
    indices = graph.session.run(graph._fixed['indices'])  # pylint: disable=protected-access
    memory = graph.replay.memory
    np.testing.assert_array_equal(memory.get_priority(indices), 1.0)
    seen = []
    for _ in range(2):
      graph.session.run(graph.train)
      seen.append(memory.get_priority(indices))
      self.assertGreater(min(seen[-1]), 0)
    # Adam changed the weights between the two, so the losses moved.
    self.assertFalse(np.array_equal(seen[0], seen[1]))
    self.assertGreater(graph.time(graph.step, 2), 0)
    graph.session.close()
    with self.assertRaisesRegex(ValueError, 'network must be one of'):
      staging_benchmark.StepGraph(True, 1, 2**10, 100, network='resnet')

  def test_dense_chain_still_measured(self):
    """`network='dense'`: the calibrated chain, its depth reported."""
    frames = np.random.default_rng(0).integers(0, 256, (300, 84, 84),
                                               dtype=np.uint8)
    steps = scale_step.measure_steps('Pong', 2**10, 300, ['ours'], 1, 2, 0,
                                     frames=frames, network='dense')
    self.assertEqual(steps['network'], 'dense')
    self.assertGreaterEqual(steps['layers'], 1)
    self.assertLen(steps['step_ms']['ours'], 1)
    self.assertEqual(scale_step.describe_network(steps),
                     f'{steps["layers"]} dense layers')
    self.assertIn('chain of dense layers', scale_step.describe(1, 2, 'dense'))


if __name__ == '__main__':
  absltest.main()
