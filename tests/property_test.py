"""Property-based (stateful) tests: random valid and invalid operations.

Hypothesis drives the sum tree and both replay memories with sequences of
valid and invalid calls and checks them against simple reference models
after every step; an invalid call must raise and change nothing.

CI runs a modest number of examples. For a long fuzz run:

  DOPAMINE_PER_FUZZ_EXAMPLES=10000 python -m pytest tests/property_test.py
"""

import math
import os

from absl.testing import absltest
import hypothesis
from hypothesis import strategies as st
from hypothesis import stateful
import numpy as np

from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory import sum_tree
from tests import replay_cases

_EXAMPLES = int(os.environ.get('DOPAMINE_PER_FUZZ_EXAMPLES', '40'))
_SETTINGS = hypothesis.settings(
    max_examples=_EXAMPLES, stateful_step_count=40, deadline=None,
    derandomize=_EXAMPLES <= 40,  # CI: the same examples every run.
    suppress_health_check=[hypothesis.HealthCheck.too_slow])

_CAPACITY = 37
_priorities = st.floats(min_value=0.0, max_value=1e6, allow_nan=False,
                        allow_infinity=False)
_bad_priorities = st.sampled_from([-1.0, -1e-300, math.nan, math.inf])
_bad_indices = st.sampled_from([-1, _CAPACITY, 2**40])


class SumTreeMachine(stateful.RuleBasedStateMachine):
  """The sum tree against a list of priorities."""

  def __init__(self):
    super().__init__()
    self.kernels = 'numba'
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

  @stateful.rule(index=st.integers(0, _CAPACITY - 1), bad=_bad_priorities)
  def set_bad_value(self, index, bad):
    with np.testing.assert_raises(ValueError):
      self.tree.set(np.array([index, index]), np.array([1.0, bad]))

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

  def __init__(self):
    super().__init__()
    self.tree = sum_tree.SumTree(_CAPACITY, rng=0, kernels='numpy')


class MemoryMachine(stateful.RuleBasedStateMachine):
  """A replay memory against `replay_cases.ReferenceBuffer`."""

  prioritized = False

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

  @stateful.rule(observation=st.integers(1, 1000), action=st.integers(0, 5),
                 reward=st.integers(-8, 8), terminal=st.booleans(),
                 episode_end=st.booleans(), priority=_priorities)
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

  @stateful.rule(bad=_bad_priorities)
  def add_bad_priority(self, bad):
    if not self.prioritized:
      return
    with np.testing.assert_raises(ValueError):
      self.memory.add(np.int32(1), 0, 0.0, 0, bad)

  @stateful.rule(pairs=st.lists(st.tuples(st.integers(0, _CAPACITY - 1),
                                          _priorities), max_size=10))
  def set_priority(self, pairs):
    if not self.prioritized:
      return
    indices = np.array([i for i, _ in pairs], dtype=np.int32)
    values = np.array([v for _, v in pairs])
    self.memory.set_priority(indices, values)
    for index, value in pairs:
      self.priorities[index] = value

  @stateful.rule(index=st.integers(0, _CAPACITY - 1), bad=_bad_priorities)
  def set_bad_priority(self, index, bad):
    if not self.prioritized:
      return
    with np.testing.assert_raises(ValueError):
      self.memory.set_priority(np.array([index, index]), [1.0, bad])

  @stateful.rule(bad=_bad_indices)
  def sample_bad_index(self, bad):
    with np.testing.assert_raises(ValueError):
      self.memory.sample_transition_batch(indices=[bad])

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
