"""Smoke tests for benchmarks/jax_benchmark.py (the `jax` section).

The verdicts come from fake measurements whose answers are known; a tiny
run of ours and of Dopamine JAX's memory (capacity 2**12, 300 frames of
Pong) gives every figure the table prints.
"""

import importlib

from absl.testing import absltest

from benchmarks import jax_benchmark as benchmark

benchmarks_main = importlib.import_module('benchmarks.__main__')


def fake(add_us, sample_us, seconds, resident_bytes):
  return {'add_us': add_us, 'add_cpu_us': add_us, 'sample_us': sample_us,
          'update_us': 10.0,
          'save_s': seconds, 'load_s': seconds, 'saved_bytes': 10**6,
          'elements': 2**17, 'resident_bytes': resident_bytes}


class FormatTest(absltest.TestCase):

  def test_verdicts_are_for_the_default_pair(self):
    results = {
        'dopamine-snappy': fake(300.0, 3000.0, 40.0, 2**31),
        'dopamine-raw': fake(300.0, 1000.0, 40.0, 2**33),
        'ours-lz4': fake(30.0, 400.0, 1.0, 2**26),  # 10x, 7.5x, 40x.
        'ours-raw': fake(100.0, 400.0, 8.0, 2**30),  # 3x, 2.5x, 5x.
    }
    text = benchmark.format_section(results, 2**17)
    self.assertIn('| add, `ours-lz4` vs `dopamine-snappy` | 5x | 10.00x (met)',
                  text)
    self.assertIn('| sample(32), `ours-lz4` vs `dopamine-snappy` | 5x | '
                  '7.50x (met)', text)
    # The raw pair is for reference: ratios, no verdict.
    self.assertIn('| sample(32), `ours-raw` vs `dopamine-raw` | (reference) '
                  '| 2.50x |', text)
    self.assertIn('| save, `ours-raw` vs `dopamine-raw` | (reference) | '
                  '5.00x |', text)
    # 64 MiB at 2**17 is 0.5 GiB at 2**20.
    self.assertIn('| RAM at 2**20, `ours-lz4` | ≤ 1.5 GiB | 0.50 GiB (met)',
                  text)

  def test_the_section_is_opt_in(self):
    self.assertIn('jax', benchmarks_main.SECTIONS)
    self.assertNotIn('jax', benchmarks_main.DEFAULT_SECTIONS)


class TinyRunTest(absltest.TestCase):

  def test_every_figure_is_measured(self):
    results = {}
    for name in ('dopamine-snappy', 'ours-lz4'):
      results[name] = benchmark.measure(name, 2**12, 300, 3, 0, None)
      figures = results[name]
      # Filled in bursts of 1,000 steps to at least capacity - 2,000, never
      # to the capacity (Dopamine's fails at its first eviction).
      self.assertBetween(figures['elements'], 2**12 - 2000, 2**12 - 1)
      for key in ('add_us', 'add_cpu_us', 'sample_us', 'update_us', 'save_s',
                  'load_s', 'saved_bytes'):
        self.assertGreater(figures[key], 0, (name, key))
    text = benchmark.format_section(results, 2**12)
    self.assertIn('`ours-lz4`', text)
    self.assertIn('add, `ours-lz4` vs `dopamine-snappy`', text)


if __name__ == '__main__':
  absltest.main()
