"""Hand-computed replay trajectories shared by the NumPy and TF buffer tests.

Each case is a buffer configuration, a sequence of `add` calls and, worked
out by hand, the set of valid slots afterwards and the transition sampled at
each of them. Observations are scalar ids (0 is the zero padding), actions are
10 * id, and gamma = 0.5 so every return is exact in float32.

Slot maps in the comments read ``slot: content``; ``p`` is padding, ``T`` a
terminal transition and ``E`` an episode end without a terminal.

Also here: `ReferenceBuffer`, a naive list-based model of the documented
semantics for seeded random-sequence tests, and assertion helpers.
"""

import collections

import numpy as np

from dopamine_per.replay_memory.circular_replay_buffer import ReplayElement

__all__ = ['Step', 'Expected', 'Case', 'CASES', 'make_buffer', 'apply_steps',
           'TRANSITION_FIELDS', 'ReferenceBuffer', 'random_steps', 'snapshot',
           'assert_same_snapshot', 'assert_transition',
           'assert_same_as_dopamine', 'check_against_reference']

Step = collections.namedtuple(
    'Step', ['observation', 'reward', 'terminal', 'episode_end', 'extras'])

# The expected elements of one sampled transition (extras: name -> value).
Expected = collections.namedtuple(
    'Expected', ['state', 'action', 'reward', 'next_state', 'next_action',
                 'next_reward', 'terminal', 'extras'])

TRANSITION_FIELDS = ('state', 'action', 'reward', 'next_state', 'next_action',
                     'next_reward', 'terminal')

Case = collections.namedtuple(
    'Case', [
        'name',
        'config',  # Constructor kwargs besides the common ones below.
        'steps',
        'valid',  # Valid slots afterwards, under dopamine_per's rules.
        # Valid slots under Dopamine 4.1.2's rules; None where Dopamine
        # computes the case wrongly, so it is not compared.
        'dopamine_valid',
        'transitions',  # slot -> Expected.
    ])

COMMON_CONFIG = dict(observation_shape=(), observation_dtype=np.int32,
                     batch_size=4, gamma=0.5)


def _step(observation, reward=None, terminal=False, episode_end=False,
          extras=()):
  return Step(observation, float(observation) if reward is None else reward,
              terminal, episode_end, tuple(extras))


def _x(state, reward, next_state, terminal=0, action=None, next_action=None,
       next_reward=None, extras=None):
  """Builds an Expected; actions and next rewards follow from the ids."""
  return Expected(
      state=state,
      action=10 * state[-1] if action is None else action,
      reward=reward,
      next_state=next_state,
      next_action=10 * next_state[-1] if next_action is None else next_action,
      next_reward=(float(next_state[-1]) if next_reward is None
                   else next_reward),
      terminal=terminal,
      extras=extras or {})


CASES = [
    # 0:1 1:2 2:3 3:4 4:5 5:6, cursor 6. Valid: slot < 6 - 3.
    Case('n_step_no_terminal',
         dict(stack_size=1, update_horizon=3, replay_capacity=10),
         [_step(i) for i in range(1, 7)],
         valid=[0, 1, 2], dopamine_valid=[0, 1, 2],
         transitions={
             0: _x([1], 1 + .5 * 2 + .25 * 3, [4]),
             1: _x([2], 2 + .5 * 3 + .25 * 4, [5]),
             2: _x([3], 3 + .5 * 4 + .25 * 5, [6]),
         }),
    # 0:1 1:2 2:3T 3:4 4:5 5:6 6:7, cursor 7. The return stops after the
    # terminal and next_state is the slot after it.
    Case('terminal_cuts_return',
         dict(stack_size=1, update_horizon=3, replay_capacity=10),
         [_step(1), _step(2), _step(3, terminal=True)] +
         [_step(i) for i in range(4, 8)],
         valid=[0, 1, 2, 3], dopamine_valid=[0, 1, 2, 3],
         transitions={
             0: _x([1], 1 + .5 * 2 + .25 * 3, [4], terminal=1),
             1: _x([2], 2 + .5 * 3, [4], terminal=1),
             2: _x([3], 3.0, [4], terminal=1),
             3: _x([4], 4 + .5 * 5 + .25 * 6, [7]),
         }),
    # 0:p 1:p 2:1 3:2 4:3T 5:p 6:p 7:4 8:5 9:6, cursor 10. Slots 5 and 6 have
    # the terminal slot 4 inside their frame stack.
    Case('frame_stack_zero_padding',
         dict(stack_size=3, update_horizon=1, replay_capacity=12),
         [_step(1), _step(2), _step(3, terminal=True), _step(4), _step(5),
          _step(6)],
         valid=[2, 3, 4, 7, 8], dopamine_valid=[2, 3, 4, 7, 8],
         transitions={
             2: _x([0, 0, 1], 1.0, [0, 1, 2]),
             3: _x([0, 1, 2], 2.0, [1, 2, 3]),
             4: _x([1, 2, 3], 3.0, [2, 3, 0], terminal=1, next_action=0,
                   next_reward=0.0),
             7: _x([0, 0, 4], 4.0, [0, 4, 5]),
             8: _x([0, 4, 5], 5.0, [4, 5, 6]),
         }),
    # 0:p 1:1 2:2 3:3E 4:p 5:4 6:5 7:6 8:7, cursor 9. Slots 2 and 3 would
    # bootstrap across the time-limit end. Slot 4 (padding whose stack holds
    # the previous episode's last frame) is sampled by Dopamine, not by us.
    Case('episode_end_truncation',
         dict(stack_size=2, update_horizon=2, replay_capacity=12),
         [_step(1), _step(2), _step(3, episode_end=True), _step(4), _step(5),
          _step(6), _step(7)],
         valid=[1, 5, 6], dopamine_valid=[1, 4, 5, 6],
         transitions={
             1: _x([0, 1], 1 + .5 * 2, [2, 3]),
             5: _x([0, 4], 4 + .5 * 5, [5, 6]),
             6: _x([4, 5], 5 + .5 * 6, [6, 7]),
         }),
    # 0:1 1:2T 2:3E 3:4 4:5 5:6 6:7, cursor 7. Slots 0 and 1 are cut by the
    # terminal before the time-limit end at slot 2 is reached: valid for us,
    # rejected by Dopamine.
    Case('terminal_before_truncation',
         dict(stack_size=1, update_horizon=3, replay_capacity=10),
         [_step(1), _step(2, terminal=True), _step(3, episode_end=True),
          _step(4), _step(5), _step(6), _step(7)],
         valid=[0, 1, 3], dopamine_valid=[3],
         transitions={
             0: _x([1], 1 + .5 * 2, [3], terminal=1),
             1: _x([2], 2.0, [3], terminal=1),
             3: _x([4], 4 + .5 * 5 + .25 * 6, [7]),
         }),
    # Nine writes into six slots: 0:6 1:7 2:8 3:3 4:4 5:5, cursor 3. Slots
    # 1..4 are the invalid range; 5 and 0 wrap around the end.
    Case('wrap_around',
         dict(stack_size=2, update_horizon=2, replay_capacity=6),
         [_step(i) for i in range(1, 9)],
         valid=[0, 5], dopamine_valid=[0, 5],
         transitions={
             5: _x([4, 5], 5 + .5 * 6, [6, 7]),
             0: _x([5, 6], 6 + .5 * 7, [7, 8]),
         }),
    # Seven writes into five slots: 0:4 1:5 2:2T 3:p 4:3, cursor 2. Slot 4's
    # stack starts with the padding at 3; slot 0's stack wraps to slot 4.
    Case('wrap_around_with_padding',
         dict(stack_size=2, update_horizon=1, replay_capacity=5),
         [_step(1), _step(2, terminal=True), _step(3), _step(4), _step(5)],
         valid=[0, 4], dopamine_valid=[0, 4],
         transitions={
             4: _x([0, 3], 3.0, [3, 4]),
             0: _x([3, 4], 4.0, [4, 5]),
         }),
    # 0:1 1:2 2:3T 3:4 4:5, cursor 5, with an extra element [id, -id].
    Case('extra_storage',
         dict(stack_size=1, update_horizon=2, replay_capacity=8,
              extra_storage_types=[ReplayElement('extra', (2,), np.float32)]),
         [_step(1, extras=([1., -1.],)), _step(2, extras=([2., -2.],)),
          _step(3, terminal=True, extras=([3., -3.],)),
          _step(4, extras=([4., -4.],)), _step(5, extras=([5., -5.],))],
         valid=[0, 1, 2], dopamine_valid=[0, 1, 2],
         transitions={
             0: _x([1], 1 + .5 * 2, [3], extras={'extra': [1., -1.]}),
             1: _x([2], 2 + .5 * 3, [4], terminal=1,
                   extras={'extra': [2., -2.]}),
             2: _x([3], 3.0, [4], terminal=1, extras={'extra': [3., -3.]}),
         }),
    # Rewards [id, 10 id], discounted along time. Dopamine broadcasts its
    # discount vector over the reward's last axis instead (wrong for
    # update_horizon > 1), so it is not compared here.
    Case('vector_reward',
         dict(stack_size=1, update_horizon=2, replay_capacity=8,
              reward_shape=(2,)),
         [_step(i, reward=[float(i), 10. * i]) for i in range(1, 5)],
         valid=[0, 1], dopamine_valid=None,
         transitions={
             0: _x([1], [1 + .5 * 2, 10 + .5 * 20], [3],
                   next_reward=[3., 30.]),
             1: _x([2], [2 + .5 * 3, 20 + .5 * 30], [4],
                   next_reward=[4., 40.]),
         }),
]


def make_buffer(buffer_class, case, **overrides):
  """Builds `buffer_class` for `case` (works for Dopamine's classes too)."""
  config = dict(COMMON_CONFIG)
  config.update(case.config)
  config.update(overrides)
  return buffer_class(**config)


def apply_steps(buffer, steps, priorities=None):
  """Adds `steps` to `buffer` (Dopamine's or ours), actions = 10 * id.

  `priorities`, one per step, are passed as the last positional argument.
  """
  for i, step in enumerate(steps):
    args = list(step.extras)
    if priorities is not None:
      args.append(priorities[i])
    reward = step.reward
    if not np.isscalar(reward):
      reward = np.asarray(reward, dtype=np.float32)
    buffer.add(np.int32(step.observation), 10 * step.observation, reward,
               step.terminal, *args, episode_end=step.episode_end)


# ------------------------------------------------ reference model and helpers


def snapshot(buffer):
  """Everything `load` may change, copied."""
  state = {
      'store': {k: v.copy() for k, v in buffer._store.items()},
      'add_count': int(buffer.add_count),
      'episode_end_indices': set(buffer.episode_end_indices),
      'episode_end': buffer.storage.episode_end.copy(),
      'start': buffer.storage.episode_start,
      'rng': None if buffer._rng is None else buffer._rng.bit_generator.state,
  }
  if hasattr(buffer, 'sum_tree'):
    state['priorities'] = buffer.sum_tree.get(
        np.arange(buffer._replay_capacity)).copy()
    state['max_priority'] = buffer.sum_tree.max_recorded_priority
  return state


def assert_same_snapshot(test_case, a, b):
  test_case.assertEqual(a.keys(), b.keys())
  for key in a:
    if key == 'store':
      test_case.assertEqual(a[key].keys(), b[key].keys())
      for name in a[key]:
        np.testing.assert_array_equal(a[key][name], b[key][name], err_msg=name)
    elif isinstance(a[key], np.ndarray):
      np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    else:
      test_case.assertEqual(a[key], b[key], key)


def assert_transition(test_case, buffer, batch, row, expected):
  """Checks row `row` of a sampled batch against a replay_cases.Expected."""
  names = [e.name for e in buffer.get_transition_elements(len(batch[0]))]
  values = dict(zip(names, batch))
  for field in TRANSITION_FIELDS:
    np.testing.assert_array_equal(
        values[field][row], np.asarray(getattr(expected, field)),
        err_msg='{} of row {}'.format(field, row))
  for name in expected.extras:
    np.testing.assert_array_equal(values[name][row], expected.extras[name])


def assert_same_as_dopamine(test, ours, theirs):
  """Same storage and counters as Dopamine's `theirs`, same batches.

  The batches are those of the transitions valid in both memories, compared
  element by element, dtypes and shapes included.
  """
  for name, array in ours._store.items():
    np.testing.assert_array_equal(array, theirs._store[name], err_msg=name)
  test.assertEqual(int(ours.add_count), int(theirs.add_count))
  np.testing.assert_array_equal(ours.invalid_range, theirs.invalid_range)
  test.assertEqual(ours.episode_end_indices,
                   {int(i) for i in theirs.episode_end_indices})
  common = [i for i in range(ours._replay_capacity)
            if ours.is_valid_transition(i) and theirs.is_valid_transition(i)]
  test.assertNotEmpty(common)
  for element, a, b in zip(
      ours.get_transition_elements(len(common)),
      ours.sample_transition_batch(indices=common),
      theirs.sample_transition_batch(len(common),
                                     indices=np.array(common, np.int32))):
    test.assertEqual((a.dtype, a.shape), (b.dtype, b.shape), element.name)
    np.testing.assert_array_equal(a, b, err_msg=element.name)


class ReferenceBuffer(object):
  """A naive model of the buffer on plain Python lists (for the stress test).

  Implements the documented semantics directly: zero padding at episode
  starts, validity (cursor, frame stacks not crossing an episode end, no
  time-limit end before the return is cut) and n-step returns.
  """

  def __init__(self, stack_size, update_horizon, capacity, gamma):
    self.k, self.n, self.capacity, self.gamma = (stack_size, update_horizon,
                                                 capacity, gamma)
    self.slots = [None] * capacity
    self.count = 0
    self.episode_start = True

  def _write(self, slot):
    self.slots[self.count % self.capacity] = slot
    self.count += 1

  def add(self, observation, action, reward, terminal, episode_end):
    if self.episode_start:
      for _ in range(self.k - 1):
        self._write(dict(obs=0, action=0, reward=0.0, terminal=False,
                         end=False))
    ends = bool(terminal or episode_end)
    self._write(dict(obs=observation, action=action, reward=reward,
                     terminal=bool(terminal), end=ends))
    self.episode_start = ends

  def cursor(self):
    return self.count % self.capacity

  def episode_ends(self):
    written = min(self.count, self.capacity)
    return {i for i in range(written) if self.slots[i]['end']}

  def valid(self, i):
    c = self.cursor()
    if self.count >= self.capacity:
      if (i - (c - self.n)) % self.capacity < self.n + self.k:
        return False
    elif i < self.k - 1 or i >= c - self.n:
      return False
    for j in range(1, self.k):
      if self.slots[(i - j) % self.capacity]['end']:
        return False
    for j in range(self.n):
      slot = self.slots[(i + j) % self.capacity]
      if slot['terminal']:
        break
      if slot['end']:
        return False
    return True

  def transition(self, i):
    ret, length, terminal = 0.0, self.n, False
    for j in range(self.n):
      slot = self.slots[(i + j) % self.capacity]
      ret += self.gamma ** j * slot['reward']
      if slot['terminal']:
        length, terminal = j + 1, True
        break
    nxt = (i + length) % self.capacity
    stack = lambda e: [self.slots[(e - self.k + 1 + j) % self.capacity]['obs']
                       for j in range(self.k)]
    return dict(state=stack(i), action=self.slots[i]['action'], reward=ret,
                next_state=stack(nxt), next_action=self.slots[nxt]['action'],
                next_reward=self.slots[nxt]['reward'], terminal=int(terminal))


def random_steps(rs, count, terminal_rate=0.12, end_rate=0.06):
  steps = []
  for _ in range(count):
    terminal = rs.rand() < terminal_rate
    steps.append(dict(
        observation=int(rs.randint(1, 200)), action=int(rs.randint(0, 6)),
        reward=float(np.float32(rs.randn() * 10)), terminal=terminal,
        episode_end=(not terminal) and rs.rand() < end_rate))
  return steps


def check_against_reference(test_case, buffer, reference):
  capacity = reference.capacity
  test_case.assertEqual(int(buffer.add_count), reference.count)
  test_case.assertEqual(buffer.cursor(), reference.cursor())
  test_case.assertEqual(buffer.is_full(), reference.count >= capacity)
  test_case.assertEqual(buffer.episode_end_indices, reference.episode_ends())
  written = min(reference.count, capacity)
  for name, key in (('observation', 'obs'), ('terminal', 'terminal')):
    np.testing.assert_array_equal(
        buffer._store[name][:written],
        [reference.slots[i][key] for i in range(written)], err_msg=name)
  np.testing.assert_array_equal(np.flatnonzero(buffer.storage.episode_end),
                                sorted(reference.episode_ends()))
  expected_valid = [i for i in range(capacity) if reference.valid(i)]
  np.testing.assert_array_equal(
      np.flatnonzero(buffer.is_valid_transition(np.arange(capacity))),
      expected_valid)
  if not expected_valid:
    return
  batch = buffer.sample_transition_batch(indices=expected_valid)
  names = [e.name for e in buffer.get_transition_elements(len(expected_valid))]
  values = dict(zip(names, batch))
  for row, index in enumerate(expected_valid):
    want = reference.transition(index)
    for field in ('state', 'action', 'next_state', 'next_action', 'terminal'):
      np.testing.assert_array_equal(values[field][row], want[field],
                                    err_msg='{} at {}'.format(field, index))
    np.testing.assert_allclose(values['reward'][row], want['reward'],
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(values['next_reward'][row],
                               want['next_reward'])
  sampled = buffer.sample_index_batch(16)
  test_case.assertTrue(all(reference.valid(int(i)) for i in sampled))
