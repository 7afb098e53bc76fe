r"""Benchmarks Atari-shaped prioritized replay memories, side by side.

Part of `python -m benchmarks` (see benchmarks/__main__.py), which writes
benchmarks/RESULTS.md. This section alone, printed and not written:

  python -m benchmarks.replay_benchmark
  python -m benchmarks.replay_benchmark --capacity_log2=18 --fill=20000

Every memory holds 84x84 uint8 frames, stacks of 4, 3-step returns with
gamma 0.99, at capacity 2**20:

* `ours-native` (the default) and `ours-numpy`: dopamine_per's
  OutOfGraphPrioritizedReplayBuffer, with each of its kernel sets (chosen
  by the environment variable the library reads, set around its
  construction and each of its bursts: `common.kernels_environ`);
* `dopamine`: Dopamine 4.1.2's TF OutOfGraphPrioritizedReplayBuffer;
* `cpprb`: cpprb's PrioritizedReplayBuffer, configured as close as it
  allows: `obs` and `next_obs` of shape (84, 84, 4) with `stack_compress`
  (one new frame stored per slot), `Nstep` of size 3 and gamma 0.99 on the
  reward with `next_obs` moved, alpha = 1. cpprb stores `next_obs` as a
  second compressed array (its `next_of` option, which would share the
  frames, drops `next_obs` from the samples once `Nstep` is on), so it holds
  every frame twice.

In one process, interleaved in shuffled rounds (`timing`), it times:

1. `add`, fresh pages: the adds that fill each memory to `--fill`
   transitions, in bursts, starting right after construction, so that ours
   and Dopamine's write pages never touched before (cpprb's constructor
   touches all of its storage, so for cpprb this is the steady state);
2. `add`, pages touched: further adds, after the storage of the slots they
   write was touched (written with zeros through each memory's `_store`
   arrays), as after a wrap-around;
3. the training cycle: `sample_transition_batch(B)` then `set_priority` of
   the sampled indices (cpprb: `sample(B)`, which also computes importance
   weights, then `update_priorities`), priorities uniform in (0, 1], at
   B = 32 and 256. cpprb returns its stacked states as transposed views
   and so skips interleaving the frames; `cpprb-contiguous` times its
   cycle again with the `np.ascontiguousarray` that a TF tensor of those
   states costs (TF's conversion of such a view takes as long).

Then, one implementation at a time, each in its own subprocess (three full
memories would not fit in 24 GiB together), it fills a memory of capacity
2**20 and reports the peak resident set (VmHWM). Ours and Dopamine's are
filled through `add`; cpprb's constructor already makes all of its storage
resident, and filling it through `add` takes about 5 minutes, so it gets a
part only (through its batch `add`).
"""

import gc
import json
import math
import os
import subprocess
import sys
import time

from absl import app
from absl import flags
import numpy as np

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import timing  # pylint: disable=g-import-not-at-top

__all__ = [
    'CpprbMemory',
    'DopamineMemory',
    'FramePool',
    'IMPLEMENTATIONS',
    'OursMemory',
    'default_implementations',
    'format_results',
    'format_section',
    'make_memory',
    'measure_rss',
    'peak_kib',
    'rss_child',
    'run_benchmark',
    'status_kib',
]

FRAME_SHAPE = (84, 84)
STACK_SIZE = 4
UPDATE_HORIZON = 3
GAMMA = 0.99
EPISODE_LENGTH = 1000  # Transitions per episode in the added stream.
IMPLEMENTATIONS = common.OURS + ('dopamine', 'cpprb')
# cpprb's cycle once more, making its states C-contiguous (see
# CpprbMemory.cycle_contiguous): for information, not for the targets.
CPPRB_CONTIGUOUS = 'cpprb-contiguous'
# Not a memory: the copy of a batch's frames that every sample makes (see
# CopyFloor), as a lower bound.
COPY_FLOOR = 'copy-floor'
PEERS = ('dopamine', 'cpprb', CPPRB_CONTIGUOUS, COPY_FLOOR)
TITLES = {'ours-native': 'ours-native', 'ours-numpy': 'ours-numpy',
          'dopamine': 'Dopamine TF', 'cpprb': 'cpprb',
          CPPRB_CONTIGUOUS: 'cpprb, contiguous states',
          COPY_FLOOR: 'copy floor', 'ours': 'ours'}

# Issue 3's targets for this memory at capacity 2**20.
REQUIRED_CYCLE_OVER_CPPRB = 1.0
REQUIRED_CYCLE_OVER_DOPAMINE = 25.0
TARGET_CYCLE_BATCH = 32
REQUIRED_ADD_OVER_DOPAMINE = 3.0
# Issue 24's: the cycle at batch 32 within 1.1x the copy floor, i.e. copy
# floor / ours at least 1 / 1.1 (rounded down, as the table prints it).
MAX_CYCLE_OVER_FLOOR = 1.1
REQUIRED_FLOOR_OVER_CYCLE = math.floor(1000 / MAX_CYCLE_OVER_FLOOR) / 1000


def define_flags():
  """Defines the command-line flags (only when run as a program)."""
  flags.DEFINE_integer('capacity_log2', 20, 'Memory capacity, 2**this.')
  flags.DEFINE_integer('fill', 50000,
                       'Transitions added (and timed as fresh adds) before '
                       'the other measurements.')
  flags.DEFINE_integer('steady_adds', 10000,
                       'Adds timed after their pages were touched.')
  flags.DEFINE_list('batch_sizes', ['32', '256'], 'Batch sizes to time.')
  flags.DEFINE_integer('rounds', 20, 'Interleaved rounds of the cycle.')
  flags.DEFINE_boolean('rss', True, 'Whether to measure the peak RSS.')
  flags.DEFINE_string('rss_child', '',
                      'Internal: measure one implementation\'s memory in '
                      'this process and print it as JSON.')
  flags.DEFINE_integer('cpprb_rss_transitions', 20000,
                       'Transitions added to cpprb when measuring its RSS.')
  flags.DEFINE_integer('seed', 0, 'Seed for the data and the order.')
  common.define_output_flag()


class FramePool(object):
  """Random frames that every memory is fed, in the same order.

  Transition t observes frame `t % size`; cpprb, which takes stacked
  observations, gets the stack of frames t-3..t (a sliding window, which
  its `stack_compress` requires).
  """

  def __init__(self, size, seed, frames=None):
    """Draws `size` random frames, or takes `frames` [n, 84, 84] as given."""
    if frames is None:
      rng = np.random.default_rng(seed)
      frames = rng.integers(0, 256, (size,) + FRAME_SHAPE, dtype=np.uint8)
    self.frames = frames
    self._stacks = None

  @property
  def stacks(self):
    """[size, 84, 84, 4]: stack k holds frames k-3..k (modulo size)."""
    if self._stacks is None:
      size = len(self.frames)
      windows = (np.arange(size)[:, None] +
                 np.arange(1 - STACK_SIZE, 1)[None, :]) % size
      self._stacks = np.ascontiguousarray(
          self.frames[windows].transpose(0, 2, 3, 1))
    return self._stacks


def _transition(t):
  """(action, reward, terminal) of transition t of the added stream."""
  return t % 4, float(t % 7 == 0), int(t % EPISODE_LENGTH ==
                                       EPISODE_LENGTH - 1)


def _atari_memory(module, capacity, **options):
  """`module`'s OutOfGraphPrioritizedReplayBuffer, Atari-shaped (`options`:
  further constructor arguments)."""
  return module.OutOfGraphPrioritizedReplayBuffer(
      FRAME_SHAPE, STACK_SIZE, capacity, batch_size=32,
      update_horizon=UPDATE_HORIZON, gamma=GAMMA, **options)


class _DopamineStyleMemory(object):
  """A memory with Dopamine's interface (ours or Dopamine's)."""

  environ = None

  def __init__(self, memory, pool):
    self.memory = memory
    self._frames = pool.frames
    self._added = 0
    names = [e.name for e in memory.get_transition_elements()]
    self._indices_position = names.index('indices')

  def _priority(self):
    raise NotImplementedError

  def add_transitions(self, count):
    """Adds the next `count` transitions of the stream through `add`."""
    memory, frames, size = self.memory, self._frames, len(self._frames)
    for t in range(self._added, self._added + count):
      action, reward, terminal = _transition(t)
      memory.add(frames[t % size], action, reward, terminal, self._priority())
    self._added += count

  def touch(self, count):
    """Writes zeros into the storage of the next `count` slots."""
    start = self.memory.cursor()
    stop = min(self.memory._replay_capacity, start + count)  # pylint: disable=protected-access
    for array in self.memory._store.values():  # pylint: disable=protected-access
      array[start:stop] = 0

  def cycle(self, batch_size, priorities):
    """Samples a batch, then sets the priorities of its transitions."""
    batch = self.memory.sample_transition_batch(batch_size)
    self.memory.set_priority(batch[self._indices_position], priorities)


class OursMemory(_DopamineStyleMemory):
  """dopamine_per's OutOfGraphPrioritizedReplayBuffer with given kernels
  (`options`: further constructor arguments, e.g. compress_observations)."""

  def __init__(self, capacity, pool, kernels=None, **options):
    self.environ = common.kernels_environ(kernels)
    from dopamine_per.replay_memory import prioritized_replay_buffer  # pylint: disable=g-import-not-at-top
    with timing.environment(self.environ):
      memory = _atari_memory(prioritized_replay_buffer, capacity, **options)
    super().__init__(memory, pool)

  def _priority(self):
    return None  # The maximum recorded priority.


class DopamineMemory(_DopamineStyleMemory):
  """Dopamine 4.1.2's TF OutOfGraphPrioritizedReplayBuffer."""

  def __init__(self, capacity, pool):
    from dopamine.tf.replay_memory import prioritized_replay_buffer  # pylint: disable=g-import-not-at-top
    super().__init__(_atari_memory(prioritized_replay_buffer, capacity), pool)

  def _priority(self):
    # What Dopamine's Rainbow agent passes for a new transition.
    return self.memory.sum_tree.max_recorded_priority


class CpprbMemory(object):
  """cpprb's PrioritizedReplayBuffer, Atari-shaped (see the module doc)."""

  environ = None

  def __init__(self, capacity, pool):
    import cpprb  # pylint: disable=g-import-not-at-top
    shape = FRAME_SHAPE + (STACK_SIZE,)
    self.memory = cpprb.PrioritizedReplayBuffer(
        capacity,
        {'obs': {'shape': shape, 'dtype': np.uint8},
         'next_obs': {'shape': shape, 'dtype': np.uint8},
         'act': {'dtype': np.int32}, 'rew': {}, 'done': {}},
        alpha=1.0, stack_compress=['obs', 'next_obs'],
        Nstep={'size': UPDATE_HORIZON, 'gamma': GAMMA, 'rew': 'rew',
               'next': 'next_obs'})
    self._stacks = pool.stacks
    self._added = 0

  def add_transitions(self, count):
    """Adds the next `count` transitions, one `add` call each."""
    memory, stacks, size = self.memory, self._stacks, len(self._stacks)
    for t in range(self._added, self._added + count):
      action, reward, terminal = _transition(t)
      memory.add(obs=stacks[t % size], act=action, rew=reward,
                 next_obs=stacks[(t + 1) % size], done=terminal)
      if terminal:
        memory.on_episode_end()
    self._added += count

  def add_transitions_batched(self, count, chunk=1000):
    """Adds the next `count` transitions with one `add` call per chunk."""
    size = len(self._stacks)
    for start in range(self._added, self._added + count, chunk):
      stop = min(start + chunk, self._added + count, (
          start // EPISODE_LENGTH + 1) * EPISODE_LENGTH)
      t = np.arange(start, stop)
      self.memory.add(obs=self._stacks[t % size], act=t % 4,
                      rew=(t % 7 == 0).astype(np.float32),
                      next_obs=self._stacks[(t + 1) % size],
                      done=(t % EPISODE_LENGTH ==
                            EPISODE_LENGTH - 1).astype(np.float32))
      if stop % EPISODE_LENGTH == 0:
        self.memory.on_episode_end()
    self._added += count

  def touch(self, count):
    """Nothing to do: the constructor touched all of cpprb's storage."""
    del count

  def cycle(self, batch_size, priorities):
    batch = self.memory.sample(batch_size)
    self.memory.update_priorities(batch['indexes'], priorities)

  def cycle_contiguous(self, batch_size, priorities):
    """`cycle`, making the states C-contiguous as a TF tensor needs.

    cpprb returns `obs` and `next_obs` as transposed views ([batch, 84, 84,
    4] with the strides of [batch, 4, 84, 84]): it skips interleaving the
    frames, which ours and Dopamine's do and which TF does (with a NumPy
    copy) when it converts such an array to a tensor.
    """
    batch = self.memory.sample(batch_size)
    np.ascontiguousarray(batch['obs'])
    np.ascontiguousarray(batch['next_obs'])
    self.memory.update_priorities(batch['indexes'], priorities)


class CopyFloor(object):
  """The least work of an Atari sample, for reference: copying its frames.

  Each sampled transition needs a state and a next state, 2 x 4 frames
  (1.8 MB for a batch of 32). `cycle` draws slots uniformly and copies those
  frames out of a memory's frame storage with one NumPy fancy index (a
  memcpy per frame), without interleaving them into [84, 84, 4] stacks, and
  sets no priorities. Every memory that returns frames pays at least this.
  """

  environ = None

  def __init__(self, frames, stored, seed):
    self._frames = frames
    self._stored = stored
    self._rng = np.random.default_rng(seed)
    self._offsets = np.arange(1 - STACK_SIZE, 1)

  def cycle(self, batch_size, priorities):
    del priorities
    slots = self._rng.integers(STACK_SIZE, self._stored - UPDATE_HORIZON,
                               batch_size)
    stacks = np.concatenate([slots, slots + UPDATE_HORIZON])
    return self._frames[stacks[:, None] + self._offsets]


def make_memory(name, capacity, pool):
  """Returns the memory called `name` (see IMPLEMENTATIONS)."""
  if name.startswith('ours'):
    return OursMemory(capacity, pool, common.kernels_of(name))
  if name == 'dopamine':
    return DopamineMemory(capacity, pool)
  if name == 'cpprb':
    return CpprbMemory(capacity, pool)
  raise ValueError(f'Unknown implementation {name!r}')


def default_implementations():
  """Ours with every available kernel set, and every installed peer."""
  names = common.available_ours()
  if common.dopamine_available():
    names.append('dopamine')
  if common.cpprb_available():
    names.append('cpprb')
  return names


def _time_add_rounds(memories, rounds, burst, rng, samples, operation):
  """Interleaved rounds of `burst` adds; appends µs per add to samples."""
  for _, name in timing.shuffled_rounds(memories, rounds, rng):
    memory = memories[name]
    with timing.environment(memory.environ or {}):
      start = time.perf_counter_ns()
      memory.add_transitions(burst)
      elapsed = time.perf_counter_ns() - start
    samples.setdefault((operation, name), []).append(elapsed / burst / 1e3)


def run_benchmark(capacity, fill, steady_adds, batch_sizes, rounds, seed,
                  implementations=None, add_burst=1000, burst_seconds=0.05,
                  pool_size=256, progress=None):
  """Times adds and the sample + set_priority cycle, interleaved.

  Args:
    capacity: int, the memories' capacity.
    fill: int, transitions added first, timed as fresh adds.
    steady_adds: int, transitions added next, into touched pages.
    batch_sizes: sequence of ints, for the cycle.
    rounds: int, interleaved rounds of the cycle.
    seed: int.
    implementations: names (see IMPLEMENTATIONS); None for all available.
    add_burst: int, adds per timed burst.
    burst_seconds: float, the approximate length of one cycle measurement.
    pool_size: int, frames in the pool the transitions come from.
    progress: optional callable taking a str.

  Returns:
    dict mapping (operation, implementation) to the median µs per call;
    operations are 'add, fresh pages', 'add, pages touched' and
    ('cycle', batch_size) keys as ('cycle', batch_size, implementation).
  """
  if implementations is None:
    implementations = default_implementations()
  rng = np.random.default_rng(seed)
  pool = FramePool(pool_size, seed)
  if progress:
    progress(f'replay: constructing {", ".join(implementations)} at '
             f'capacity {capacity}')
  memories = {name: make_memory(name, capacity, pool)
              for name in implementations}
  warmup = min(add_burst, fill // 10)
  for memory in memories.values():
    with timing.environment(memory.environ or {}):
      memory.add_transitions(warmup)  # Compiles and warms up the add path.
  samples = {}
  if progress:
    progress(f'replay: adding {fill} transitions to each (fresh pages)')
  _time_add_rounds(memories, max(1, (fill - warmup) // add_burst), add_burst,
                   rng, samples, 'add, fresh pages')
  steady_rounds = max(1, steady_adds // add_burst)
  for memory in memories.values():
    # Touch a little more than the adds will write: episode starts add
    # padding slots in ours and Dopamine's.
    memory.touch(2 * steady_rounds * add_burst)
  if progress:
    progress(f'replay: adding {steady_rounds * add_burst} transitions to '
             'each (pages touched)')
  _time_add_rounds(memories, steady_rounds, add_burst, rng, samples,
                   'add, pages touched')
  results = {key: timing.median(times) for key, times in samples.items()}

  cases = {}
  floor = None
  ours_memories = [m for n, m in memories.items() if n.startswith('ours')]
  if ours_memories:
    memory = ours_memories[0].memory
    floor = CopyFloor(memory._store['observation'],  # pylint: disable=protected-access
                      min(int(memory.add_count), capacity), seed)
  for batch_size in batch_sizes:
    priorities = [(batch_size, 1.0 - rng.random(batch_size))
                  for _ in range(64)]
    for name, memory in memories.items():
      cases[('cycle', batch_size, name)] = timing.Case(
          timing.rotating(priorities, memory.cycle), memory.environ)
      if name == 'cpprb':
        cases[('cycle', batch_size, CPPRB_CONTIGUOUS)] = timing.Case(
            timing.rotating(priorities, memory.cycle_contiguous))
    if floor is not None:
      cases[('cycle', batch_size, COPY_FLOOR)] = timing.Case(
          timing.rotating(priorities, floor.cycle))
  if progress:
    progress(f'replay: sample + set_priority, {rounds} rounds')
  cycle_samples = timing.run_interleaved(cases, rounds, burst_seconds, rng,
                                         progress=progress)
  results.update({key: timing.median(times)
                  for key, times in cycle_samples.items()})
  results['stored'] = min(capacity, min(m._added for m in memories.values()))  # pylint: disable=protected-access
  return results


# ------------------------------------------------------------ peak memory


def status_kib(field):
  """A field of /proc/self/status in KiB (Linux), or None."""
  try:
    with open('/proc/self/status', encoding='utf-8') as status:
      for line in status:
        if line.startswith(field + ':'):
          return int(line.split()[1])
  except OSError:
    pass
  return None


def peak_kib():
  peak = status_kib('VmHWM')
  if peak is None:
    import resource  # pylint: disable=g-import-not-at-top
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return peak


def rss_child(name, capacity, cpprb_transitions, seed=0, after_adds=10000,
              add_burst=1000):
  """Fills one memory in this process; returns its memory figures.

  Args:
    name: the implementation (see IMPLEMENTATIONS; 'ours' for ours with the
      default kernels).
    capacity: int.
    cpprb_transitions: int, transitions added to cpprb (see the module
      docstring); the others are filled to capacity.
    seed: int.
    after_adds: int, adds timed after the fill (after the wrap-around for
      ours and Dopamine), in bursts of `add_burst`.
    add_burst: int.

  Returns:
    dict with 'baseline_kib' (resident before the constructor: the
    interpreter, the imports, compiled code and the frame pool, after a
    warm-up on a memory of capacity 1000), 'constructed_kib' (right
    after it), 'peak_kib' (the peak resident set at the end), 'added',
    'how' (how it was filled), 'fill_seconds' and 'add_after_fill_us' (the
    median µs per add of the bursts after the fill).
  """
  pool = FramePool(256, seed)
  if name == 'cpprb':
    pool.stacks  # pylint: disable=pointless-statement
  # Warm up on a small memory first (imports, the native kernels), so
  # that the baseline holds everything that does not depend on capacity.
  warmup = make_memory(name, 1000, pool)
  warmup.add_transitions(100)
  warmup.cycle(32, np.ones(32))
  del warmup
  gc.collect()
  baseline = status_kib('VmRSS')
  memory = make_memory(name, capacity, pool)
  constructed = status_kib('VmRSS')
  start = time.perf_counter()
  if name == 'cpprb':
    added = min(capacity, cpprb_transitions)
    memory.add_transitions_batched(added)
    how = 'its batch `add`, 1000 transitions a call'
  else:
    added = capacity
    memory.add_transitions(added)
    how = '`add`, one transition a call'
  fill_seconds = time.perf_counter() - start
  times = []
  for _ in range(max(1, after_adds // add_burst)):
    start = time.perf_counter_ns()
    memory.add_transitions(add_burst)
    times.append((time.perf_counter_ns() - start) / add_burst / 1e3)
  return {
      'implementation': name,
      'baseline_kib': baseline,
      'constructed_kib': constructed,
      'peak_kib': peak_kib(),
      'added': added,
      'how': how,
      'fill_seconds': fill_seconds,
      'add_after_fill_us': timing.median(times),
  }


def measure_rss(name, capacity, cpprb_transitions, after_adds=10000,
                timeout=900):
  """Runs `rss_child` in a fresh interpreter; returns its dict.

  Raises:
    RuntimeError: If the subprocess fails.
  """
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  command = [sys.executable, '-m', 'benchmarks.replay_benchmark',
             f'--rss_child={name}',
             f'--rss_capacity={capacity}',
             f'--cpprb_rss_transitions={cpprb_transitions}',
             f'--rss_after_adds={after_adds}']
  completed = subprocess.run(command, cwd=root, capture_output=True,
                             text=True, timeout=timeout, check=False)
  if completed.returncode != 0:
    raise RuntimeError(f'{" ".join(command)} failed:\n{completed.stderr}')
  return json.loads(completed.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------- formatting


def _ours(present):
  return [n for n in common.OURS if n in present]


def _mib(kib):
  return f'{kib / 1024:,.0f}'


def _row_label(key):
  if key[0] == 'cycle':
    return f'sample({key[1]}) + set_priority({key[1]})'
  return f'{key[0]}, per transition'


def format_section(results, rss=None, capacity=None):
  """Formats the results as a Markdown section (a `##` heading, tables).

  Args:
    results: dict returned by `run_benchmark`.
    rss: None, or {implementation: dict returned by `measure_rss`}.
    capacity: int, the memories' capacity.

  Returns:
    str, Markdown.
  """
  present = {key[-1] for key in results if isinstance(key, tuple)}
  ours = _ours(present)
  peers = [p for p in PEERS if p in present]
  names = ours + peers
  rows = sorted({key[:-1] for key in results if isinstance(key, tuple)},
                key=lambda k: (k[0] == 'cycle', k))
  capacity_name = common.log2_name(capacity) if capacity else '?'
  lines = [
      '## Atari-shaped prioritized replay memory',
      '',
      f'Capacity {capacity_name}, 84x84 uint8 frames, stacks of 4, 3-step '
      'returns (gamma 0.99), episodes of '
      f'{EPISODE_LENGTH} transitions; median microseconds per call, '
      'interleaved. "add, fresh pages": the first adds after construction '
      '(ours and Dopamine write pages never touched before; cpprb\'s '
      'constructor touches all of its storage, so its figure is a steady '
      'state). "add, pages touched": later adds into slots whose storage was '
      'touched first, as after a wrap-around. The cycle: sample a batch, set '
      f'its priorities, with {results.get("stored", "?")} transitions '
      'stored. Dopamine TF is dopamine-rl 4.1.2\'s '
      '`dopamine.tf.replay_memory` OutOfGraphPrioritizedReplayBuffer; '
      'cpprb is its PrioritizedReplayBuffer with `stack_compress` on `obs` '
      'and `next_obs`, `Nstep` 3 and alpha 1 (its `sample` also computes '
      'importance weights; it stores each frame twice, as `obs` and '
      '`next_obs`, because its `next_of` drops `next_obs` from samples '
      'under `Nstep`). cpprb returns its states as transposed views, '
      'without interleaving the frames as ours and Dopamine\'s do; "cpprb, '
      'contiguous states" adds the `np.ascontiguousarray` a TF tensor of '
      'them would cost (for information; the targets use plain cpprb). '
      '"copy floor" is not a memory: it copies the 8 frames of each of a '
      'batch of uniformly drawn transitions out of our frame storage with one '
      'NumPy fancy index, without interleaving them or setting priorities: '
      'the least any memory that returns the frames can do. '
      'Ours: `ours-native` (the default) and `ours-numpy` are the same '
      'memory with each kernel set. Method: benchmarks/replay_benchmark.py.',
      '',
  ]
  table = []
  for key in rows:
    table.append([_row_label(key)] + [
        timing.format_microseconds(results.get(key + (name,)))
        for name in names])
  lines += timing.markdown_table(
      ['operation'] + [f'{TITLES[n]} (µs)' for n in names], table)
  lines += ['', 'Ratios of the medians, peer / ours (above 1: ours is '
            'faster):', '']
  table = []
  for key in rows:
    row = [_row_label(key)]
    for name in ours:
      for peer in peers:
        ratio = timing.speedup(results, key, peer, name)
        row.append('—' if ratio is None else f'{ratio:.1f}x')
    table.append(row)
  lines += timing.markdown_table(
      ['operation'] + [f'{TITLES[p]} / {n}' for n in ours for p in peers],
      table)
  if rss:
    lines += [
        '',
        f'Resident memory at capacity {capacity_name}, one implementation '
        'per subprocess, one after the other (MiB; "buffer" is the peak '
        'minus the resident set before the constructor, i.e. without the '
        'interpreter, the imports, compiled code and the frame pool, measured '
        'after a warm-up on a small memory). "add after the fill": '
        'median µs per add in that process after the fill (after the '
        'wrap-around for ours and Dopamine), not interleaved.',
        '',
    ]
    table = []
    for name, figures in rss.items():
      table.append([
          TITLES.get(name, name), _mib(figures['baseline_kib']),
          _mib(figures['constructed_kib']), _mib(figures['peak_kib']),
          _mib(figures['peak_kib'] - figures['baseline_kib']),
          f'{figures["added"]:,} through {figures["how"]} '
          f'({figures["fill_seconds"]:.0f} s)',
          timing.format_microseconds(figures['add_after_fill_us'])])
    lines += timing.markdown_table(
        ['memory', 'before', 'after the constructor', 'peak', 'buffer',
         'filled with', 'add after the fill (µs)'], table,
        align=['l', 'r', 'r', 'r', 'r', 'l', 'r'])
  targets = _targets(results, rss, ours)
  if targets:
    lines += ['', 'Targets (issues 3 and 24), ratio peer / ours (the copy '
              'floor\'s: at least 1 / 1.1 is within 1.1x the floor) and '
              'whether it is met in this run:', '']
    lines += timing.format_targets(targets, ours)
  bound = timing.speedup(results, ('cycle', TARGET_CYCLE_BATCH), 'dopamine',
                         COPY_FLOOR)
  if bound is not None:
    lines += [
        '',
        f'Bound: Dopamine TF / copy floor = {bound:.1f}x for '
        f'{_row_label(("cycle", TARGET_CYCLE_BATCH))}: no memory that copies '
        'its frames can be more than that much faster than Dopamine TF here'
        + (f', so the {REQUIRED_CYCLE_OVER_DOPAMINE:g}x target is out of '
           'reach on this machine.' if bound < REQUIRED_CYCLE_OVER_DOPAMINE
           else '.')]
  return '\n'.join(lines) + '\n'


def _targets(results, rss, ours):
  """Issues 3's and 24's targets as `timing.format_targets` rows."""
  rows = []
  cycle = ('cycle', TARGET_CYCLE_BATCH)
  for title, peer, required, key, case in [
      ('as fast as cpprb', 'cpprb', REQUIRED_CYCLE_OVER_CPPRB, cycle,
       _row_label(cycle)),
      (f'issue 24: within {MAX_CYCLE_OVER_FLOOR:g}x the copy floor',
       COPY_FLOOR, REQUIRED_FLOOR_OVER_CYCLE, cycle, _row_label(cycle)),
      (f'{REQUIRED_CYCLE_OVER_DOPAMINE:g}x Dopamine TF', 'dopamine',
       REQUIRED_CYCLE_OVER_DOPAMINE, cycle, _row_label(cycle)),
      (f'{REQUIRED_ADD_OVER_DOPAMINE:g}x Dopamine TF', 'dopamine',
       REQUIRED_ADD_OVER_DOPAMINE, ('add, fresh pages',),
       'add, fresh pages'),
      (f'{REQUIRED_ADD_OVER_DOPAMINE:g}x Dopamine TF', 'dopamine',
       REQUIRED_ADD_OVER_DOPAMINE, ('add, pages touched',),
       'add, pages touched')]:
    ratios = {name: timing.speedup(results, key, peer, name) for name in ours}
    if any(r is not None for r in ratios.values()):
      rows.append((title, case, required, ratios))
  if rss and 'dopamine' in rss:
    theirs = rss['dopamine']['peak_kib'] - rss['dopamine']['baseline_kib']
    for name in ('ours',) + tuple(ours):
      if name in rss:
        mine = rss[name]['peak_kib'] - rss[name]['baseline_kib']
        # The memory does not depend on the kernels: one figure for all.
        rows.append(('memory at most Dopamine TF\'s', 'buffer resident at '
                     'capacity', 1.0, {n: theirs / mine for n in ours}))
        break
  return rows


def format_results(results, rss, capacity, machine):
  """Formats a stand-alone document: a title, the machine, the section."""
  return common.document('Replay memory benchmark', machine,
                         format_section(results, rss, capacity))


def run_rss(implementations, capacity, cpprb_transitions, after_adds=10000,
            progress=None):
  """`measure_rss` for ours (default kernels) and each peer, in turn."""
  rss = {}
  names = ['ours'] + [n for n in implementations if n in ('dopamine', 'cpprb')]
  for name in names:
    if progress:
      progress(f'replay: peak RSS of {name} at capacity {capacity}')
    rss[name] = measure_rss(name, capacity, cpprb_transitions, after_adds)
  return rss


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  if options.rss_child:
    print(json.dumps(rss_child(options.rss_child, options.rss_capacity,
                               options.cpprb_rss_transitions,
                               after_adds=options.rss_after_adds)))
    return
  capacity = 2**options.capacity_log2
  progress = timing.print_progress
  implementations = default_implementations()
  results = run_benchmark(capacity, options.fill, options.steady_adds,
                          [int(b) for b in options.batch_sizes],
                          options.rounds, options.seed, implementations,
                          progress=progress)
  rss = (run_rss(implementations, capacity, options.cpprb_rss_transitions,
                 progress=progress) if options.rss else None)
  common.write_report(
      format_results(results, rss, capacity, common.describe_machine()),
      options.output)


def define_child_flags():
  """Flags of the RSS subprocess that the section's own runs do not set."""
  flags.DEFINE_integer('rss_capacity', 0, 'Internal: the child\'s capacity.')
  flags.DEFINE_integer('rss_after_adds', 10000,
                       'Internal: adds timed after the child\'s fill.')


if __name__ == '__main__':
  define_flags()
  define_child_flags()
  app.run(main)
