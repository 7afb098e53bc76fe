"""Issue 12 (add values, per-batch-size caches), issue 22 (add_count, gamma).

Each test reproduces a case that failed before its fix; what each class
guarantees: docs/reliability.md. The priority checks are in sum_tree_test.py
and prioritized_replay_buffer_test.py.
"""

import fractions
import json
import math
import re
import textwrap
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per import errors
from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory.memory import validation
from tests.support import fixtures
from tests.support import replay_cases

ReplayElement = circular_replay_buffer.ReplayElement


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

  @parameterized.parameters(
      # Rewards were stored as inf; 10**400 raised OverflowError after the
      # three padding transitions were written (the snapshot checks them).
      ('reward', 'float32', [1e300, -1e300, 2**128, 10**400,
                             np.float64(1e39), np.array(-3.5e38),
                             np.complex128(1e300)]),
      ('exact', 'float64', [10**400]),
      ('half', 'float16', [np.array([1.0, 65520.0]),
                           np.array([70000, 1], np.int32)]),
      ('wave', 'complex64', [1e39, np.complex128(1e300j), 10**39]))
  def test_values_overflowing_their_dtype(self, name, dtype, values):
    for value in values:
      memory = _memory()
      before = replay_cases.snapshot(memory)  # Empty: no padding written.
      with self.assertRaisesRegex(ValueError, "argument '{}' holds .*"
                                  'overflows {}'.format(name, dtype)):
        memory.add(*_args(**{name: value}))
      replay_cases.assert_same_snapshot(self, before,
                                        replay_cases.snapshot(memory))

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
    self.assertLessEqual(len(memory._batch_plans), 16)  # The 16 newest.

  def test_resident_memory_of_many_large_batch_sizes(self):
    # 24 batch sizes of ~150,000 from a prioritized memory, whose strata
    # (2.4 MB each) were cached per size. Measured in a fresh process, after
    # two warm-up samples of the largest size.
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
    result = fixtures.run_python(['-c', script], 300)
    self.assertEqual(result.returncode, 0, result.stderr)
    growth = json.loads(result.stdout.strip().splitlines()[-1])['growth']
    self.assertLess(growth, 24 << 20)


# Both memories, for tests of what they share.
_MEMORY_CLASSES = (
    ('circular', circular_replay_buffer.OutOfGraphReplayBuffer),
    ('prioritized',
     prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer))
_BOUND = validation.MAX_ADD_COUNT


def _counting_memory(memory_class, room, episode_start=False):
  """A memory of real adds whose add_count then leaves `room` more writes.

  add_count is moved up by a multiple of the capacity, so the cursor and the
  stored transitions stay those of the adds. With `episode_start`, the next
  add starts an episode (writing padding first).
  """
  memory = memory_class(observation_shape=(2,), stack_size=4,
                        replay_capacity=32, batch_size=4, update_horizon=2,
                        rng=0)
  for i in range(40):  # The last add continues an episode.
    _add(memory, i, terminal=i % 13 == 12 and i < 38)
  target = _BOUND - room
  last = 1 if episode_start else 0  # A terminal add still to come.
  while (int(memory.add_count) + last - target) % 32:
    i += 1
    _add(memory, i)
  if episode_start:
    _add(memory, i + 1, terminal=True)
  memory.add_count = target
  return memory


def _add(memory, i, terminal=False):
  args = [np.full(2, i % 250, np.uint8), i % 3, float(i % 5), terminal]
  if isinstance(memory,
                prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer):
    args.append(1.0 + i % 4)
  memory.add(*args)


class AddCountBoundTest(parameterized.TestCase):
  """add_count stays within [0, MAX_ADD_COUNT], and adds stop there."""

  @parameterized.named_parameters(*_MEMORY_CLASSES)
  def test_setter_accepts_the_bound_and_refuses_past_it(self, memory_class):
    # 2**63 - 1 was accepted; the next add then broke add_count, sampling
    # and save with OverflowError.
    memory = _counting_memory(memory_class, room=5)
    for count in (_BOUND + 1, 2**63 - 1, np.int64(2**63 - 1),
                  np.array(_BOUND + 1), 2**64, -1):
      before = replay_cases.snapshot(memory)
      with self.assertRaisesRegex(
          ValueError, r'add_count must be an integer in \[0, 2\*\*53\], got '
          + str(int(count))):
        memory.add_count = count
      replay_cases.assert_same_snapshot(self, before,
                                        replay_cases.snapshot(memory))
    memory.add_count = np.int64(_BOUND)
    self.assertEqual(int(memory.add_count), _BOUND)
    self.assertEqual(memory.add_count.dtype, np.int64)

  @parameterized.named_parameters(*_MEMORY_CLASSES)
  def test_adds_stop_at_the_bound(self, memory_class):
    memory = _counting_memory(memory_class, room=3)
    for i in range(3):
      _add(memory, 100 + i)
    self.assertEqual(int(memory.add_count), _BOUND)
    before = replay_cases.snapshot(memory)
    with self.assertRaisesRegex(
        OverflowError, r'add would write 1 transition\(s\) after add_count '
        r'{}, past its bound of 2\*\*53.*nothing was written'.format(_BOUND)):
      _add(memory, 200)
    replay_cases.assert_same_snapshot(self, before,
                                      replay_cases.snapshot(memory))
    # At the largest count, sampling, saving and loading still work.
    batch = memory.sample_transition_batch()
    self.assertTrue(memory.is_valid_transition(batch[7]).all())
    self.assertLen(memory.invalid_range, 6)
    directory = fixtures.temp_dir(self)
    memory.save(directory, 0)
    restored = _counting_memory(memory_class, room=20)
    restored.load(directory, 0)
    replay_cases.assert_same_snapshot(self, replay_cases.snapshot(memory),
                                      replay_cases.snapshot(restored))
    self.assertEqual(int(restored.add_count), _BOUND)

  @parameterized.named_parameters(*_MEMORY_CLASSES)
  def test_episode_start_needs_room_for_its_padding(self, memory_class):
    # The padding (stack_size - 1 = 3 transitions) and the transition must
    # all fit: with room for 3 the add is refused before the padding.
    memory = _counting_memory(memory_class, room=3, episode_start=True)
    before = replay_cases.snapshot(memory)
    with self.assertRaisesRegex(OverflowError,
                                r'add would write 4 transition\(s\)'):
      _add(memory, 300)
    replay_cases.assert_same_snapshot(self, before,
                                      replay_cases.snapshot(memory))
    memory = _counting_memory(memory_class, room=4, episode_start=True)
    _add(memory, 300)
    self.assertEqual(int(memory.add_count), _BOUND)


class GammaTest(parameterized.TestCase):
  """The discount factor is a real number in [0, 1], else ArgumentError."""

  def make(self, memory_class, gamma):
    return memory_class(observation_shape=(2,), stack_size=1,
                        replay_capacity=16, batch_size=2, update_horizon=3,
                        gamma=gamma)

  @parameterized.product(
      memory=[c for _, c in _MEMORY_CLASSES],
      gamma=[math.nan, math.inf, -math.inf, -1, 2, 1 + 2**-52, -2**-1074,
             '0.9', b'0.9', True, False, np.True_, 0.5 + 0j,
             np.complex128(0.5), None, [0.9], 10**400])
  def test_refused_naming_gamma_and_the_value(self, memory, gamma):
    # NaN, inf, -1 and 2 gave NaN, inf or meaningless n-step returns; '0.9'
    # and True were parsed by float(); None, complex numbers and 10**400
    # raised TypeError or OverflowError.
    with self.assertRaisesRegex(
        errors.ArgumentError,
        r'^gamma must be a real number in \[0, 1\].*, got {}'.format(
            re.escape(errors.describe(gamma)))):
      self.make(memory, gamma)

  @parameterized.named_parameters(*_MEMORY_CLASSES)
  def test_range_is_closed_and_any_real_type_is_accepted(self, memory_class):
    for gamma in (0, 1, 0.0, 1.0, -0.0, np.float32(0.5), np.float16(0.25),
                  np.int64(1), np.uint8(0), fractions.Fraction(1, 2),
                  np.array(0.5)):
      memory = self.make(memory_class, gamma)
      self.assertEqual(memory._gamma, float(gamma))
      self.assertIs(type(memory._gamma), float)
    # Just above the range as a NumPy scalar (1 + 2**-52 above is a float).
    with self.assertRaisesRegex(errors.ArgumentError, 'gamma'):
      self.make(memory_class, np.nextafter(1.0, 2.0))


if __name__ == '__main__':
  absltest.main()
