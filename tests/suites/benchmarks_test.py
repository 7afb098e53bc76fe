"""Smoke tests for `python -m benchmarks` and its sections, at tiny sizes.

Also checks that the peers store and return the transitions ours does.
"""

import importlib
import os
import time

from absl.testing import absltest
import numpy as np

from benchmarks import common
from benchmarks import distributed_benchmark
from benchmarks import replay_benchmark
from benchmarks import timing
from dopamine_per.replay_memory.kernels import choice

# `python -m benchmarks` runs this module.
benchmarks_main = importlib.import_module('benchmarks.__main__')


class TimingTest(absltest.TestCase):

  def test_slow_cases_stop_after_min_rounds(self):
    calls = {'fast': 0, 'slow': 0}

    def count(name):
      def call():
        calls[name] += 1
      return call

    cases = {'fast': timing.Case(count('fast')),
             'slow': timing.Case(count('slow'), max_seconds=0.0)}
    samples = timing.run_interleaved(cases, rounds=6, burst_seconds=1e-5,
                                     rng=np.random.default_rng(0),
                                     min_rounds=2)
    self.assertLen(samples['fast'], 6)
    self.assertLen(samples['slow'], 2)

  def test_burst_length(self):
    # The first call stands for a compilation: a burst must still hold many
    # calls, else a case would be timed one cold call at a time.
    first = [True]

    def call():
      if first[0]:
        first[0] = False
        time.sleep(0.05)

    calibrate = timing._calibrate  # pylint: disable=protected-access
    self.assertGreater(calibrate(timing.Case(call), 0.01), 100)
    # Slow calls get bursts of one.
    self.assertEqual(calibrate(timing.Case(lambda: time.sleep(0.02)), 0.01), 1)

  def test_environment_is_restored(self):
    name = 'DOPAMINE_PER_BENCHMARKS_TEST_VARIABLE'
    os.environ.pop(name, None)
    with timing.environment({name: 'x'}):
      self.assertEqual(os.environ[name], 'x')
    self.assertNotIn(name, os.environ)

  def test_shuffled_rounds_visit_every_key_once_a_round(self):
    messages = []
    visits = list(timing.shuffled_rounds('abc', 10, np.random.default_rng(0),
                                         progress=messages.append))
    self.assertLen(visits, 30)
    for round_number in range(10):
      self.assertCountEqual(
          [key for number, key in visits if number == round_number], 'abc')
    self.assertNotEqual(len({tuple(key for number, key in visits
                                   if number == round_number)
                             for round_number in range(10)}), 1)
    self.assertEqual(messages, [f'round {n}/10' for n in (2, 4, 6, 8, 10)])

  def test_rotating_takes_the_pool_in_turn(self):
    calls = []
    call = timing.rotating([(1, 'a'), (2, 'b')],
                           lambda *arguments: calls.append(arguments))
    for _ in range(3):
      call()
    self.assertEqual(calls, [(1, 'a'), (2, 'b'), (1, 'a')])

  def test_speedup(self):
    results = {('set', 8, 'peer'): 6.0, ('set', 8, 'ours'): 2.0}
    self.assertEqual(timing.speedup(results, ('set', 8), 'peer', 'ours'), 3.0)
    self.assertIsNone(timing.speedup(results, ('get', 8), 'peer', 'ours'))

  def test_targets_table(self):
    lines = timing.format_targets(
        [('as fast as X', 'set, batch 32', 1.0, {'a': 2.0, 'b': 0.5})],
        ['a', 'b'])
    self.assertEqual(lines[-1], '| as fast as X | set, batch 32 | 1x | '
                     '2.00x (met) | 0.50x (NOT met) |')


class CommonTest(absltest.TestCase):

  def test_kernels_of_our_names(self):
    self.assertEqual([common.kernels_of(n) for n in common.OURS],
                     ['native', 'numpy'])
    self.assertIsNone(common.kernels_of('ours'))
    self.assertIsNone(common.kernels_of('cpprb'))
    self.assertEqual(common.kernels_environ('numpy'),
                     {choice.ENV: 'numpy'})
    self.assertEqual(common.kernels_environ(None), {})
    self.assertIn('ours-numpy', common.available_ours())

  def test_log2_name(self):
    self.assertEqual(common.log2_name(2**17), '2**17')
    self.assertEqual(common.log2_name(600), '600')

  def test_document(self):
    self.assertEqual(common.document('T', {'CPU': 'x'}, '## S\n'),
                     '# T\n\n- CPU: x\n\n## S\n')

  def test_describe_machine(self):
    machine = common.describe_machine()
    for name in ('CPU', 'cores', 'Python', 'NumPy', 'date'):
      self.assertTrue(machine[name], name)


class FramePoolTest(absltest.TestCase):

  def test_stacks_slide(self):
    pool = replay_benchmark.FramePool(8, seed=0)
    for k in range(8):
      for position in range(4):
        np.testing.assert_array_equal(
            pool.stacks[k][..., position], pool.frames[(k - 3 + position) % 8])


class CpprbConfigurationTest(absltest.TestCase):
  """cpprb returns the transitions that ours and Dopamine's return."""

  def test_samples_match_the_stream(self):
    pool = replay_benchmark.FramePool(16, seed=0)
    memory = replay_benchmark.CpprbMemory(64, pool)
    memory.add_transitions(40)
    batch = memory.memory.sample(16)
    gamma = replay_benchmark.GAMMA
    for k, t in enumerate(batch['indexes'].astype(int)):
      self.assertLess(t, 40 - replay_benchmark.UPDATE_HORIZON + 1)
      np.testing.assert_array_equal(batch['obs'][k], pool.stacks[t % 16])
      np.testing.assert_array_equal(batch['next_obs'][k],
                                    pool.stacks[(t + 3) % 16])
      rewards = [replay_benchmark._transition(t + i)[1] for i in range(3)]  # pylint: disable=protected-access
      self.assertAlmostEqual(
          float(batch['rew'][k][0]),
          sum(gamma**i * r for i, r in enumerate(rewards)), places=5)


class DistributedProjectionTest(absltest.TestCase):
  """The arithmetic behind the projection to a cluster."""

  def _results(self):
    one = distributed_benchmark.shards_name(1)
    return {
        'batch_sizes': (32, 256),
        # Microseconds per call: 10k adds/s; batches cost 1 ms + 10 us per
        # transition, so 6.12 ms at B=512.
        'cycle': {('add', 'Atari', 1, one): 100.0,
                  ('cycle', 'Atari', 32, one): 1320.0,
                  ('cycle', 'Atari', 512, one): 6120.0,
                  distributed_benchmark.ROUND_TRIP: 500.0},
        'bytes': {'add call': 64000, 'draw request': 100,
                  'draw answer': 1000, 'set_priority request': 100,
                  'mass call': 20},
    }

  def test_shards_needed(self):
    rates = distributed_benchmark.ApexRates(
        frames_per_second=80000.0, frame_skip=4, actors=400,
        batches_per_second=50.0, batch_size=512,
        network_bytes_per_second=1e6)
    numbers = distributed_benchmark.project(self._results(), rates)
    # 20k transitions/s at 10k per shard; a batch costs a shard
    # 1 ms + 5.12 ms / k, 50 a second: busy(k) = 2 / k + 0.05 + 0.256 / k.
    self.assertEqual(numbers['shards needed'], 3)
    self.assertAlmostEqual(numbers['shard busy fraction'],
                           2.256 / 3 + 0.05)
    self.assertAlmostEqual(numbers['actors per shard, adding only'], 200.0)
    self.assertAlmostEqual(numbers['bytes per transition added'], 1000.0)
    self.assertAlmostEqual(numbers['bytes per batch'], 1220.0)
    self.assertAlmostEqual(numbers['learner network share'], 0.061)

  def test_missing_rates_give_no_projection(self):
    results = self._results()
    results['bytes'] = {}
    self.assertIsNone(distributed_benchmark.project(results))

  def test_call_bytes_counts_arrays_out_of_band(self):
    array = np.zeros(1000, np.float64)
    self.assertBetween(distributed_benchmark.call_bytes(array, True),
                       8000, 8200)
    self.assertLess(distributed_benchmark.call_bytes(), 50)


class CommandTest(absltest.TestCase):
  """Every section of `python -m benchmarks`, at tiny sizes."""

  def test_run_every_section(self):
    settings = benchmarks_main.DEFAULT_SETTINGS._replace(
        sum_tree_capacities=(2**8,),
        batch_sizes=(32, 256),
        sum_tree_rounds=2,
        sum_tree_burst_seconds=1e-4,
        replay_capacity=2**11,
        replay_fill=600,
        replay_steady_adds=200,
        replay_rounds=2,
        cpprb_rss_transitions=300,
        tf_transitions=600,
        tf_rounds=2,
        tf_steps=2,
        distributed_capacity=2**11,
        distributed_rounds=2,
        distributed_burst_seconds=0.02,
        distributed_step_rounds=2,
        distributed_steps=2,
        actor_steps=100,
        actor_rounds=1,
        native_transitions=600,
        native_rounds=2,
        native_steps=2)
    messages = []
    document = benchmarks_main.run(settings, progress=messages.append)
    self.assertTrue(document.startswith('# Benchmark results\n'))
    self.assertIn('- packages: tensorflow ', document)
    for heading in ('## Sum tree', '## Atari-shaped prioritized replay memory',
                    '## TF wrapper: sampling and staging',
                    '## Distributed: sharded memory and actors on a local Ray',
                    '## Native ops: graph-mode sampling without Python'):
      self.assertIn('\n' + heading + '\n', document)
    self.assertIn('| add, fresh pages, per transition |', document)
    self.assertIn('| add, pages touched, per transition |', document)
    self.assertIn('| sample(256) + set_priority(256) |', document)
    self.assertIn('| ours | ', document)  # The resident memory table.
    self.assertIn('Target (issue 3): with staging, a step takes', document)
    self.assertRegex(document, r'\| sample, staging \| [0-9.]+ \|')
    if common.dopamine_available():
      self.assertIn('| 25x Dopamine TF | sample(32) + set_priority(32) |',
                    document)
      self.assertIn("| memory at most Dopamine TF's |", document)
      self.assertRegex(document, r'\| sample, Dopamine TF \| [0-9.]+ \|')
    if common.cpprb_available():
      self.assertIn('| as fast as cpprb | sample(32) + set_priority(32) |',
                    document)
      self.assertIn('| cpprb | ', document)
      self.assertIn('cpprb, contiguous states / ours-numpy', document)
    self.assertTrue(any('peak RSS' in m for m in messages))
    # The distributed section: every shape, batch size and shard count.
    self.assertIn('| batches/s (x single) | single | 1 shard | 2 shards | '
                  '4 shards |', document)
    for shape in ('CartPole', 'Atari'):
      for batch_size in (32, 256):
        self.assertRegex(document, r'\| {}, B={} \| [0-9,]+ \(1.00x\)( \| '
                         r'[0-9,]+ \([0-9.]+x\)){{3}} \|'.format(
                             shape, batch_size))
    self.assertRegex(document, r'\| Rainbow, apex_cartpole.gin( \| [0-9.]+ '
                     r'\([0-9.]+x\)){4} \|')
    self.assertRegex(document, r'a learner step on the sharded memory takes '
                     r'at most 1.2x .*: [0-9.]+x \((met|NOT met)\)')
    self.assertRegex(document, r'\| 2 actors \| [0-9,]+ \| [0-9,]+ \| '
                     r'[0-9.]+x \|')
    self.assertRegex(document, r'2 actors step at least 1.5x .*: [0-9.]+x '
                     r'\((met|NOT met)\)')
    self.assertRegex(document, r'\| add call \(64 Atari transitions\) \| '
                     r'4[0-9]{2},[0-9]{3} B \|')  # 64 frames of 7,056 B.
    self.assertRegex(document, r'- shards needed, adding and sampling: '
                     r'[0-9]+ ')


if __name__ == '__main__':
  absltest.main()
