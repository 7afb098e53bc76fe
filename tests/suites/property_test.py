"""Property-based (stateful) tests: random valid and invalid operations.

Hypothesis drives the sum tree and both replay memories with valid and
invalid calls (adversarial values, overflowing sums, damaged checkpoints)
and checks them against reference models after every step; an invalid
call must raise and change nothing (docs/reliability.md). For a long run:

  DOPAMINE_PER_FUZZ_EXAMPLES=10000 python -m pytest tests/suites/property_test.py
"""

import contextlib
import gzip
import io
import math
import os
import pickle
import shutil
import tempfile

from absl.testing import absltest
import hypothesis
from hypothesis import strategies as st
from hypothesis import stateful
import numpy as np
import tensorflow as tf

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory import sum_tree
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from tests.support import replay_cases

_EXAMPLES = int(os.environ.get('DOPAMINE_PER_FUZZ_EXAMPLES', '40'))
_SETTINGS = hypothesis.settings(
    max_examples=_EXAMPLES, stateful_step_count=40, deadline=None,
    derandomize=_EXAMPLES <= 40,  # CI: the same examples every run.
    suppress_health_check=[hypothesis.HealthCheck.too_slow])

_CAPACITY = 37
_priorities = st.floats(min_value=0.0, max_value=1e6, allow_nan=False,
                        allow_infinity=False)
# The memory's priorities must read back from float32 as set (nonzero).
_memory_priorities = st.floats(min_value=0.0, max_value=1e6, width=32)
# Never a priority: negative, non-finite, past any float, or not a real
# number (Dopamine would parse the string and the bytes, and keep the
# complex number's real part).
_NOT_PRIORITIES = [-1.0, -1e-300, math.nan, math.inf, -math.inf, 10**400,
                   -10**400, '1e3', b'2', 1 + 0j, np.complex128(2.0), True,
                   np.bool_(False)]
_bad_priorities = st.sampled_from(_NOT_PRIORITIES)
# Also refused by the memory, whose priorities must fit float32: these
# would read back as inf, or as 0.
_bad_memory_priorities = st.sampled_from(
    _NOT_PRIORITIES + [1e308, 3.5e38, 5e-324, 1e-46])
_bad_indices = st.sampled_from([-1, _CAPACITY, 2**40])
# Priorities near float64's limit, each a multiple of 2**1020: the tree's
# total overflows exactly when the multiples among the leaves reach 2**1024
# (the small priorities, below 2**30 in all, cannot tip it).
_HUGE = [2.0**1020, 2.0**1022, 2.0**1023, 1.5 * 2.0**1023]


class _RunsCode(object):
  """Pickles as a call of os.system: loading it must never run it."""

  def __reduce__(self):
    return (os.system, ('exit 1',))


def _npy_header_only(shape):
  """An `.npy` stream declaring `shape` (uint8) with no data after it."""
  stream = io.BytesIO()
  np.lib.format.write_array_header_1_0(
      stream, {'descr': '|u1', 'fortran_order': False, 'shape': shape})
  return np.lib.format.magic(1, 0) + stream.getvalue()


def _crafted(kind, original):
  """Returns the bytes of a damaged checkpoint file (see `_DAMAGES`)."""
  if kind == 'truncate':
    return original[:len(original) // 2]
  if kind == 'flip':  # Past gzip's 10-byte header, which its CRC skips.
    position = 10 + (len(original) - 10) // 2
    return (original[:position] + bytes([original[position] ^ 0xFF]) +
            original[position + 1:])
  if kind == 'bomb':
    return _BOMB
  if kind == 'deep':  # EMPTY_LIST 100,000 times, then APPEND 99,999 times.
    depth = 100000
    return gzip.compress(b'\x80\x02' + b']' * depth + b'a' * (depth - 1) +
                         b'.')
  if kind == 'runs_code':
    return gzip.compress(pickle.dumps(_RunsCode(), protocol=2))
  if kind == 'huge_header':
    return gzip.compress(_npy_header_only((1 << 40,)))
  raise ValueError(kind)


# 64 MiB of zeros, about 64 KiB compressed: past every file's bound here.
_BOMB = gzip.compress(bytes(64 << 20), compresslevel=1)
_DAMAGES = ('truncate', 'flip', 'bomb', 'deep', 'runs_code', 'huge_header',
            'directory', 'remove')


class SumTreeMachine(stateful.RuleBasedStateMachine):
  """The sum tree against a list of priorities."""

  kernels = 'native'  # The default.

  def __init__(self):
    super().__init__()
    self.tree = sum_tree.SumTree(_CAPACITY, rng=0, kernels=self.kernels)
    self.model = [0.0] * _CAPACITY
    self.max_priority = 1.0

  @stateful.rule(index=st.integers(0, _CAPACITY - 1), value=_priorities)
  def set_one(self, index, value):
    self.tree.set(index, value)
    self.model[index] = value
    self.max_priority = max(self.max_priority, value)

  @stateful.rule(pairs=st.lists(st.tuples(st.integers(0, _CAPACITY - 1),
                                          _priorities), max_size=20))
  def set_batch(self, pairs):
    indices = np.array([i for i, _ in pairs], dtype=np.int64)
    values = np.array([v for _, v in pairs], dtype=np.float64)
    self.tree.set(indices, values)
    for index, value in pairs:
      self.model[index] = value
      self.max_priority = max(self.max_priority, value)

  @stateful.rule(index=st.integers(0, _CAPACITY - 1), bad=_bad_priorities,
                 batch=st.booleans())
  def set_bad_value(self, index, bad, batch):
    with np.testing.assert_raises(ValueError):
      if batch:
        self.tree.set(np.array([index]), [bad])
      else:
        self.tree.set(index, bad)

  @stateful.rule(index=st.integers(0, _CAPACITY - 1),
                 value=st.sampled_from(_HUGE), batch=st.booleans())
  def set_huge(self, index, value, batch):
    model = list(self.model)
    model[index] = value
    overflows = sum(int(v) for v in model if v >= _HUGE[0]) >= 2**1024
    indices, values = (np.array([index]), [value]) if batch else (index, value)
    if overflows:
      with np.testing.assert_raises(ValueError):
        self.tree.set(indices, values)
      return
    self.tree.set(indices, values)
    self.model = model
    self.max_priority = max(self.max_priority, value)

  @stateful.rule(bad=_bad_indices)
  def set_bad_index(self, bad):
    with np.testing.assert_raises(ValueError):
      self.tree.set(np.array([0, bad]), np.array([5.0, 5.0]))

  @stateful.rule(batch_size=st.integers(1, 40))
  def sample(self, batch_size):
    if sum(self.model) == 0:
      with np.testing.assert_raises(ValueError):
        self.tree.stratified_sample(batch_size)
      return
    for index in self.tree.stratified_sample(batch_size):
      assert self.model[index] > 0, (index, self.model[index])

  @stateful.invariant()
  def matches_model(self):
    self.tree.check_invariants()
    assert list(self.tree.get(np.arange(_CAPACITY))) == self.model
    exact = math.fsum(self.model)
    assert abs(self.tree.total_priority() - exact) <= 1e-12 * max(exact, 1)
    assert self.tree.max_recorded_priority == self.max_priority


class NumpySumTreeMachine(SumTreeMachine):
  kernels = 'numpy'


class MemoryMachine(stateful.RuleBasedStateMachine):
  """A replay memory against `replay_cases.ReferenceBuffer`."""

  prioritized = False

  # Arguments of `add` that their storage (int32 observations and actions,
  # float32 rewards, uint8 terminals) cannot hold: out of range, inexact,
  # overflowing, beyond any float, or not numbers.
  _BAD_ADD_VALUES = {
      0: [2**31, 1.5, 1e300, math.nan, 10**400, '1', 1 + 1j],
      1: [-2**31 - 1, 0.5, math.inf, 10**400, b'1'],
      2: [1e300, -1e300, 3.5e38, np.float64(1e39), np.array(-1e39),
          10**400, -10**39, np.complex128(1e300), 1 + 1j, '1.0'],
      3: [256, -1, 0.5, math.nan, 10**400, '1'],
  }

  def __init__(self):
    super().__init__()
    cls = (prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer
           if self.prioritized else
           circular_replay_buffer.OutOfGraphReplayBuffer)
    self.memory = cls(observation_shape=(), stack_size=3,
                      replay_capacity=_CAPACITY, batch_size=4,
                      update_horizon=2, gamma=0.5, observation_dtype=np.int32,
                      rng=0, max_sample_attempts=10000)
    self.reference = replay_cases.ReferenceBuffer(3, 2, _CAPACITY, 0.5)
    self.priorities = [0.0] * _CAPACITY

  def _add_args(self, observation, action, reward, terminal, priority):
    args = [np.int32(observation), action, reward, terminal]
    return args + [priority] if self.prioritized else args

  def _assert_refused(self, call, errors=ValueError):
    """`call()` must raise one of `errors` and change nothing."""
    before = replay_cases.snapshot(self.memory)
    with np.testing.assert_raises(errors):
      call()
    replay_cases.assert_same_snapshot(absltest.TestCase(), before,
                                      replay_cases.snapshot(self.memory))

  @stateful.rule(observation=st.integers(1, 1000), action=st.integers(0, 5),
                 reward=st.integers(-8, 8), terminal=st.booleans(),
                 episode_end=st.booleans(), priority=_memory_priorities)
  def add(self, observation, action, reward, terminal, episode_end,
          priority):
    reward = reward / 4.0  # Exact in float32.
    self.memory.add(*self._add_args(observation, action, reward,
                                    int(terminal), priority),
                    episode_end=episode_end)
    if self.prioritized:
      if self.reference.episode_start:
        for _ in range(2):
          self.priorities[self.reference.cursor()] = 0.0
          self.reference._write(dict(obs=0, action=0, reward=0.0,
                                     terminal=False, end=False))
        self.reference.episode_start = False
      self.priorities[self.reference.cursor()] = priority
    self.reference.add(observation, action, reward, terminal, episode_end)

  @stateful.rule(observation=st.integers(1, 1000))
  def add_wrong_shape(self, observation):
    with np.testing.assert_raises(ValueError):
      self.memory.add(*self._add_args([observation, observation], 0, 0.0, 0,
                                      1.0))

  @stateful.rule(position=st.sampled_from(sorted(_BAD_ADD_VALUES)),
                 data=st.data())
  def add_bad_value(self, position, data):
    args = self._add_args(np.int32(1), 0, 0.0, 0, 1.0)
    bad_values = self._BAD_ADD_VALUES[position]
    args[position] = data.draw(st.sampled_from(bad_values))
    self._assert_refused(lambda: self.memory.add(*args))

  @stateful.rule(bad=_bad_memory_priorities)
  def add_bad_priority(self, bad):
    if not self.prioritized:
      return
    self._assert_refused(lambda: self.memory.add(np.int32(1), 0, 0.0, 0, bad))

  @stateful.rule(pairs=st.lists(st.tuples(st.integers(0, _CAPACITY - 1),
                                          _memory_priorities), max_size=10))
  def set_priority(self, pairs):
    if not self.prioritized:
      return
    indices = np.array([i for i, _ in pairs], dtype=np.int32)
    values = np.array([v for _, v in pairs])
    self.memory.set_priority(indices, values)
    for index, value in pairs:
      self.priorities[index] = value

  @stateful.rule(index=st.integers(0, _CAPACITY - 1),
                 bad=_bad_memory_priorities, batch=st.booleans())
  def set_bad_priority(self, index, bad, batch):
    if not self.prioritized:
      return
    self._assert_refused(lambda: self.memory.set_priority(
        np.array([index]), [bad] if batch else bad))

  @stateful.rule(bad=_bad_indices)
  def sample_bad_index(self, bad):
    with np.testing.assert_raises(ValueError):
      self.memory.sample_transition_batch(indices=[bad])

  @contextlib.contextmanager
  def _saved(self):
    """A new directory holding the memory saved as iteration 0."""
    directory = tempfile.mkdtemp()
    try:
      self.memory.save(directory, 0)
      yield directory
    finally:
      shutil.rmtree(directory)

  @stateful.rule()
  def save_and_load(self):
    with self._saved() as directory:
      before = replay_cases.snapshot(self.memory)
      self.memory.load(directory, 0)
      replay_cases.assert_same_snapshot(absltest.TestCase(), before,
                                        replay_cases.snapshot(self.memory))

  @stateful.rule(data=st.data(), damage=st.sampled_from(_DAMAGES),
                 keep_state_file=st.booleans())
  def load_crafted_file(self, data, damage, keep_state_file):
    with self._saved() as directory:
      def path(name):
        return gzip_files.checkpoint_filename(directory, name, 0)
      names = [name for name, _ in
               memory_checkpoint.checkpoint_files(self.memory)]
      if keep_state_file:
        names.append(memory_checkpoint.DOPAMINE_PER_STATE_NAME)
      else:
        os.remove(path(memory_checkpoint.DOPAMINE_PER_STATE_NAME))
      if damage == 'remove':
        # Without these a checkpoint is Dopamine's (the state file) or an
        # old Dopamine's (episode ends taken from the terminal flags): not
        # a damage.
        names = [name for name in names if name not in (
            'episode_end_indices',
            memory_checkpoint.DOPAMINE_PER_STATE_NAME)]
      target = path(data.draw(st.sampled_from(names)))
      if damage == 'remove':
        os.remove(target)
      elif damage == 'directory':
        os.remove(target)
        os.mkdir(target)
      else:
        with open(target, 'rb') as f:
          original = f.read()
        with open(target, 'wb') as f:
          f.write(_crafted(damage, original))
      self._assert_refused(lambda: self.memory.load(directory, 0),
                           (atomic_files.CheckpointError,
                            tf.errors.NotFoundError))

  @stateful.invariant()
  def matches_reference(self):
    test_case = absltest.TestCase()
    if self.prioritized:
      np.testing.assert_array_equal(
          self.memory.get_priority(np.arange(_CAPACITY)),
          np.float32(self.priorities))
      self.memory.sum_tree.check_invariants()
      # Sample only where valid slots hold a fair share of the mass, so that
      # max_sample_attempts is not the limit being tested.
      valid_mass = sum(self.priorities[i] for i in range(_CAPACITY)
                       if self.reference.valid(i))
      if valid_mass <= 0.1 * sum(self.priorities):
        return
    replay_cases.check_against_reference(test_case, self.memory,
                                         self.reference)


class PrioritizedMemoryMachine(MemoryMachine):
  prioritized = True


SumTreeTest = SumTreeMachine.TestCase
SumTreeTest.settings = _SETTINGS
NumpySumTreeTest = NumpySumTreeMachine.TestCase
NumpySumTreeTest.settings = _SETTINGS
MemoryTest = MemoryMachine.TestCase
MemoryTest.settings = _SETTINGS
PrioritizedMemoryTest = PrioritizedMemoryMachine.TestCase
PrioritizedMemoryTest.settings = _SETTINGS


if __name__ == '__main__':
  absltest.main()
