"""Issue 12, point 1 and caches: values storage cannot hold, bounded caches.

Each test reproduces a case of issue 12 that failed before the fix: `add`
values that the storage dtype would turn into inf or that raised
OverflowError after part of the transition was written, and per-batch-size
caches that grew with every distinct batch size. The priority checks are in
sum_tree_test.py and prioritized_replay_buffer_test.py.
"""

import json
import math
import os
import subprocess
import sys
import textwrap
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import sampling
from tests import replay_cases

ReplayElement = circular_replay_buffer.ReplayElement
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _memory(**kwargs):
  config = dict(observation_shape=(2,), stack_size=4, replay_capacity=32,
                batch_size=4, extra_storage_types=[
                    ReplayElement('half', (2,), np.float16),
                    ReplayElement('wave', (), np.complex64),
                    ReplayElement('exact', (), np.float64)])
  config.update(kwargs)
  return circular_replay_buffer.OutOfGraphReplayBuffer(**config)


# A transition every element of `_memory` holds.
_GOOD = dict(observation=np.ones(2, np.uint8), action=1, reward=0.5,
             terminal=False, half=np.zeros(2, np.float16), wave=0j,
             exact=0.0)
_ORDER = ('observation', 'action', 'reward', 'terminal', 'half', 'wave',
          'exact')


def _args(**changes):
  values = dict(_GOOD, **changes)
  return [values[name] for name in _ORDER]


class AddValuesTest(parameterized.TestCase):
  """Values that would become inf, or raise mid-write, are refused first."""

  def assert_refused(self, memory, regex, **changes):
    before = replay_cases.snapshot(memory)
    with self.assertRaisesRegex(ValueError, regex):
      memory.add(*_args(**changes))
    replay_cases.assert_same_snapshot(self, before,
                                      replay_cases.snapshot(memory))

  @parameterized.named_parameters(
      ('python_float', 1e300), ('negative', -1e300), ('python_int', 2**128),
      ('int_beyond_any_float', 10**400), ('numpy_float64', np.float64(1e39)),
      ('array_0d', np.array(-3.5e38)), ('complex', np.complex128(1e300)))
  def test_reward_overflowing_float32(self, reward):
    # Was stored as inf (10**400: OverflowError after writing the padding).
    memory = _memory()
    self.assert_refused(memory, "argument 'reward' holds .*overflows float32",
                        reward=reward)
    self.assertTrue(memory.is_empty())

  def test_int_beyond_any_float_writes_nothing(self):
    # The case: the three padding transitions were written before
    # the OverflowError.
    memory = _memory()
    self.assert_refused(memory, r"'reward'.*10\*\*400", reward=10**400)
    self.assert_refused(memory, r"'exact'.*10\*\*400.*overflows float64",
                        exact=10**400)
    self.assertTrue(memory._next_experience_is_episode_start)
    memory.add(*_args())
    self.assertEqual(int(memory.add_count), 4)

  @parameterized.named_parameters(
      ('float64_array', 'half', np.array([1.0, 65520.0])),
      ('int32_array', 'half', np.array([70000, 1], np.int32)),
      ('float_into_complex64', 'wave', 1e39),
      ('complex_into_complex64', 'wave', np.complex128(1e300j)),
      ('int_into_complex64', 'wave', 10**39))
  def test_narrower_float_dtypes(self, name, value):
    self.assert_refused(_memory(), "argument '{}' holds .*overflows".format(
        name), **{name: value})

  def test_values_that_round_to_finite_are_stored(self):
    memory = _memory()
    largest = float(np.finfo(np.float32).max)
    below_overflow = np.nextafter(largest + 2.0**103, 0.0)
    with warnings.catch_warnings():
      warnings.simplefilter('error')  # No overflow warning on the write.
      memory.add(*_args(reward=below_overflow, half=np.array([65519.0, -1]),
                        exact=2**1023, wave=np.complex128(3e38 - 2j)))
      memory.add(*_args(reward=math.inf))  # Non-finite: stored as given.
      memory.add(*_args(reward=math.nan))
    rewards = memory._store['reward'][3:6]
    self.assertEqual(rewards[0], np.float32(largest))
    self.assertEqual(rewards[1], np.inf)
    self.assertTrue(np.isnan(rewards[2]))
    np.testing.assert_array_equal(memory._store['half'][3], [65504.0, -1.0])
    self.assertEqual(memory._store['exact'][3], 2.0**1023)


class CacheBoundTest(absltest.TestCase):
  """Per-batch-size caches stay bounded over many distinct batch sizes."""

  def test_batch_layouts(self):
    memory = _memory(extra_storage_types=None)
    for _ in range(12):
      memory.add(*_args()[:4])
    for batch_size in range(1, 60):
      self.assertLen(memory.sample_transition_batch(batch_size)[0],
                     batch_size)
    self.assertLessEqual(len(memory._batch_layouts),
                         sampling._MAX_BATCH_LAYOUTS)

  def test_resident_memory_of_many_large_batch_sizes(self):
    # 24 batch sizes of ~150,000 from a prioritized memory. Before the fix
    # the peak resident memory grew by 59 MB over them (each size's strata
    # cached, 2.4 MB each); now by ~2 MB. Measured in a fresh process with
    # resource.getrusage, after two warm-up samples of the largest size.
    script = textwrap.dedent('''
        import json, resource
        import numpy as np
        from dopamine_per.replay_memory import prioritized_replay_buffer
        capacity, base, sizes = 200000, 150000, 24
        memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
            (), 1, capacity, 32, rng=0)
        memory.add_count = capacity + 5
        memory.set_priority(np.arange(capacity), np.ones(capacity))
        invalid = np.asarray(memory.invalid_range, dtype=np.int64)
        memory.set_priority(invalid, np.zeros(len(invalid)))
        def peak():
          return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        for _ in range(2):
          memory.sample_transition_batch(base + sizes)
        before = peak()
        for size in range(base, base + sizes):
          memory.sample_transition_batch(size)
        print(json.dumps({'growth': peak() - before}))
        ''')
    result = subprocess.run([sys.executable, '-c', script], cwd=_ROOT,
                            env=dict(os.environ, PYTHONPATH=_ROOT),
                            capture_output=True, text=True, timeout=300,
                            check=True)
    growth = json.loads(result.stdout.strip().splitlines()[-1])['growth']
    self.assertLess(growth, 24 << 20)


if __name__ == '__main__':
  absltest.main()
