# coding=utf-8
"""Tests for dopamine_per.distributed.replay on a local Ray (loopback only).

One Ray (2 CPUs) serves the whole module: it takes 4-8 s to start.
"""

import contextlib
import json
import os
import pickle
import shutil
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import ray

from dopamine_per import errors
from dopamine_per.distributed import placement
from dopamine_per.distributed import replay
from dopamine_per.distributed import shard as shard_lib
from dopamine_per.distributed import sharded_checkpoint
from dopamine_per.file_io import atomic_files
from dopamine_per.replay_memory.memory import sampling
from tests.support import fixtures
from tests.support import ray_util
from tests.support import sharded_memories
from tests.support import stats_util

_memory = sharded_memories.small_memory
_write_episodes = sharded_memories.write_episodes
_as_dict = sharded_memories.as_dict
_latest = sharded_checkpoint.latest_checkpoint_iteration


def setUpModule():  # pylint: disable=invalid-name
  ray_util.start_local_ray()


def tearDownModule():  # pylint: disable=invalid-name
  ray.shutdown()


def _get(refs):
  """`ray.get`, failing after fixtures.DEADLINE_S instead of hanging."""
  return ray.get(refs, timeout=fixtures.DEADLINE_S)


def _kill(handle):
  """Kills an actor and waits until it is dead: `ray.kill` does not wait,
  and a call made meanwhile may still run."""
  ray.kill(handle)

  def dead():
    try:
      _get(handle.__ray_ready__.remote())
    except ray.exceptions.RayActorError:
      return True
    return False

  fixtures.wait_until(dead)


class RouteTargetsTest(absltest.TestCase):

  def test_routes_each_mass_to_the_shard_that_owns_it(self):
    totals = np.array([2.0, 0.0, 3.0, 0.0])  # Empty shards own nothing.
    cases = [  # (global mass, shard, mass within the shard)
        (0.0, 0, 0.0), (1.5, 0, 1.5), (2.0, 2, 0.0), (4.5, 2, 2.5),
        (5.0, 2, 3.0),  # The grand total (rounding): the last nonempty one.
    ]
    targets = np.array([target for target, _, _ in cases])
    shards, local = replay.route_targets(targets, totals)
    np.testing.assert_array_equal(shards, [shard for _, shard, _ in cases])
    np.testing.assert_allclose(local, [mass for _, _, mass in cases])


@ray.remote(num_cpus=0)
class _Bystander(object):
  """An actor the sharded memory did not start."""

  def ping(self):
    return 'pong'


class PlacementTest(absltest.TestCase):
  """`check_placeable`, without Ray: CPUs per node in, refusal out."""

  def test_refuses_only_what_the_nodes_can_never_hold(self):
    cases = [  # (num_shards, CPUs per shard, CPUs per node, refusal or None)
        (3, 1, [2], r'3 shards x 1 CPU = 3 CPUs > the Ray cluster\'s 2 CPUs'),
        (2, 1, [2], None),
        (3, 0.5, [2], None),
        (3, 0, [0], None),  # Reserving nothing fits anywhere.
        (3, 0.1, [0.3], None),  # 3 x 0.1 is 0.3 in Ray's units.
        (4, 0.1, [0.3], r'4 shards x 0.1 CPUs = 0.4 CPUs > .* 0.3 CPUs'),
        (2, 3, [2, 2, 2], r'= 6 CPUs <= the Ray cluster\'s 6 CPUs, but a '
         r'shard must fit on one node, and its nodes \(CPUs: 2, 2, 2\) hold '
         r'only 0'),
        (2, 1.5, [2, 2], None),
        (3, 1.5, [2, 2], r'4.5 CPUs > the Ray cluster\'s 4 CPUs'),
        (1, 1, [], r'1 CPU = 1 CPU > the Ray cluster\'s 0 CPUs'),
    ]
    for num_shards, cpus, nodes, refusal in cases:
      with self.subTest(num_shards=num_shards, cpus=cpus, nodes=nodes):
        if refusal is None:
          placement.check_placeable(num_shards, cpus, nodes)
        else:
          with self.assertRaisesRegex(ValueError, refusal):
            placement.check_placeable(num_shards, cpus, nodes)


class _MemoriesTestCase(parameterized.TestCase):
  """Closes the memories `_new` built at the end of each test."""

  def setUp(self):
    super().setUp()
    self.memories = []
    self.directory = fixtures.temp_dir(self)

  def tearDown(self):
    for memory in self.memories:
      memory.close()
    super().tearDown()

  def _new(self, faulty=False, **kwargs):
    """A small memory; `faulty`: of `_FaultyShard`s."""
    with (mock.patch.object(replay, '_shard_actor_class',
                            return_value=_FAULTY_SHARD) if faulty else
          contextlib.nullcontext()):
      memory = _memory(**kwargs)
    self.memories.append(memory)
    return memory


class ShardedReplayTest(_MemoriesTestCase):

  def _valid_weights(self, memory):
    """Priorities of all global slots, 0 where a slot is not sampleable.

    With stack size 1, update horizon 1 and terminal episode ends, the
    invalid slots of a full shard are the two around its cursor.
    """
    capacity = memory.shard_capacity
    weights = memory.get_priority(
        np.arange(memory.replay_capacity)).astype(np.float64)
    for k, count in enumerate(memory.shard_add_counts()):
      self.assertGreaterEqual(count, capacity)
      blocked = sampling.invalid_range(count % capacity, capacity, 1, 1)
      weights[k * capacity + blocked] = 0.0
    return weights

  @parameterized.named_parameters(
      # sample_index_batch: 160 batches of 256, over masses asked for now.
      ('index_batches', {'rng': 2024}, 1, 160),
      # The prefetch thread's path: 8 batches of 64 per call to each shard,
      # routed over the masses the previous call's answers gave.
      ('prefetched_batches', {'rng': 2025, 'batch_size': 64, 'prefetch': 2,
                              'batches_per_call': 8}, 3, 640))
  def test_sampling_follows_priorities_across_shards(self, kwargs, seed,
                                                     batches):
    # 40960 draws over 48 slots in 2 shards, chi-square at false-failure
    # rate 1e-6 (stats_util), fixed seeds. Shard 1's priorities are 3 times
    # larger, so a sampler that split the batch evenly over the shards fails
    # by far. The invalid slots next to each cursor carry mass and are
    # redrawn: the target is the valid slots' priorities, renormalized.
    memory = self._new(**kwargs)
    rs = np.random.RandomState(seed)
    for stream, scale in ((0, 1.0), (1, 3.0)):
      priorities = scale * rs.randint(0, 6, size=30) * 0.5
      _write_episodes(memory.writer(stream), stream, 30, 5, priorities)
    weights = self._valid_weights(memory)
    self.assertGreater(weights[24:].sum(), 2 * weights[:24].sum())
    samples = []
    for _ in range(batches):
      if 'prefetch' not in kwargs:
        samples.append(memory.sample_index_batch(256))
        continue
      # Each batch's transitions are those of its own indices.
      batch = _as_dict(memory, memory.sample_transition_batch())
      indices = batch['indices'].astype(np.int64)
      np.testing.assert_array_equal(batch['state'][:, 0, 0], indices // 24)
      # 30 steps into 24 slots: step s sits at slot s % 24.
      np.testing.assert_array_equal(batch['action'] % 24, indices % 24)
      samples.append(indices)
    stats_util.assert_matches_distribution(self, np.concatenate(samples),
                                           weights)

  def test_priority_updates_travel_with_the_next_draw(self):
    # 4 batches per call, one draw ready besides the one handed out: batches
    # 1-4 and 5-8 are drawn at the first get, 9-12 when batch 5 is taken.
    # The update queued in between zeroes shard 0 (which the masses of the
    # earlier answers still show): the third call applies it before its
    # descent, so batches 9-12 come from shard 1 alone, without an error.
    memory = self._new(rng=4, prefetch=1, batches_per_call=4)
    _write_episodes(memory.writer(0), 0, 24, 4, np.full(24, 4.0))
    _write_episodes(memory.writer(1), 1, 24, 4, np.full(24, 1.0))
    first = _as_dict(memory, memory.sample_transition_batch())
    self.assertTrue((first['indices'] < 24).any())  # 80% of the mass.
    prefetcher = memory._prefetcher
    fixtures.wait_until(lambda: prefetcher.ready == 7)
    memory.set_priority(np.arange(24), np.zeros(24))
    for _ in range(7):  # Batches 2-8: drawn before the update.
      memory.sample_transition_batch()
    for _ in range(4):
      batch = _as_dict(memory, memory.sample_transition_batch())
      self.assertTrue((batch['indices'] >= 24).all(), batch['indices'])
    np.testing.assert_array_equal(memory.get_priority(np.arange(24)),
                                  np.zeros(24))

  def test_queued_priority_updates_are_sent_at_the_bound(self):
    # Without draws, a shard's queue holds 1023 updates; the 1024th sends
    # them all, in order.
    memory = self._new()
    _write_episodes(memory.writer(0), 0, 10, 5, np.full(10, 2.0))
    shard = memory.shard_handles[0]
    self.assertEqual(replay._MAX_QUEUED_UPDATES, 1024)

    def seen():  # Bypasses the memory's queue (same caller: in order).
      return _get(shard.get_priority.remote(np.arange(3)))
    for update in range(1023):
      memory.set_priority(np.array([update % 3]), [10.0 + update])
    np.testing.assert_array_equal(seen(), [2.0, 2.0, 2.0])
    memory.set_priority(np.array([0]), [9999.0])
    # The last updates of slots 1 and 2: 1021 and 1022.
    np.testing.assert_array_equal(seen(), [9999.0, 1031.0, 1032.0])

  def test_transition_batch_matches_its_indices(self):
    memory = self._new(rng=3)
    _write_episodes(memory.writer(0), 0, 20, 4, np.arange(20) % 3 + 1.0)
    _write_episodes(memory.writer(1), 1, 20, 4, np.arange(20) % 2 + 2.0)
    batch = _as_dict(memory, memory.sample_transition_batch(32))
    indices = batch['indices'].astype(np.int64)
    self.assertEqual(batch['state'].shape, (32, 2, 1))
    np.testing.assert_array_equal(batch['sampling_probabilities'],
                                  memory.get_priority(indices))
    # Observation (stream, step) sits at global index shard * 24 + step.
    np.testing.assert_array_equal(batch['state'][:, 0, 0], indices // 24)
    np.testing.assert_array_equal(batch['state'][:, 1, 0], indices % 24)
    np.testing.assert_array_equal(batch['action'], indices % 24)
    np.testing.assert_array_equal(batch['next_state'][:, 1, 0],
                                  indices % 24 + 1)
    given = _as_dict(memory, memory.sample_transition_batch(
        indices=indices[::-1]))
    np.testing.assert_array_equal(given['state'], batch['state'][::-1])
    self.assertEqual(memory.get_transition_elements(5)[0].shape, (5, 2, 1))

  def test_writer_routing_and_contiguous_episodes(self):
    memory = self._new(num_shards=2, replay_capacity=200)
    writers = [memory.writer(stream) for stream in range(4)]
    self.assertEqual([w.shard for w in writers], [0, 1, 0, 1])
    # Streams 0 and 2 share shard 0 and alternate mid-episode (episodes of
    # 6, batches of 4): each episode must still land in consecutive slots.
    for step in range(18):
      for stream, writer in enumerate(writers):
        writer.add(np.array([stream, step], np.float32), step, 1.0,
                   int(step % 6 == 5), 1.0)
    for writer in writers:
      writer.flush()
    self.assertEqual(memory.shard_add_counts(), [36, 36])
    capacity = memory.shard_capacity
    for shard in (0, 1):
      valid = np.arange(35)  # Slot 35, before the cursor, is not valid.
      batch = _as_dict(memory, memory.sample_transition_batch(
          indices=shard * capacity + valid))
      streams = batch['state'][:, 0, 0]
      steps = batch['state'][:, 1, 0]
      self.assertEqual(set(streams.tolist()), {shard, shard + 2})
      # Episodes end at steps 5, 11 and 17; the shard adds a stream's
      # episode when it ends, so the streams alternate by whole episodes.
      for episode in range(6):
        where = np.arange(episode * 6, min(episode * 6 + 6, 35))
        stream = shard if episode % 2 == 0 else shard + 2
        np.testing.assert_array_equal(streams[where], stream)
        np.testing.assert_array_equal(
            steps[where], episode // 2 * 6 + np.arange(len(where)))

  def test_discarded_unfinished_episode_is_not_joined_to_the_next(self):
    memory = self._new(num_shards=2, replay_capacity=200)
    writer = memory.writer(1)
    for step in range(3):  # An episode interrupted after 3 steps.
      writer.add(np.array([1, step], np.float32), 0, 1.0, 0, 1.0)
    writer.flush()
    self.assertEqual(writer.discard_unfinished(), 3)
    for step in range(4):  # The next episode, from its start.
      writer.add(np.array([2, step], np.float32), 0, 1.0, int(step == 3), 1.0)
    writer.flush()
    self.assertEqual(memory.shard_add_counts(), [0, 4])
    batch = _as_dict(memory, memory.sample_transition_batch(
        indices=memory.shard_capacity + np.arange(3)))
    np.testing.assert_array_equal(batch['state'][:, 0, 0], 2)
    np.testing.assert_array_equal(batch['state'][:, 1, 0], [0, 1, 2])

  def test_pickled_writer_writes_from_a_ray_task(self):
    memory = self._new()
    writer = memory.writer(3)
    self.assertEqual(writer.shard, 1)

    @ray.remote(num_cpus=0)
    def act(writer):
      _write_episodes(writer, 3, 10, 5)
      return writer.stream_id

    self.assertEqual(_get(act.remote(writer)), 3)
    self.assertEqual(int(memory.add_count), 10)
    batch = _as_dict(memory, memory.sample_transition_batch(
        indices=np.arange(24, 33)))
    np.testing.assert_array_equal(batch['state'][:, 0, 0], 3)
    np.testing.assert_array_equal(batch['action'], np.arange(9))
    writer.add(np.zeros(2, np.float32), 0, 0.0, 0, 1.0)
    with self.assertRaisesRegex(ValueError, 'flush'):
      pickle.dumps(writer)

  def test_writer_reports_a_refused_transition(self):
    memory = self._new()
    writer = memory.writer(0)
    writer.add(np.zeros(2, np.float32), 0, 1.0, 0, 1.0)
    writer.add(np.zeros(3, np.float32), 0, 1.0, 1, 1.0)  # Wrong shape.
    with self.assertRaisesRegex(ValueError, 'stream 0: transition 1'):
      writer.flush()
    self.assertEqual(int(memory.add_count), 0)

  def test_bad_priority_batch_changes_no_shard(self):
    memory = self._new()
    _write_episodes(memory.writer(0), 0, 10, 5, np.full(10, 2.0))
    _write_episodes(memory.writer(1), 1, 10, 5, np.full(10, 3.0))
    everything = np.arange(48)
    before = memory.get_priority(everything)
    good = np.array([1, 30])  # One index on each shard.
    cases = [
        (np.array([1, 30, 48]), [1.0, 1.0, 1.0], errors.InvalidIndexError,
         'indices must be in \\[0, 48\\). Got: 48'),
        (np.array([1.0, 30.0]), [1.0, 1.0], errors.InvalidIndexTypeError,
         'indices must be integers'),
        (good, [1.0, np.nan], ValueError, 'priorities .*nan'),
        (good, [1.0, 1.0, 1.0], ValueError, 'do not match'),
    ]
    for indices, priorities, error, message in cases:
      with self.subTest(message=message):
        with self.assertRaisesRegex(error, message):
          memory.set_priority(indices, priorities)
        np.testing.assert_array_equal(memory.get_priority(everything),
                                      before)
    with self.assertRaisesRegex(ValueError, 'must be in'):
      memory.get_priority(np.array([0, 99]))
    memory.set_priority(good, [5.0, 6.0])
    np.testing.assert_array_equal(memory.get_priority(good), [5.0, 6.0])
    self.assertEqual(memory.total_priority(),
                     float(before.sum()) - 2.0 - 3.0 + 11.0)

  def test_save_load_round_trip_of_all_shards(self):
    memory = self._new(rng=7)
    _write_episodes(memory.writer(0), 0, 12, 4, np.arange(12) + 1.0)
    _write_episodes(memory.writer(1), 1, 16, 4, np.arange(16) + 20.0)
    everything = np.arange(48)
    saved_priorities = memory.get_priority(everything)
    directory = self.directory
    memory.save(directory, 3)
    self.assertCountEqual(os.listdir(directory), [
        'shard_0', 'shard_1', 'dopamine_per_shards_ckpt.3'])
    record = sharded_checkpoint.read_record(directory, 3)
    self.assertEqual((record.num_shards, record.shard_capacity), (2, 24))
    self.assertEqual(_latest(directory), 3)
    restored = self._new(rng=8)
    restored.load(directory, 3)
    np.testing.assert_array_equal(restored.get_priority(everything),
                                  saved_priorities)
    self.assertEqual(int(restored.add_count), 28)
    batch = restored.sample_transition_batch(indices=np.arange(24, 39))
    original = memory.sample_transition_batch(indices=np.arange(24, 39))
    for restored_value, value in zip(batch, original):
      np.testing.assert_array_equal(restored_value, value)
    # A corrupt file on shard 1 leaves every shard as it was.
    memory.set_priority(np.array([0, 24]), [9.0, 9.0])
    changed = memory.get_priority(everything)
    shard_1 = shard_lib.shard_directory(directory, 1)
    for name in os.listdir(shard_1):
      if name.startswith('sum_tree'):
        with open(os.path.join(shard_1, name), 'wb') as corrupt:
          corrupt.write(b'not a gzip file')
    with self.assertRaisesRegex(ValueError, 'shard 1: .*sum_tree'):
      memory.load(directory, 3)
    np.testing.assert_array_equal(memory.get_priority(everything), changed)

  def test_save_holds_the_priorities_queued_before_it(self):
    memory = self._new()
    _write_episodes(memory.writer(0), 0, 12, 4, np.full(12, 2.0))
    memory.set_priority(np.array([1, 5]), [7.0, 8.0])  # Queued, not sent.
    memory.save(self.directory, 0)
    restored = self._new()
    restored.load(self.directory, 0)
    np.testing.assert_array_equal(
        restored.get_priority(np.array([0, 1, 5])), [2.0, 7.0, 8.0])

  def test_shards_do_not_import_tensorflow(self):
    memory = self._new()
    self.assertEqual(_get([shard.has_tensorflow.remote()
                           for shard in memory.shard_handles]),
                     [False, False])

  def test_counters_and_empty_memory(self):
    memory = self._new()
    self.assertTrue(memory.is_empty())
    self.assertEqual(memory.total_priority(), 0.0)
    self.assertEqual(memory.shard_capacity, 24)
    with self.assertRaisesRegex(RuntimeError, 'Cannot sample'):
      memory.sample_index_batch(4)
    memory.add(np.zeros(2, np.float32), 0, 1.0, 0, 2.0)
    memory.add(np.zeros(2, np.float32), 1, 1.0, 0, None)
    memory.add(np.zeros(2, np.float32), 1, 1.0, 1, priority=None)
    self.assertEqual(int(memory.add_count), 3)
    self.assertFalse(memory.is_empty())
    self.assertEqual(memory.total_priority(), 6.0)  # None: the maximum, 2.
    indices = memory.sample_index_batch(16)
    self.assertTrue(np.all(indices < 2), indices)  # Slot 2 has no next state.

  def test_bad_constructor_arguments_start_no_shard(self):
    cases = [  # (arguments, refusal)
        ({'num_shards': 0}, 'num_shards'),
        ({'num_shards': 4, 'replay_capacity': 3}, 'at least num_shards'),
        ({'replay_capacity': 4, 'update_horizon': 3}, 'update_horizon'),
        ({'prefetch': -1}, 'prefetch'),
    ] + [({'num_cpus_per_shard': value}, 'num_cpus_per_shard must be a real')
         for value in (-1, float('nan'), '1', True)]
    for kwargs, refusal in cases:
      with self.subTest(**kwargs):
        with self.assertRaisesRegex(ValueError, refusal):
          _memory(**kwargs)

  def test_shards_the_cluster_can_never_place_fail_at_once(self):
    # 3 shards x 1 CPU on the module's 2-CPU Ray: refused before any actor
    # starts, where the shards used to wait start_timeout_s (120 s) for
    # CPUs that could never come. An actor started before is untouched.
    bystander = _Bystander.remote()
    self.addCleanup(_kill, bystander)
    self.assertEqual(_get(bystander.ping.remote()), 'pong')
    with mock.patch.object(replay, '_shard_actor_class',
                           wraps=replay._shard_actor_class) as actor_class:
      with self.assertRaisesRegex(
          ValueError, r"num_cpus_per_shard=1: .*never be placed: 3 shards x "
          r"1 CPU = 3 CPUs > the Ray cluster's 2 CPUs"):
        _memory(num_shards=3, num_cpus_per_shard=1)
    # No shard actor was even created: nothing to wait for.
    actor_class.assert_not_called()
    self.assertEqual(_get(bystander.ping.remote()), 'pong')

  def test_three_shards_of_half_a_cpu_start_on_two_cpus(self):
    memory = self._new(num_shards=3, replay_capacity=48,
                       num_cpus_per_shard=0.5)
    self.assertEqual(memory.shard_add_counts(), [0, 0, 0])

  def test_shards_waiting_for_cpus_in_use_time_out(self):
    # The cluster has the CPUs, but another actor holds them: the shards
    # wait (the actor may end) until start_timeout_s, and only the shards
    # are killed.
    holder = _Bystander.options(num_cpus=2).remote()
    self.addCleanup(_kill, holder)
    self.assertEqual(_get(holder.ping.remote()), 'pong')
    with self.assertRaisesRegex(RuntimeError,
                                r'shards \[0, 1\] did not start within 2'):
      _memory(num_cpus_per_shard=1, start_timeout_s=2)
    self.assertEqual(_get(holder.ping.remote()), 'pong')

  def test_dead_shard_is_named(self):
    memory = self._new()
    _write_episodes(memory.writer(1), 1, 10, 5)
    _kill(memory.shard_handles[1])
    with self.assertRaisesRegex(shard_lib.ShardError, 'replay shard 1 is dead'):
      memory.sample_index_batch(4)
    with self.assertRaisesRegex(RuntimeError, 'replay shard 1 is dead'):
      memory.get_priority(np.array([30]))


class _FaultyShard(shard_lib.ReplayShard):
  """A shard whose checkpoint steps fail when a test says so."""

  def __init__(self, *args):
    super().__init__(*args)
    self._faults = {}

  def inject(self, method, fault, iteration=None):
    """Makes `method` ('prepare_save' or 'commit_save') fail from now on.

    `fault`: 'raise' (an OSError, before the method acts), 'exit' (the
    process dies once the method has acted, before it answers) or None (no
    more failures). `iteration`: fail only for this checkpoint (None: any).
    """
    self._faults[method] = (fault, iteration)

  def add_unsaveable_attribute(self):
    """Gives the memory a public attribute that its `save` refuses."""
    self.memory.unsaveable = object()

  def _run(self, method, checkpoint_dir, iteration_number, *args):
    fault, iteration = self._faults.get(method, (None, None))
    if iteration not in (None, iteration_number):
      fault = None
    if fault == 'raise':
      raise OSError('shard {}: simulated failure of {}'.format(self.shard,
                                                                method))
    result = getattr(super(), method)(checkpoint_dir, iteration_number, *args)
    if fault == 'exit':
      os._exit(1)  # pylint: disable=protected-access
    return result

  def prepare_save(self, *args):
    return self._run('prepare_save', *args)

  def commit_save(self, *args):
    return self._run('commit_save', *args)


_FAULTY_SHARD = ray.remote(_FaultyShard)


def _contents(memory):
  """What a sharded memory holds: each shard's add_count, every priority."""
  return (memory.shard_add_counts(),
          memory.get_priority(np.arange(memory.replay_capacity)).tolist())


def _fill(memory, steps, first_priority):
  """Writes `steps` transitions into each shard, with distinct priorities."""
  for k in range(memory.num_shards):
    _write_episodes(memory.writer(k), k, steps, 4,
                    first_priority + 100.0 * k + np.arange(steps))


def _files_of(directory, iteration):
  """Checkpoint `iteration`'s 'shard_k/name's, visible or staged, sorted."""
  names = []
  for shard in sorted(os.listdir(directory)):
    if shard.startswith('shard_'):
      names += ['{}/{}'.format(shard, name)
                for name in os.listdir(os.path.join(directory, shard))
                if '_ckpt.{}.'.format(iteration) in name]
  return sorted(names)


def _record_files(directory, iteration, staged=False):
  """`_files_of` what checkpoint `iteration`'s record lists (or staged)."""
  record = sharded_checkpoint.read_record(directory, iteration)
  return sorted('shard_{}/{}'.format(k, entry.staged if staged else
                                     entry.target)
                for k, part in enumerate(record.shards)
                for entry in part.entries)


class ShardedCheckpointTest(_MemoriesTestCase):
  """A sharded save is all or nothing; a load checks the shape first."""

  def _new(self, faulty=False, **kwargs):
    kwargs.setdefault('num_cpus_per_shard', 0)
    return super()._new(faulty, **kwargs)

  def _loaded(self, iteration, directory=None, **kwargs):
    """The contents of checkpoint `iteration`, loaded by a new memory."""
    memory = self._new(**kwargs)
    memory.load(directory or self.directory, iteration)
    contents = _contents(memory)
    memory.close()
    return contents

  def test_checkpoint_of_another_shape_is_refused_before_any_shard_changes(
      self):
    four = self._new(num_shards=4, replay_capacity=48)  # 12 slots each.
    _fill(four, 10, 1.0)
    four.save(self.directory, 0)
    saved = _contents(four)
    four.close()
    record = sharded_checkpoint.record_path(self.directory, 0)
    cases = [
        # (num_shards, replay_capacity, refusal). Shards of the same
        # capacity, 2 of the 4: each shard would load, half the
        # transitions lost.
        (2, 24, r'checkpoint 0 in .* was saved by a sharded memory of 4 '
                r'shards of 12 slots; this memory has 2 shards of 12 slots'),
        (2, 48, r'4 shards of 12 slots; this memory has 2 shards of 24 '
                r'slots'),
        (4, 64, r'4 shards of 12 slots; this memory has 4 shards of 16 '
                r'slots'),
    ]

    def refused_before_any_shard_call(memory, error, message):
      # The checkpointer reaches the shards through `_call_each` alone.
      with mock.patch.object(
          memory._checkpointer, '_call_each',
          side_effect=AssertionError('a shard was called')) as call_each:
        with self.assertRaisesRegex(error, message):
          memory.load(self.directory, 0)
      call_each.assert_not_called()

    for num_shards, replay_capacity, refusal in cases:
      with self.subTest(num_shards=num_shards,
                        replay_capacity=replay_capacity):
        memory = self._new(num_shards=num_shards,
                           replay_capacity=replay_capacity)
        _fill(memory, 6, 1000.0)
        before = _contents(memory)
        refused_before_any_shard_call(memory, atomic_files.CheckpointError,
                                      refusal)
        self.assertEqual(_contents(memory), before)
        # Without its record (written before records existed), 4 shard
        # directories hold the checkpoint: refused too.
        with open(record, 'rb') as f:
          record_bytes = f.read()
        os.remove(record)
        if num_shards == 2:  # The shard directories tell.
          refused_before_any_shard_call(
              memory, atomic_files.CheckpointError,
              r'no record of its shape .* \[.shard_0., .shard_1., '
              r'.shard_2., .shard_3.\] hold it; this memory has 2 shards')
        else:  # The shards' own check refuses the capacity.
          with self.assertRaisesRegex(ValueError, 'shard 0: .*shape'):
            memory.load(self.directory, 0)
        self.assertEqual(_contents(memory), before)
        # A malformed record.
        with open(record, 'wb') as f:
          f.write(b'{"format": "dopamine_per.sharded_checkpoint/1"}')
        refused_before_any_shard_call(memory,
                                      atomic_files.CorruptCheckpointError,
                                      'is malformed: iteration is None')
        self.assertEqual(_contents(memory), before)
        with open(record, 'wb') as f:
          f.write(record_bytes)
        memory.close()
    self.assertEqual(self._loaded(0, num_shards=4, replay_capacity=48),
                     saved)
    os.remove(record)  # A legacy checkpoint of the same shape loads.
    self.assertEqual(self._loaded(0, num_shards=4, replay_capacity=48),
                     saved)

  def test_failed_save_keeps_the_previous_checkpoints(self):
    # A shard whose memory refuses to save, a shard that dies once it
    # staged its files, a shard killed before the save, a full disk when the
    # record is written: checkpoint 2 never appears, nothing of it is left
    # in sight, and checkpoint 1 (which saving 2 would prune:
    # checkpoint_duration=1; saved again, and failing alike) loads on every
    # shard as first saved.
    for fault in ('raise', 'exit', 'dead', 'record'):
      with self.subTest(fault=fault):
        directory = self.directory = fixtures.temp_dir(self)
        memory = self._new(faulty=True, checkpoint_duration=1)
        _fill(memory, 8, 1.0)
        memory.save(directory, 1)
        saved = _contents(memory)
        _fill(memory, 4, 50.0)
        shard_1 = memory.shard_handles[1]
        # In this process, atomic_files.write_json writes the record only.
        record_writer = atomic_files.write_json
        error, message = shard_lib.ShardError, 'replay shard 1 is dead'
        if fault == 'raise':  # The memory's save refuses it (TypeError).
          _get(shard_1.add_unsaveable_attribute.remote())
          error, message = TypeError, "'unsaveable'"
        elif fault == 'exit':
          _get(shard_1.inject.remote('prepare_save', 'exit'))
        elif fault == 'dead':
          _kill(shard_1)
        else:
          record_writer = mock.Mock(side_effect=OSError(28, 'No space left'))
          error, message = OSError, 'No space left'
        with mock.patch.object(atomic_files, 'write_json', record_writer):
          with self.assertRaisesRegex(error, message):
            memory.save(directory, 2)
          if fault != 'exit':  # Saving checkpoint 1 again fails alike.
            with self.assertRaisesRegex(error, message):
              memory.save(directory, 1)
        memory.close()
        staged = _files_of(directory, 2)
        self.assertEqual([name for name in staged
                          if not name.split('/')[1].startswith('.')], [])
        # What the shards staged is deleted, but by a shard that died
        # before it said what it staged.
        self.assertEqual([name for name in staged
                          if not name.startswith('shard_1/')], [])
        if fault != 'exit':
          self.assertEqual(staged, [])
        self.assertEqual(_latest(directory), 1)
        restored = self._new(checkpoint_duration=1)
        restored.load(directory, 1)
        self.assertEqual(_contents(restored), saved)
        # The next save deletes what the dead shard left.
        restored.save(directory, 3)
        self.assertEqual(_files_of(directory, 2), [])
        restored.close()

  @parameterized.named_parameters(('every_shard', [0, 1]), ('shard_1', [1]))
  def test_save_interrupted_after_its_record_is_that_checkpoint(self, failing):
    memory = self._new(faulty=True, checkpoint_duration=1)
    _fill(memory, 8, 1.0)
    memory.save(self.directory, 0)
    _fill(memory, 4, 30.0)
    memory.save(self.directory, 1)  # Prunes checkpoint 0 and its record.
    self.assertEqual(_files_of(self.directory, 0), [])
    self.assertIsNone(sharded_checkpoint.read_record(self.directory, 0))
    saved_1 = _contents(memory)
    _fill(memory, 4, 60.0)
    saved_2 = _contents(memory)
    # The record of checkpoint 2 is written, then the `failing` shards fail
    # to commit their part (as if the process had died there).
    for k in failing:
      _get(memory.shard_handles[k].inject.remote('commit_save', 'raise', 2))
    with self.assertRaisesRegex(OSError, 'simulated failure of commit_save'):
      memory.save(self.directory, 2)
    self.assertEqual(_latest(self.directory), 2)
    # Nothing was pruned, not even by a shard that committed: checkpoint 1
    # is whole.
    self.assertIn('shard_0/dopamine_per_state_ckpt.1.gz',
                  _files_of(self.directory, 1))
    self.assertEqual(self._loaded(1), saved_1)
    # Loading checkpoint 2 completes the shards' commits.
    self.assertEqual(self._loaded(2), saved_2)
    committed = _files_of(self.directory, 2)
    self.assertEqual(committed, _record_files(self.directory, 2))
    for k in range(2):
      self.assertIn('shard_{}/dopamine_per_state_ckpt.2.gz'.format(k),
                    committed)

  def test_record_in_place_when_its_write_fails_is_the_checkpoint(self):
    # Writing the record fails once it is in place (the directory's fsync
    # fails, or an interrupt comes): it is the commit point all the same,
    # so nothing the shards staged is deleted, and the checkpoint loads.
    memory = self._new()
    _fill(memory, 8, 1.0)
    saved = _contents(memory)
    replace = atomic_files.replace
    for fault in (OSError(5, 'Input/output error'), KeyboardInterrupt()):
      with self.subTest(fault=type(fault).__name__):
        directory = fixtures.temp_dir(self)

        def replace_then_fail(source, destination, fault=fault):
          replace(source, destination)
          raise fault

        # In this process, only the record's write replaces a file.
        with mock.patch.object(atomic_files, 'replace',
                               side_effect=replace_then_fail):
          with self.assertRaises(type(fault)):
            memory.save(directory, 1)
        self.assertEqual(_latest(directory), 1)
        self.assertEqual(_files_of(directory, 1),
                         _record_files(directory, 1, staged=True))
        self.assertEqual(self._loaded(1, directory), saved)
        self.assertEqual(_files_of(directory, 1), _record_files(directory, 1))

  def test_save_after_a_failed_commit_completes_that_commit_first(self):
    # Shard 1 fails to commit checkpoint 2 after its record is written.
    # The shards' clean-up in the next save would delete what shard 1
    # staged, and then the record of 2: the next save first completes the
    # commit, and stops before staging anything while that fails.
    memory = self._new(faulty=True)  # checkpoint_duration 4: none pruned.
    _fill(memory, 8, 1.0)
    memory.save(self.directory, 1)
    _fill(memory, 4, 30.0)
    saved_2 = _contents(memory)
    shard_1 = memory.shard_handles[1]
    _get(shard_1.inject.remote('commit_save', 'raise', 2))
    with self.assertRaisesRegex(OSError, 'shard 1: simulated failure'):
      memory.save(self.directory, 2)
    _fill(memory, 4, 60.0)
    saved_3 = _contents(memory)
    with self.assertRaisesRegex(OSError, 'shard 1: simulated failure'):
      memory.save(self.directory, 3)
    self.assertEqual(_files_of(self.directory, 3), [])
    self.assertEqual(_latest(self.directory), 2)
    _get(shard_1.inject.remote('commit_save', None))
    memory.save(self.directory, 3)
    self.assertEqual(_files_of(self.directory, 2),
                     _record_files(self.directory, 2))
    self.assertEqual(self._loaded(2), saved_2)
    self.assertEqual(self._loaded(3), saved_3)

  def test_checkpoint_directory_moves_as_a_whole(self):
    # The trainer saves into a staging directory and then moves the files:
    # the record names files relative to the shards' directories.
    memory = self._new()
    _fill(memory, 8, 1.0)
    staging = os.path.join(self.directory, 'staging')
    os.mkdir(staging)
    memory.save(staging, 4)
    final = os.path.join(self.directory, 'final')
    shutil.move(staging, final)
    with open(sharded_checkpoint.record_path(final, 4), 'rb') as f:
      self.assertNotIn(self.directory, f.read().decode('utf-8'))
    self.assertEqual(self._loaded(4, final), _contents(memory))


class ShardedRecordTest(absltest.TestCase):
  """Reading a sharded checkpoint's record, without Ray."""

  def _write(self, directory, content):
    path = sharded_checkpoint.record_path(directory, 5)
    with open(path, 'wb') as f:
      f.write(content)

  def test_refuses_what_is_not_a_record_of_that_checkpoint(self):
    shard = {'format': 'dopamine_per.journal/1',
             'files': [['a_ckpt.5.gz', '.a_ckpt.5.gz.abcd1234.tmp', 3,
                        'f' * 64]]}
    good = {'format': sharded_checkpoint.RECORD_FORMAT, 'iteration': 5,
            'num_shards': 1, 'shard_capacity': 10, 'shards': [shard]}
    cases = [  # (content, message)
        (b'not json', 'unusable'),
        (b'[' * 100000 + b']' * 100000, 'unusable'),
        (b'[1, 2]', 'not a dopamine_per.sharded_checkpoint/1 record'),
        (dict(good, num_shards=0), 'num_shards is 0, not an int >= 1'),
        (dict(good, num_shards=True), 'num_shards is True'),
        (dict(good, shard_capacity='10'), "shard_capacity is '10'"),
        (dict(good, num_shards=2), 'not a list of num_shards \\(2\\)'),
        (dict(good, iteration=4), 'it is the record of checkpoint 4'),
        (dict(good, shards=[dict(shard, files=[[
            '../a_ckpt.5.gz', '../.a_ckpt.5.gz.abcd1234.tmp', 3, 'f' * 64]])]),
         r'\(shard 0\) is malformed: .*not a path inside'),
    ]
    directory = fixtures.temp_dir(self)
    self._write(directory, json.dumps(good).encode('utf-8'))
    record = sharded_checkpoint.read_record(directory, 5)
    self.assertEqual((record.num_shards, record.shard_capacity), (1, 10))
    self.assertEqual(record.shards[0].entries[0].target, 'a_ckpt.5.gz')
    for content, message in cases:
      with self.subTest(message=message):
        if isinstance(content, dict):
          content = json.dumps(content).encode('utf-8')
        self._write(directory, content)
        with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                    message):
          sharded_checkpoint.read_record(directory, 5)
    os.remove(sharded_checkpoint.record_path(directory, 5))
    os.mkdir(sharded_checkpoint.record_path(directory, 5))
    with self.assertRaisesRegex(atomic_files.CheckpointError,
                                'not a regular file|directory'):
      sharded_checkpoint.read_record(directory, 5)
    self.assertIsNone(sharded_checkpoint.read_record(directory, 6))
    self.assertEqual(_latest(directory), 5)


if __name__ == '__main__':
  absltest.main()
