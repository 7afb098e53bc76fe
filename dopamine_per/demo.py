r"""A short, real demonstration of the prioritized replay memory.

Run it with `bash scripts/demo.sh` (which sets up .venv first) or, in an
environment where dopamine_per is installed:

  python -m dopamine_per.demo --base_dir=runs/demo

It walks through what an agent does with the memory, on CartPole-like data
from a tiny simulator defined here (no gym needed):

1. fills an `OutOfGraphPrioritizedReplayBuffer` past its capacity, giving
   each new transition the largest priority recorded so far (Schaul et al.,
   2015, Algorithm 1, line 6);
2. sets every transition's priority from fake TD errors;
3. runs a few training-like steps: stratified sampling of a batch,
   importance weights from its sampling probabilities, new priorities;
4. draws many stratified batches and prints, per priority bucket, the share
   of the total priority next to the share of the draws, with a chi-square
   test of the two;
5. saves a checkpoint under --base_dir, loads it into a fresh buffer and
   checks that every stored transition and priority came back unchanged.

It exits with a non-zero status if a check fails. It takes a few seconds.
"""

import dataclasses
import math
import os
import random
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np

from dopamine_per.replay_memory import prioritized_replay_buffer

__all__ = ['RandomWalkCartPole', 'chi_square_critical_value', 'define_flags',
           'fake_td_errors', 'fill_memory', 'main', 'priorities_from_td_errors',
           'run_demo', 'sampling_table']


def define_flags():
  """Defines the demo's flags; only when it runs as a program (others, such
  as Dopamine's `train.py`, define --base_dir too)."""
  flags.DEFINE_string(
      'base_dir', 'runs/demo',
      'Directory the checkpoint is written to (a relative path is taken from '
      'the current directory); created if missing.')
  flags.DEFINE_integer(
      'seed', 0,
      'Seed for the simulator, the fake TD errors and the sampling (Python '
      '`random` and NumPy global state, which Dopamine-style buffers use).')
  flags.DEFINE_integer(
      'num_samples', 204_800,
      'Indices drawn (in stratified batches of 256) to compare sampling '
      'frequencies with priorities.')


# The memory: CartPole-like observations, as a DQN-style agent would store.
OBSERVATION_SHAPE = (4,)
STACK_SIZE = 1
REPLAY_CAPACITY = 10_000
NUM_TRANSITIONS = 12_500  # Past capacity, so the circular buffer wraps.
BATCH_SIZE = 32

# Proportional prioritization, Schaul et al. (2015): p = (|delta| + eps)^alpha
# with their alpha = 0.6. eps keeps zero-error transitions sampleable.
PRIORITY_EXPONENT = 0.6
PRIORITY_EPSILON = 1e-3
# Importance-sampling exponent beta for the weights of step 2 (Schaul et al.
# anneal it from 0.4 to 1; the demo shows one step at the initial 0.4).
IMPORTANCE_EXPONENT = 0.4

# Number of buckets in the frequency table (equal counts of transitions,
# ordered by priority) and the false-failure rate of its chi-square test.
NUM_BUCKETS = 5
FALSE_FAILURE_RATE = 1e-6


@dataclasses.dataclass
class RandomWalkCartPole:
  """A tiny deterministic CartPole-like random walk (not real physics).

  The state is (cart position, cart velocity, pole angle, pole angular
  velocity). An episode terminates when the cart leaves [-2.4, 2.4] or the
  pole leans more than 0.21 rad, and is cut off (not terminal) after
  `max_steps` steps. Every step is rewarded 1.

  Attributes:
    seed: int, seed of the simulator's own `numpy.random.Generator`, which
      draws the noise, the start states and the (uniformly random) actions.
    max_steps: int, steps after which an episode is cut off.
  """
  seed: int = 0
  max_steps: int = 50

  def __post_init__(self):
    self._rng = np.random.default_rng(self.seed)
    self._state = None
    self._steps = 0

  def reset(self):
    """Starts an episode; returns the first observation, float32 (4,)."""
    self._state = self._rng.uniform(-0.05, 0.05, size=4)
    self._steps = 0
    return self._state.astype(np.float32)

  def random_action(self):
    """Returns a uniformly random action, 0 or 1."""
    return int(self._rng.integers(2))

  def step(self, action):
    """Applies `action`; returns (observation, reward, terminal, cut_off)."""
    x, x_dot, theta, theta_dot = self._state
    push = 1.0 if action == 1 else -1.0
    x_dot += 0.05 * push + self._rng.normal(0.0, 0.02)
    theta_dot += -0.02 * push + 0.05 * theta + self._rng.normal(0.0, 0.01)
    x += 0.1 * x_dot
    theta += 0.1 * theta_dot
    self._state = np.array([x, x_dot, theta, theta_dot])
    self._steps += 1
    terminal = abs(x) > 2.4 or abs(theta) > 0.21
    cut_off = not terminal and self._steps >= self.max_steps
    return self._state.astype(np.float32), 1.0, terminal, cut_off


def fill_memory(memory, simulator, num_transitions):
  """Adds `num_transitions` simulator transitions to `memory`.

  New transitions get the largest priority recorded so far (Schaul et al.,
  2015); episodes cut off are marked with `episode_end=True`, not terminal.

  Args:
    memory: OutOfGraphPrioritizedReplayBuffer.
    simulator: RandomWalkCartPole.
    num_transitions: int, number of transitions to add.

  Returns:
    dict with the number of 'episodes', 'terminals' and 'cut_offs'.
  """
  counts = {'episodes': 0, 'terminals': 0, 'cut_offs': 0}
  observation = simulator.reset()
  for _ in range(num_transitions):
    action = simulator.random_action()
    next_observation, reward, terminal, cut_off = simulator.step(action)
    priority = memory.sum_tree.max_recorded_priority
    memory.add(observation, action, reward, int(terminal), priority,
               episode_end=cut_off)
    if terminal or cut_off:
      counts['episodes'] += 1
      counts['terminals' if terminal else 'cut_offs'] += 1
      observation = simulator.reset()
    else:
      observation = next_observation
  return counts


def fake_td_errors(next_states, terminals, rng):
  """Made-up TD errors standing in for an agent's: larger where it matters.

  They grow with how far the pole leans, are largest on terminal
  transitions, and carry a little noise, so the priorities are spread out.

  Args:
    next_states: float array (batch, 4, stack), the next states.
    terminals: array (batch,), 1 where the transition was terminal.
    rng: numpy.random.Generator for the noise.

  Returns:
    float64 array (batch,) of TD errors (any sign).
  """
  lean = np.abs(next_states[:, 2, -1]).astype(np.float64)
  noise = rng.normal(0.0, 0.05, size=lean.shape)
  return 10.0 * lean + 2.0 * np.asarray(terminals, np.float64) + noise


def priorities_from_td_errors(td_errors):
  """Proportional priorities (|delta| + eps)^alpha of Schaul et al. (2015)."""
  return (np.abs(td_errors) + PRIORITY_EPSILON) ** PRIORITY_EXPONENT


def _transition_dict(memory, batch):
  names = [element.name for element in memory.get_transition_elements()]
  return dict(zip(names, batch))


def chi_square_critical_value(dof, tail_probability):
  """The x with P(X > x) = tail_probability for X ~ chi-square(dof).

  Uses the closed-form survival function for an even number of degrees of
  freedom, exp(-x/2) * sum_{i < dof/2} (x/2)^i / i!, and bisection.

  Args:
    dof: int, positive and even.
    tail_probability: float in (0, 1).

  Returns:
    float, the critical value.

  Raises:
    ValueError: if dof is not positive and even.
  """
  if dof <= 0 or dof % 2:
    raise ValueError(f'dof must be positive and even, got {dof}')

  def survival(x):
    half = x / 2.0
    return math.exp(-half) * sum(half**i / math.factorial(i)
                                 for i in range(dof // 2))

  low, high = 0.0, 1.0
  while survival(high) > tail_probability:
    high *= 2.0
  for _ in range(100):
    middle = (low + high) / 2.0
    if survival(middle) > tail_probability:
      low = middle
    else:
      high = middle
  return high


def sampling_table(priorities, sampled_indices, num_buckets):
  """Compares sampling frequencies with priority shares, bucket by bucket.

  Args:
    priorities: dict {index: priority} of the sampleable transitions.
    sampled_indices: int array of the indices drawn.
    num_buckets: int, buckets of (nearly) equal counts of transitions,
      ordered by priority.

  Returns:
    (rows, chi_square): rows of (label, count, priority range, priority
    share, empirical share), and Pearson's chi-square statistic of the
    sampled counts against the priority shares.
  """
  indices = np.fromiter(priorities.keys(), dtype=np.int64)
  values = np.fromiter(priorities.values(), dtype=np.float64)
  order = np.argsort(values, kind='stable')
  hits = np.bincount(sampled_indices, minlength=indices.max() + 1)
  total_priority = values.sum()
  num_draws = len(sampled_indices)
  rows = []
  chi_square = 0.0
  for bucket, members in enumerate(np.array_split(order, num_buckets)):
    priority_share = values[members].sum() / total_priority
    drawn = hits[indices[members]].sum()
    expected = priority_share * num_draws
    chi_square += (drawn - expected)**2 / expected
    label = f'{100 * bucket // num_buckets}-{100 * (bucket + 1) // num_buckets}%'
    rows.append((label, len(members),
                 (values[members].min(), values[members].max()),
                 priority_share, drawn / num_draws))
  return rows, chi_square


def _section(title):
  print(f'\n== {title} ==')


def _valid_indices(memory):
  return [i for i in range(REPLAY_CAPACITY) if memory.is_valid_transition(i)]


def _make_memory():
  return prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
      observation_shape=OBSERVATION_SHAPE,
      stack_size=STACK_SIZE,
      replay_capacity=REPLAY_CAPACITY,
      batch_size=BATCH_SIZE,
      update_horizon=1,
      gamma=0.99,
      observation_dtype=np.float32)


def run_demo(base_dir, seed, num_samples):
  """Runs the demonstration; see the module docstring.

  Args:
    base_dir: str, directory for the checkpoint (created if missing).
    seed: int, seed for everything random.
    num_samples: int, indices drawn for the frequency table.

  Returns:
    str, the absolute path of the checkpoint directory.

  Raises:
    AssertionError: if sampling frequencies do not track the priorities, or
      the reloaded memory differs from the saved one.
  """
  start_time = time.time()
  # Dopamine-style buffers draw from Python's `random` and NumPy's global
  # state; seed both so the demo prints the same numbers every run.
  random.seed(seed)
  np.random.seed(seed)
  td_rng = np.random.default_rng(seed + 1)

  _section('1. Fill the prioritized replay memory')
  memory = _make_memory()
  simulator = RandomWalkCartPole(seed=seed)
  counts = fill_memory(memory, simulator, NUM_TRANSITIONS)
  print(f'Added {memory.add_count} transitions to a memory of capacity '
        f'{REPLAY_CAPACITY} (is_full: {memory.is_full()}), from '
        f"{counts['episodes']} episodes: {counts['terminals']} ended in a "
        f"terminal state, {counts['cut_offs']} were cut off at "
        f'{simulator.max_steps} steps.')
  print(f'Every new transition got the largest priority seen so far, '
        f'{memory.sum_tree.max_recorded_priority:.3f}.')

  _section('2. New priorities from fake TD errors')
  valid = np.array(_valid_indices(memory), dtype=np.int32)
  for chunk in np.array_split(valid, math.ceil(len(valid) / 256)):
    batch = _transition_dict(
        memory, memory.sample_transition_batch(len(chunk), indices=chunk))
    td_errors = fake_td_errors(batch['next_state'], batch['terminal'], td_rng)
    memory.set_priority(chunk, priorities_from_td_errors(td_errors))
  print(f'Set the priorities of all {len(valid)} sampleable transitions to '
        f'(|TD error| + {PRIORITY_EPSILON:g})^{PRIORITY_EXPONENT:g}; the '
        f'largest recorded priority is now '
        f'{memory.sum_tree.max_recorded_priority:.3f}.')

  _section('3. Training-like steps: sample, weight, update priorities')
  for step in range(3):
    batch = _transition_dict(memory, memory.sample_transition_batch())
    probabilities = batch['sampling_probabilities']
    # Importance weights (1/p)^beta, normalized by their maximum as in
    # Schaul et al. (2015); the sum tree holds unnormalized priorities,
    # which the normalization makes irrelevant.
    weights = (1.0 / probabilities)**IMPORTANCE_EXPONENT
    weights /= weights.max()
    td_errors = fake_td_errors(batch['next_state'], batch['terminal'], td_rng)
    memory.set_priority(batch['indices'].astype(np.int32),
                        priorities_from_td_errors(td_errors))
    print(f'step {step}: sampled {len(batch["indices"])} transitions (first '
          f'five indices {batch["indices"][:5].tolist()}), importance '
          f'weights in [{weights.min():.3f}, {weights.max():.3f}], mean '
          f'|TD error| {np.abs(td_errors).mean():.3f}')

  _section('4. Sampling frequencies track priorities')
  priorities = dict(zip(valid.tolist(), memory.get_priority(valid).tolist()))
  sample_batch = 256
  draws = [memory.sample_index_batch(sample_batch)
           for _ in range(max(1, num_samples // sample_batch))]
  sampled = np.concatenate([np.asarray(d, dtype=np.int64) for d in draws])
  rows, chi_square = sampling_table(priorities, sampled, NUM_BUCKETS)
  print(f'Drew {len(sampled)} indices in stratified batches of '
        f'{sample_batch} and counted them in {NUM_BUCKETS} buckets of '
        f'transitions ordered by priority.\n')
  print('| transitions by priority | count | priority range | '
        'priority share | sampled share | ratio |')
  print('|---|---:|---|---:|---:|---:|')
  for label, count, (low, high), priority_share, sampled_share in rows:
    print(f'| {label:>7} | {count} | {low:.3f} - {high:.3f} | '
          f'{priority_share:.4f} | {sampled_share:.4f} | '
          f'{sampled_share / priority_share:.3f} |')
  critical = chi_square_critical_value(NUM_BUCKETS - 1, FALSE_FAILURE_RATE)
  print(f'\nChi-square of the sampled counts against the priority shares: '
        f'{chi_square:.2f} with {NUM_BUCKETS - 1} degrees of freedom; it '
        f'would exceed {critical:.1f} with probability {FALSE_FAILURE_RATE:g} '
        f'if sampling were exactly proportional (stratified sampling only '
        f'lowers the spread).')
  assert chi_square < critical, (
      f'sampling frequencies do not track priorities: chi-square '
      f'{chi_square:.2f} >= {critical:.1f}')

  _section('5. Checkpoint: save, reload into a fresh memory, compare')
  checkpoint_dir = os.path.abspath(os.path.join(base_dir, 'checkpoints'))
  os.makedirs(checkpoint_dir, exist_ok=True)
  iteration = 1
  memory.save(checkpoint_dir, iteration)
  restored = _make_memory()
  restored.load(checkpoint_dir, str(iteration))
  assert restored.add_count == memory.add_count, (
      restored.add_count, memory.add_count)
  all_indices = np.arange(REPLAY_CAPACITY, dtype=np.int32)
  np.testing.assert_array_equal(
      restored.get_priority(all_indices), memory.get_priority(all_indices))
  restored_valid = np.array(_valid_indices(restored), dtype=np.int32)
  np.testing.assert_array_equal(restored_valid, valid)
  names = [element.name for element in memory.get_transition_elements()]
  for chunk in np.array_split(valid, math.ceil(len(valid) / 1024)):
    saved_batch = memory.sample_transition_batch(len(chunk), indices=chunk)
    restored_batch = restored.sample_transition_batch(
        len(chunk), indices=chunk)
    for name, saved, loaded in zip(names, saved_batch, restored_batch):
      np.testing.assert_array_equal(loaded, saved, err_msg=name)
  files = sorted(os.listdir(checkpoint_dir))
  size = sum(os.path.getsize(os.path.join(checkpoint_dir, name))
             for name in files)
  print(f'Reloaded memory equals the saved one: add_count {restored.add_count}'
        f', all {REPLAY_CAPACITY} priorities, and all {len(valid)} '
        f'sampleable transitions ({", ".join(names)}).')
  print(f'Checkpoint (iteration {iteration}, {len(files)} files, '
        f'{size / 1024:.0f} KiB) written to:\n  {checkpoint_dir}')
  print(f'\nDemo finished in {time.time() - start_time:.1f} s.')
  return checkpoint_dir


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not flags.FLAGS['verbosity'].present:
    # The buffers log their configuration at INFO; the demo prints its own.
    logging.set_verbosity(logging.WARNING)
  run_demo(flags.FLAGS.base_dir, flags.FLAGS.seed, flags.FLAGS.num_samples)


if __name__ == '__main__':
  define_flags()
  app.run(main)
