r"""Benchmarks the distributed memory and actors on a local Ray (issue 14).

Part of `python -m benchmarks` (see benchmarks/__main__.py), which writes
benchmarks/RESULTS.md. This section alone, printed and not written:

  python -m benchmarks.distributed_benchmark

One process starts a local Ray (loopback only) and, interleaved over rounds
as in benchmarks/timing.py, times:

1. **Sampling.** A learner's cycle, `sample_transition_batch(B)` then
   `set_priority` of the same indices, on the single in-process
   `OutOfGraphPrioritizedReplayBuffer` and on `ShardedPrioritizedReplayBuffer`
   with 1, 2 and 4 shards, all of the same total capacity and contents
   (whole episodes of one stream, dealt round-robin to the shards' writers),
   with CartPole shapes (float32[4], stack 1) and Atari shapes (uint8 84x84,
   stack 4), 3-step returns. Atari's B=512 on one shard gives the shard's
   sample rate; a writer adding Atari frames to one shard (`flush_every`
   64) gives its add rate.
2. **Staged learner step**: `_train_step()` of configs/apex_cartpole.gin's
   Rainbow learner (B=128, staging, training every step) over its 2-shard
   memory with and without the config's fetch-ahead (native queue), with
   it through `tf.numpy_function`, and over the agent's single in-process
   memory, all holding the same CartPole transitions.
3. **Actors**: total environment steps per second of 1 and 2 Ape-X `Actor`s
   (Ray actors acting with configs/rainbow_cartpole.gin's network on
   CartPole-v1, writing to a 2-shard memory), against the single-process
   `run_experiment.Runner` on the same config in its training phase (past
   `min_replay_history`, so it trains every `update_period` steps).
4. **Bytes per call**, pickled as Ray sends them (protocol 5, NumPy arrays
   out of band): a writer's batch of 64 Atari transitions, and a learner
   batch of 512 on one shard (targets, the draw's answer, the priority
   update that travels with the next call). With the rates above they give
   the projection to a cluster at Ape-X's Atari rates (`project`).
"""

import gc
import os
import pickle
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional
from typing import Sequence, Tuple

from absl import app
from absl import flags
import gin
import numpy as np
import ray
import tensorflow as tf

if __package__ in (None, ''):  # Run as a script: see benchmarks/common.py.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import timing  # pylint: disable=g-import-not-at-top
from dopamine_per.agents import rainbow_agent  # pylint: disable=g-import-not-at-top
from dopamine_per.discrete_domains import gym_lib  # pylint: disable=g-import-not-at-top
from dopamine_per.discrete_domains import run_experiment  # pylint: disable=g-import-not-at-top
from dopamine_per.distributed import actor as actor_lib  # pylint: disable=g-import-not-at-top
from dopamine_per.distributed import replay  # pylint: disable=g-import-not-at-top
from dopamine_per.distributed import weights as weights_lib  # pylint: disable=g-import-not-at-top
from dopamine_per.distributed import writer as writer_lib  # pylint: disable=g-import-not-at-top
from dopamine_per.replay_memory import prioritized_replay_buffer  # pylint: disable=g-import-not-at-top

__all__ = ['SHAPES', 'SINGLE', 'ROUND_TRIP', 'ApexRates', 'APEX_RATES', 'call_bytes',
           'format_results', 'format_section', 'project', 'run_benchmark',
           'shards_name']

# Observation shapes: the memories' keyword arguments.
SHAPES = {
    'CartPole': dict(observation_shape=(4,), stack_size=1,
                     observation_dtype=np.float32),
    'Atari': dict(observation_shape=(84, 84), stack_size=4,
                  observation_dtype=np.uint8),
}
UPDATE_HORIZON = 3
SINGLE = 'single'
# The case timing one call to a shard and its answer (`mass()`: 8 bytes).
ROUND_TRIP = 'round trip'
# Transitions per episode in the stream the memories are filled with.
_EPISODE_LENGTH = 128
# Batch size of the per-shard sample rate (Ape-X's learner batch).
PROJECTION_BATCH = 512
# The sampling part's memories' default batch size (Dopamine's default).
BATCH = 32
_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'configs')
_CARTPOLE_GIN = os.path.join(_CONFIGS, 'rainbow_cartpole.gin')
_APEX_CARTPOLE_GIN = os.path.join(_CONFIGS, 'apex_cartpole.gin')
# Ray reserves little CPU per shard, so that every memory of the section
# fits a 2-CPU local Ray at once; the shards share the machine's cores.
_CPUS_PER_SHARD = 0.1
_CPUS_PER_ACTOR = 0.5


def define_flags():
  """Defines the command-line flags (only when run as a program)."""
  flags.DEFINE_integer('capacity', 2**15, 'Total capacity of each memory.')
  flags.DEFINE_list('batch_sizes', ['32', '256'], 'Learner batch sizes.')
  flags.DEFINE_list('shards', ['1', '2', '4'], 'Shard counts.')
  flags.DEFINE_integer('rounds', 9, 'Interleaved rounds of sampling.')
  flags.DEFINE_float('burst_seconds', 0.25, 'Duration of one burst.')
  flags.DEFINE_integer('step_rounds', 10, 'Interleaved rounds of steps.')
  flags.DEFINE_integer('steps', 100, 'Training steps per step case and round.')
  flags.DEFINE_integer('actor_steps', 2000,
                       'Agent steps per actor and runner case and round.')
  flags.DEFINE_integer('actor_rounds', 5, 'Interleaved rounds of actors.')
  common.define_output_flag()


def shards_name(num_shards: int) -> str:
  """'1 shard', '2 shards': an implementation's name in the tables."""
  return f'{num_shards} shard{"s" if num_shards > 1 else ""}'


def _start_local_ray() -> None:
  """A local Ray on 127.0.0.1 with the machine's CPUs, without dashboard.

  Collects garbage first: Ray forks this process, whose large freed
  memories would otherwise count against the fork.
  """
  gc.collect()
  ray.init(num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False,
           log_to_driver=False, _node_ip_address='127.0.0.1')


class _Stream(object):
  """The transitions every memory of one shape is filled with, in order.

  Transition t observes frame `t % len(frames)`, takes action t % 4, gets
  reward 1 every seventh step, ends its episode every `_EPISODE_LENGTH`
  transitions, and has priority `priorities[t]` (uniform in [0.1, 1]).
  """

  def __init__(self, shape: str, length: int, seed: int):
    rng = np.random.default_rng(seed)
    kwargs = SHAPES[shape]
    size = 1000
    if kwargs['observation_dtype'] == np.uint8:
      self.frames = rng.integers(0, 256, (size,) + kwargs['observation_shape'],
                                 dtype=np.uint8)
    else:
      self.frames = rng.standard_normal(
          (size,) + kwargs['observation_shape']).astype(np.float32)
    self.priorities = rng.uniform(0.1, 1.0, length)

  def transition(self, t: int):
    """(observation, action, reward, terminal, priority) of transition t."""
    return (self.frames[t % len(self.frames)], t % 4, float(t % 7 == 0),
            int(t % _EPISODE_LENGTH == _EPISODE_LENGTH - 1),
            float(self.priorities[t % len(self.priorities)]))


def _single_memory(shape: str, capacity: int, stream: _Stream) -> Any:
  memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
      replay_capacity=capacity, batch_size=BATCH,
      update_horizon=UPDATE_HORIZON, rng=0, **SHAPES[shape])
  for t in range(capacity):
    memory.add(*stream.transition(t))
  return memory


def _sharded_memory(shape: str, capacity: int, num_shards: int,
                    stream: _Stream, prefetch: int = 0
                   ) -> replay.ShardedPrioritizedReplayBuffer:
  """A sharded memory holding the stream's first `capacity` transitions.

  Episode e goes to stream (and shard) e % num_shards, so every shard holds
  whole episodes and the shards hold together what the single memory holds.
  """
  memory = replay.ShardedPrioritizedReplayBuffer(
      num_shards=num_shards, replay_capacity=capacity, batch_size=BATCH,
      num_cpus_per_shard=_CPUS_PER_SHARD, prefetch=prefetch,
      update_horizon=UPDATE_HORIZON, rng=0, **SHAPES[shape])
  writers = [memory.writer(k) for k in range(num_shards)]
  for t in range(capacity):
    writers[(t // _EPISODE_LENGTH) % num_shards].add(*stream.transition(t))
  for writer in writers:
    writer.flush()
  return memory


def _cycle(memory: Any, priorities: Sequence[np.ndarray]
          ) -> Callable[[], None]:
  """A learner's cycle: sample a batch, then set its priorities.

  Args:
    memory: the single or the sharded memory.
    priorities: arrays of the batch size, the priorities set in turn.

  Returns:
    callable without arguments doing one cycle.
  """
  position = [e.name for e in memory.get_transition_elements()].index(
      'indices')

  def cycle(new_priorities):
    batch = memory.sample_transition_batch(len(new_priorities))
    memory.set_priority(batch[position], new_priorities)
  return timing.rotating([(p,) for p in priorities], cycle)


def _add(writer: Any, stream: _Stream) -> Callable[[], None]:
  """Adds the stream's next transition through `writer` (one per call)."""
  count = [0]

  def call():
    writer.add(*stream.transition(count[0]))
    count[0] += 1
  return call


# Memories of the staged learner step: the agent's own single memory, and
# apex_cartpole.gin's sharded memory without and with its fetch-ahead (the
# dequeue op), and with it through tf.numpy_function (no native ops).
STEP_MEMORIES = (SINGLE, 'no fetch-ahead', 'fetch-ahead', 'py_func')


def _agent_stream(stream: _Stream) -> Callable[[int], Tuple[Any, ...]]:
  """The stream's transitions shaped as CartPole-v1's.

  Observations float64[4, 1] (gym_lib's CARTPOLE_OBSERVATION_SHAPE and
  _DTYPE), actions 0 and 1.
  """
  def transition(t):
    observation, action, reward, terminal, priority = stream.transition(t)
    return (observation.astype(np.float64).reshape(4, 1), action % 2,
            reward, terminal, priority)
  return transition


def _fetch_ahead() -> Tuple[int, int]:
  """apex_cartpole.gin's (prefetch, batches_per_call) (gin must hold it)."""
  return (gin.query_parameter('ShardedPrioritizedReplayBuffer.prefetch'),
          gin.query_parameter(
              'ShardedPrioritizedReplayBuffer.batches_per_call'))


def _learner(memory: str, capacity: int, stream: _Stream) -> Any:
  """apex_cartpole.gin's Rainbow learner over `memory`, holding the stream.

  The learner (update_period 1: every step trains; target sync every 25)
  over the memory apex_cartpole.gin builds (2 shards), without its
  fetch-ahead (`prefetch` 0) or with it, or over the agent's own single
  in-process memory; every memory of `capacity` transitions. Its session is
  the trainer's (`create_agent`'s).
  """
  gin.clear_config()
  bindings = {
      SINGLE: ['WrappedPrioritizedReplayBuffer.wrapped_memory = None'],
      'no fetch-ahead': ['ShardedPrioritizedReplayBuffer.prefetch = 0'],
      'fetch-ahead': [],
      'py_func': ['WrappedPrioritizedReplayBuffer.use_native_ops = False'],
  }[memory]
  gin.parse_config_files_and_bindings([_APEX_CARTPOLE_GIN], bindings + [
      f'ShardedPrioritizedReplayBuffer.num_cpus_per_shard = {_CPUS_PER_SHARD}',
      f'ShardedPrioritizedReplayBuffer.replay_capacity = {capacity}',
      f'WrappedPrioritizedReplayBuffer.replay_capacity = {capacity}'])
  graph = tf.Graph()
  with graph.as_default():
    session = tf.compat.v1.Session(config=tf.compat.v1.ConfigProto(
        allow_soft_placement=True))
    agent = rainbow_agent.RainbowAgent(session, num_actions=2)
  replay_memory = agent.replay_memory
  transition = _agent_stream(stream)
  if memory == SINGLE:
    writers = [replay_memory]
  else:
    writers = [replay_memory.writer(k) for k in range(2)]
  for t in range(capacity):
    writers[(t // _EPISODE_LENGTH) % len(writers)].add(*transition(t))
  if memory != SINGLE:
    for writer in writers:
      writer.flush()
  return agent


def call_bytes(*args: Any) -> int:
  """Bytes Ray sends for a call's arguments (or answer): pickle protocol 5.

  NumPy arrays travel out of band, so their bytes are counted once, beside
  the pickle's.
  """
  buffers = []
  size = len(pickle.dumps(args, protocol=5, buffer_callback=buffers.append))
  return size + sum(buffer.raw().nbytes for buffer in buffers)


def _bytes_per_call(memory: replay.ShardedPrioritizedReplayBuffer,
                    stream: _Stream, flush_every: int) -> Dict[str, int]:
  """Bytes of a writer's add call and of a learner batch, on one shard."""
  transitions = [(stream.transition(t), {}) for t in range(flush_every)]
  handle = memory.shard_handles[0]
  targets = np.random.default_rng(0).uniform(
      0.0, memory.total_priority(), PROJECTION_BATCH)
  fractions = targets / memory.total_priority()
  answer = ray.get(handle.draw.remote(None, None, fractions, True))
  slots = answer[0]
  return {
      'add call': call_bytes(0, transitions),
      'mass call': call_bytes() + call_bytes(*ray.get(handle.mass.remote())),
      'draw request': call_bytes(None, None, fractions, True),
      'draw answer': call_bytes(*answer),
      'set_priority request': call_bytes(slots, np.ones(len(slots))),
  }


def _time_sampling(shapes: Sequence[str], capacity: int,
                   batch_sizes: Sequence[int], shard_counts: Sequence[int],
                   rounds: int, burst_seconds: float, seed: int,
                   progress: Optional[Callable[[str], None]]):
  """Part 1 and the per-shard rates (see `run_benchmark`).

  Returns:
    (medians, bytes, memories): the median microseconds per call of each
    case, `_bytes_per_call` ({} without a one-shard memory), and the
    memories by (shape, name), sharded ones still open.
  """
  rng = np.random.default_rng(seed)
  memories, cases = {}, {}
  add_stream = None
  for shape in shapes:
    stream = _Stream(shape, capacity, seed)
    if progress:
      progress(f'distributed: filling the {shape} memories')
    memories[shape, SINGLE] = _single_memory(shape, capacity, stream)
    for num_shards in shard_counts:
      memories[shape, shards_name(num_shards)] = _sharded_memory(
          shape, capacity, num_shards, stream)
    sizes = list(batch_sizes)
    if shape == 'Atari' and 1 in shard_counts:
      sizes.append(PROJECTION_BATCH)
    for batch_size in sizes:
      priorities = [rng.uniform(0.1, 1.0, batch_size) for _ in range(4)]
      names = [SINGLE] + [shards_name(n) for n in shard_counts]
      if batch_size == PROJECTION_BATCH:
        names = [SINGLE, shards_name(1)]
      for name in names:
        cases['cycle', shape, batch_size, name] = timing.Case(
            _cycle(memories[shape, name], priorities))
    if shape == 'Atari' and 1 in shard_counts:
      add_stream = stream
      # Stream 1 of the one-shard memory: another writer than the fill's.
      writer = memories[shape, shards_name(1)].writer(1)
      cases['add', shape, 1, shards_name(1)] = timing.Case(
          _add(writer, stream))
      handle = memories[shape, shards_name(1)].shard_handles[0]
      cases[ROUND_TRIP] = timing.Case(lambda: ray.get(handle.mass.remote()))
  samples = timing.run_interleaved(cases, rounds, burst_seconds, rng,
                                   progress=progress)
  medians = {key: timing.median(values) for key, values in samples.items()}
  call_sizes = {}
  if add_stream is not None:
    writer.flush()
    call_sizes = _bytes_per_call(memories['Atari', shards_name(1)],
                                 add_stream, writer_lib.DEFAULT_FLUSH_EVERY)
  return medians, call_sizes, memories


def _time_steps(capacity: int, rounds: int, steps: int, seed: int,
                progress: Optional[Callable[[str], None]]
               ) -> Dict[str, float]:
  """Part 2: median milliseconds of a learner's training step, by memory.

  Args:
    capacity: int, transitions every memory holds.
    rounds: int, interleaved rounds.
    steps: int, training steps per case and round.
    seed: int, seeds the transitions.
    progress: optional callable taking a str.

  Returns:
    {memory: median ms per `_train_step`} for STEP_MEMORIES, and
    'fetch-ahead settings': apex_cartpole.gin's (prefetch,
    batches_per_call).
  """
  stream = _Stream('CartPole', capacity, seed)
  agents = {name: _learner(name, capacity, stream) for name in STEP_MEMORIES}
  fetch_ahead = _fetch_ahead()
  gin.clear_config()
  for agent in agents.values():
    for _ in range(steps):  # Warm up (and fill the stage).
      agent.train_step()

  def run(agent):
    start = time.perf_counter()
    for _ in range(steps):
      agent.train_step()
    return (time.perf_counter() - start) * 1e3 / steps

  samples = {name: [] for name in agents}
  for _, name in timing.shuffled_rounds(agents, rounds,
                                        np.random.default_rng(1), progress):
    samples[name].append(run(agents[name]))
  for name, agent in agents.items():
    agent.session.close()
    if name != SINGLE:
      agent.replay_memory.close()
  results = {name: timing.median(values) for name, values in samples.items()}
  results['fetch-ahead settings'] = fetch_ahead
  return results


def _actor_rates(capacity: int, actor_steps: int, rounds: int,
                 progress: Optional[Callable[[str], None]]):
  """Part 3: environment steps/s of the runner and of 1 and 2 actors.

  Args:
    capacity: int, the capacity of the 2-shard memory the actors write to.
    actor_steps: int, agent steps per case and round: each actor's `run`,
      or the runner's training phase (whole episodes, at least this many).
    rounds: int, interleaved rounds.
    progress: optional callable taking a str.

  Returns:
    dict mapping 'runner', '1 actor' and '2 actors' to their median steps
    per second (wall clock, all actors together), and '1 actor, own' and
    '2 actors, own' to the medians of the sums of the actors' own rates.
  """
  gin.parse_config_file(_CARTPOLE_GIN)
  # The actors write gym_lib's CartPole observations (its gin constants
  # CARTPOLE_OBSERVATION_SHAPE, _DTYPE and _STACK_SIZE: float64[4, 1], 1).
  memory = replay.ShardedPrioritizedReplayBuffer(
      num_shards=2, replay_capacity=capacity, batch_size=32,
      num_cpus_per_shard=_CPUS_PER_SHARD, update_horizon=UPDATE_HORIZON,
      observation_shape=(4, 1), observation_dtype=np.float64, stack_size=1,
      rng=0)
  store = weights_lib.create_weight_store()
  if progress:
    progress('distributed: starting 2 actors and a runner')
  actors = actor_lib.create_actors(
      memory, store, gin.config_str(), num_actors=2,
      create_environment_fn=gym_lib.create_gym_environment,
      max_steps_per_episode=500, num_cpus_per_actor=_CPUS_PER_ACTOR, seed=0)
  with tempfile.TemporaryDirectory() as base_dir:
    runner = run_experiment.Runner(
        base_dir, run_experiment.create_agent,
        create_environment_fn=gym_lib.create_gym_environment,
        training_steps=max(actor_steps, gin.query_parameter(
            'RainbowAgent.min_replay_history') + 100),
        fine_grained_print_to_console=False)
    runner._run_train_phase([])  # pylint: disable=protected-access
    runner._training_steps = actor_steps  # pylint: disable=protected-access
    ray.get([a.run.remote(actor_steps // 4) for a in actors])  # Warm up.

    def run_runner():
      # Whole episodes, at least actor_steps agent steps, training on.
      return runner._run_train_phase([])[2], None  # pylint: disable=protected-access

    def run_actors(group):
      start = time.monotonic()
      stats = ray.get([a.run.remote(actor_steps) for a in group])
      wall = time.monotonic() - start
      return (sum(s['steps'] for s in stats) / wall,
              sum(s['steps_per_second'] for s in stats))

    # Actor 1 is the greedy one (epsilon 0.4**8), as the runner nearly is.
    cases = {'runner': run_runner,
             '1 actor': lambda: run_actors(actors[1:]),
             '2 actors': lambda: run_actors(actors)}
    samples = {key: [] for key in cases}
    own = {key: [] for key in cases}
    for _, key in timing.shuffled_rounds(cases, rounds,
                                         np.random.default_rng(2), progress):
      rate, own_rate = cases[key]()
      samples[key].append(rate)
      own[key].append(own_rate)
  for handle in actors + [store]:
    ray.kill(handle)
  memory.close()
  gin.clear_config()
  results = {key: timing.median(values) for key, values in samples.items()}
  for key in ('1 actor', '2 actors'):
    results[key + ', own'] = timing.median(own[key])
  return results


def run_benchmark(capacity: int, batch_sizes: Sequence[int],
                  shard_counts: Sequence[int], rounds: int,
                  burst_seconds: float, step_rounds: int, steps: int,
                  actor_steps: int, actor_rounds: int, seed: int = 0,
                  progress: Optional[Callable[[str], None]] = None
                 ) -> Dict[str, Any]:
  """Runs the four parts on a local Ray it starts and shuts down.

  Args:
    capacity: int, total capacity of every memory (filled to it).
    batch_sizes: learner batch sizes of the sampling part.
    shard_counts: shard counts of the sampling part (1 gives the per-shard
      rates).
    rounds: int, interleaved rounds of the sampling part.
    burst_seconds: float, the duration of one of its bursts.
    step_rounds: int, interleaved rounds of the staged steps.
    steps: int, training steps per step case and round.
    actor_steps: int, agent steps per actor or runner case and round.
    actor_rounds: int, interleaved rounds of actors and runner.
    seed: int, seeds the data and the orders.
    progress: optional callable taking a str.

  Returns:
    dict with 'cycle' ({(operation, shape, batch size, memory): median
    microseconds per call}), 'bytes' (`_bytes_per_call`), 'steps' (see
    `_time_steps`), 'actors' (see `_actor_rates`) and the settings.
  """
  _start_local_ray()
  try:
    cycle, call_sizes, memories = _time_sampling(
        tuple(SHAPES), capacity, batch_sizes, shard_counts, rounds,
        burst_seconds, seed, progress)
    for (_, name), memory in memories.items():
      if name != SINGLE:
        memory.close()
    if progress:
      progress('distributed: staged steps')
    step_times = _time_steps(capacity, step_rounds, steps, seed, progress)
    memories.clear()
    actors = _actor_rates(capacity, actor_steps, actor_rounds, progress)
  finally:
    ray.shutdown()
  return {'cycle': cycle, 'bytes': call_sizes, 'steps': step_times,
          'actors': actors, 'capacity': capacity,
          'batch_sizes': tuple(batch_sizes),
          'shard_counts': tuple(shard_counts), 'rounds': rounds,
          'actor_steps': actor_steps}


class ApexRates(NamedTuple):
  """Ape-X's Atari rates (Horgan et al., 2018) and the cluster's network.

  Attributes:
    frames_per_second: environment frames per second, all actors together.
    frame_skip: frames per agent step (one transition).
    actors: the number of actors.
    batches_per_second: learner batches per second.
    batch_size: transitions per learner batch.
    network_bytes_per_second: one machine's network bandwidth (assumed).
  """
  frames_per_second: float = 50000.0
  frame_skip: int = 4
  actors: int = 360
  batches_per_second: float = 19.0
  batch_size: int = PROJECTION_BATCH
  network_bytes_per_second: float = 1.25e9  # 10 Gbit/s.


APEX_RATES = ApexRates()


def project(results: Mapping[str, Any], rates: ApexRates = APEX_RATES
           ) -> Optional[Dict[str, float]]:
  """Projects the measured one-shard rates to Ape-X's Atari rates.

  A shard is one process on one core. Its busy fraction with k shards is
  its share of the adds, (transitions/s / k) / add rate, plus its share of
  the sampling: every batch asks every shard, each for about B / k
  transitions, so a batch costs a shard about t(B / k), where t is the line
  through the measured one-shard cycle times (sample + set_priority) at the
  smallest batch size and at 512. Those are the learner's wall times, which
  include the learner's own work and two round trips: an upper bound of the
  shard's.

  Args:
    results: `run_benchmark`'s results (with one shard measured).
    rates: the target rates.

  Returns:
    dict of derived numbers (see the keys), or None if a rate is missing.
  """
  cycle, call_sizes = results['cycle'], results['bytes']
  one = shards_name(1)
  add_key = ('add', 'Atari', 1, one)
  big_key = ('cycle', 'Atari', rates.batch_size, one)
  small = min(results['batch_sizes'], default=None)
  small_key = ('cycle', 'Atari', small, one)
  if not {add_key, big_key, small_key} <= set(cycle) or not call_sizes:
    return None
  transitions = rates.frames_per_second / rates.frame_skip
  add_rate = 1e6 / cycle[add_key]
  slope = (cycle[big_key] - cycle[small_key]) / (rates.batch_size - small)
  intercept = cycle[small_key] - slope * small

  def busy(k):
    batch_us = intercept + slope * rates.batch_size / k
    return transitions / k / add_rate + rates.batches_per_second * batch_us / 1e6

  shards = 1
  while busy(shards) > 1.0 and shards < 10000:
    shards += 1
  per_actor = transitions / rates.actors
  flush_every = writer_lib.DEFAULT_FLUSH_EVERY
  add_bytes = call_sizes['add call'] / flush_every
  batch_bytes = (call_sizes['draw answer'] +
                 call_sizes['draw request'] +
                 call_sizes['set_priority request'] +
                 call_sizes['mass call'])
  return {
      'transitions per second': transitions,
      'transitions per second per actor': per_actor,
      'shard add rate': add_rate,
      'shard sample rate': 1e6 / cycle[big_key],
      'actors per shard, adding only': add_rate / per_actor,
      'shards needed': shards,
      'shard busy fraction': busy(shards),
      'shard busy fraction, 2x shards': busy(2 * shards),
      'actors per shard at that count': rates.actors / shards,
      'bytes per transition added': add_bytes,
      'add bytes per second': transitions * add_bytes,
      'bytes per batch': batch_bytes,
      'sample bytes per second': rates.batches_per_second * batch_bytes,
      'learner network share': (rates.batches_per_second * batch_bytes /
                                rates.network_bytes_per_second),
  }


# Issue 14's goals.
REQUIRED_STAGED_STEP_RATIO = 1.2  # sharded / single, at most.
REQUIRED_ACTOR_SPEEDUP = 1.5  # 2 actors / runner, at least.


def _met(condition: bool) -> str:
  return 'met' if condition else 'NOT met'


def _sampling_lines(results: Mapping[str, Any]) -> List[str]:
  cycle = results['cycle']
  names = [SINGLE] + [shards_name(n) for n in results['shard_counts']]
  rows = []
  for shape in SHAPES:
    for batch_size in results['batch_sizes'] + (PROJECTION_BATCH,):
      single = cycle.get(('cycle', shape, batch_size, SINGLE))
      if single is None:
        continue
      row = [f'{shape}, B={batch_size}']
      for name in names:
        value = cycle.get(('cycle', shape, batch_size, name))
        row.append('—' if value is None else
                   f'{1e6 / value:,.0f} ({single / value:.2f}x)')
      rows.append(row)
  return timing.markdown_table(['batches/s (x single)'] + names, rows)


def _step_lines(results: Mapping[str, Any]) -> List[str]:
  steps = results['steps']
  prefetch, per_call = steps['fetch-ahead settings']
  headers = ['learner step, ms', SINGLE, '2 shards, no fetch-ahead',
             f'2 shards, fetch-ahead ({prefetch}, {per_call} per call)',
             '2 shards, fetch-ahead, tf.numpy_function']
  single = steps[SINGLE]
  rows = [['Rainbow, apex_cartpole.gin'] + [
      f'{steps[name]:.3f} ({steps[name] / single:.2f}x)'
      for name in STEP_MEMORIES]]
  lines = timing.markdown_table(headers, rows)
  ratio = steps['fetch-ahead'] / single
  lines += ['', 'Target (issue 14): with its fetch-ahead, a learner step on '
            f'the sharded memory takes at most {REQUIRED_STAGED_STEP_RATIO}x '
            f"the single memory's: {ratio:.2f}x "
            f'({_met(ratio <= REQUIRED_STAGED_STEP_RATIO)}).']
  return lines


def _actor_lines(results: Mapping[str, Any]) -> List[str]:
  actors = results['actors']
  runner = actors['runner']
  rows = [['single-process Runner (training)', f'{runner:,.0f}', '—',
           '1.00x']]
  for key in ('1 actor', '2 actors'):
    rows.append([key, f'{actors[key]:,.0f}', f'{actors[key + ", own"]:,.0f}',
                 f'{actors[key] / runner:.2f}x'])
  lines = timing.markdown_table(
      ['CartPole-v1, rainbow_cartpole.gin', 'env steps/s (wall)',
       'sum of actors\' own rates', 'x Runner'], rows)
  speedup = actors['2 actors'] / runner
  lines += ['', f'Target (issue 14): 2 actors step at least '
            f"{REQUIRED_ACTOR_SPEEDUP}x the Runner's training steps/s: "
            f'{speedup:.2f}x ({_met(speedup >= REQUIRED_ACTOR_SPEEDUP)}).']
  return lines


def _projection_lines(results: Mapping[str, Any]) -> List[str]:
  numbers = project(results)
  if numbers is None:
    return []
  sizes = results['bytes']
  rows = [
      ['one shard: add (writer, flush_every 64, Atari frames)',
       f'{numbers["shard add rate"]:,.0f} transitions/s'],
      [f'one shard: sample + set_priority, B={PROJECTION_BATCH}, Atari',
       f'{numbers["shard sample rate"]:,.1f} batches/s'],
      ['one round trip to a shard (`mass()`)',
       f'{results["cycle"][ROUND_TRIP]:,.0f} µs'],
      ['add call (64 Atari transitions)', f'{sizes["add call"]:,} B'],
      [f'draw request (B={PROJECTION_BATCH} targets)',
       f'{sizes["draw request"]:,} B'],
      ['draw answer (slots, validity, batch, mass)',
       f'{sizes["draw answer"]:,} B'],
      ['priority update (carried by the next call)',
       f'{sizes["set_priority request"]:,} B'],
      ['mass call and answer', f'{sizes["mass call"]:,} B'],
  ]
  rates = APEX_RATES
  lines = timing.markdown_table(['per shard', 'measured'], rows)
  lines += [
      '',
      f'Projection to Ape-X (Atari, {rates.frames_per_second:,.0f} frames/s '
      f'= {numbers["transitions per second"]:,.0f} transitions/s from '
      f'{rates.actors} actors, {rates.batches_per_second:g} batches of '
      f'{rates.batch_size}/s; one core per shard; method: `project`):',
      '',
      f'- one shard adds for {numbers["actors per shard, adding only"]:,.0f} '
      f'Ape-X actors ({numbers["transitions per second per actor"]:.1f} '
      'transitions/s each) if it only adds;',
      f'- shards needed, adding and sampling: {numbers["shards needed"]} '
      f'(each {numbers["shard busy fraction"]:.0%} busy; '
      f'{numbers["shard busy fraction, 2x shards"]:.0%} with twice as many), '
      f'{numbers["actors per shard at that count"]:,.0f} actors per shard;',
      f'- network: {numbers["add bytes per second"] / 1e6:,.0f} MB/s of adds '
      f'into the shards, {numbers["sample bytes per second"] / 1e6:,.0f} MB/s'
      ' of batches into the learner '
      f'({numbers["learner network share"]:.0%} of a 10 Gbit/s link).',
  ]
  return lines


def format_section(results: Mapping[str, Any]) -> str:
  """Formats the results as a Markdown section (a `##` heading, tables)."""
  lines = [
      '## Distributed: sharded memory and actors on a local Ray',
      '',
      'Ray on this machine (loopback), each shard and actor a process of '
      'its own, sharing the cores with the learner. Learner cycles '
      '(`sample_transition_batch(B)` then `set_priority` of its indices) on '
      'the single in-process memory and on `ShardedPrioritizedReplayBuffer`, '
      f'all holding the same {common.log2_name(results["capacity"])} '
      'transitions (CartPole: float32[4], stack 1; Atari: uint8 84x84, stack '
      f'4; {UPDATE_HORIZON}-step returns). Batches per second (median of '
      f'{results["rounds"]} interleaved rounds) and their ratio to the '
      'single memory. Method: benchmarks/distributed_benchmark.py.',
      '',
  ]
  lines += _sampling_lines(results)
  lines += [
      '',
      "Staged learner step: configs/apex_cartpole.gin's learner (a "
      '`RainbowAgent` training on every step, B=128, staging on) over its '
      'sharded memory (2 shards) with the fetch-ahead the config sets '
      '(`prefetch`, `batches_per_call`) and without it (`prefetch=0`: '
      'every batch is drawn when asked for), both through the native '
      'batch queue, with the fetch-ahead through `tf.numpy_function` '
      '(`use_native_ops=False`), and over the single in-process '
      'memory; every memory holds the same '
      f'{common.log2_name(results["capacity"])} CartPole transitions. '
      'Median milliseconds per `_train_step()` (its session: the '
      "trainer's) and the ratio to the single memory.",
      '',
  ]
  lines += _step_lines(results)
  lines += [
      '',
      'Actors: environment steps per second on CartPole-v1 with '
      "configs/rainbow_cartpole.gin's network, all actors together (wall "
      'clock of one `run` each, writing to 2 shards; actor 1 alone is the '
      'greedy one), against the single-process Runner in its training phase '
      '(it trains every 4 steps); medians of '
      f'{results["actor_steps"]}-step runs, interleaved.',
      '',
  ]
  lines += _actor_lines(results)
  projection = _projection_lines(results)
  if projection:
    lines += ['', 'Per-shard rates and bytes per call (pickle protocol 5, '
              'arrays out of band):', ''] + projection
  return '\n'.join(lines) + '\n'


def format_results(results: Mapping[str, Any],
                   machine: Mapping[str, str]) -> str:
  """Formats a stand-alone document: a title, the machine, the section."""
  return common.document('Distributed benchmark', machine,
                         format_section(results))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  options = flags.FLAGS
  results = run_benchmark(
      options.capacity, [int(b) for b in options.batch_sizes],
      [int(n) for n in options.shards], options.rounds, options.burst_seconds,
      options.step_rounds, options.steps, options.actor_steps,
      options.actor_rounds, progress=timing.print_progress)
  common.write_report(format_results(results, common.describe_machine()),
                      options.output)


if __name__ == '__main__':
  define_flags()
  app.run(main)
