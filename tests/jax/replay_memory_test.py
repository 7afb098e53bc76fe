"""dopamine_per.jax.replay_memory samples what Dopamine JAX's memory samples.

Each case drives Dopamine JAX 4.1.2's memory (installed as dopamine-rl) and
ours with the same steps, seeds and calls, and compares every batch field,
dtype, key and probability bit for bit: uniform and prioritized draws with
priority updates, n-step returns, terminations and truncations, across
evictions, frames raw and compressed, and episodes short enough that the
frame ring must grow.
"""

import json
import os
import subprocess
import sys
import threading
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
from dopamine.jax.replay_memory import accumulator as their_accumulator
from dopamine.jax.replay_memory import elements as their_elements
from dopamine.jax.replay_memory import replay_buffer as their_buffer
from dopamine.jax.replay_memory import samplers as their_samplers
from dopamine.jax.replay_memory import sum_tree as their_sum_tree
import msgpack
import numpy as np

from dopamine_per import errors
from dopamine_per.file_io import atomic_files
from dopamine_per.jax.replay_memory import accumulator
from dopamine_per.jax.replay_memory import elements
from dopamine_per.jax.replay_memory import replay_buffer
from dopamine_per.jax.replay_memory import replay_checkpoint
from dopamine_per.jax.replay_memory import samplers
from dopamine_per.jax.replay_memory import sum_tree
from tests.support import fixtures

_FIELDS = ('state', 'action', 'reward', 'next_state', 'is_terminal',
           'episode_end')
_OURS = (replay_buffer, samplers, accumulator, elements)
_THEIRS = (their_buffer, their_samplers, their_accumulator, their_elements)


def _memory(modules, capacity, stack, horizon, prioritized, compress):
  buffers, sampler_module, accumulators, _ = modules
  steps = accumulators.TransitionAccumulator(
      stack_size=stack, update_horizon=horizon, gamma=0.9)
  if prioritized:
    sampler = sampler_module.PrioritizedSamplingDistribution(
        seed=7, max_capacity=capacity)
  else:
    sampler = sampler_module.UniformSamplingDistribution(seed=7)
  return buffers.ReplayBuffer(steps, sampler, batch_size=6,
                              max_capacity=capacity, compress=compress)


def _assert_batches_equal(test, theirs, ours):
  for name in _FIELDS:
    mine, reference = getattr(ours, name), getattr(theirs, name)
    np.testing.assert_array_equal(mine, reference, err_msg=name)
    test.assertEqual(np.asarray(mine).dtype, np.asarray(reference).dtype,
                     name)
    test.assertEqual(np.shape(mine), np.shape(reference), name)


class SameBatchesTest(parameterized.TestCase):

  @parameterized.product(
      prioritized=(False, True), compress=(False, True),
      shape=((50, 4, 3, 0.05), (37, 1, 1, 0.05), (20, 2, 5, 0.05),
             (30, 4, 3, 0.45)))
  def test_seeded_batches_equal_dopamines(self, prioritized, compress,
                                          shape):
    # (capacity, stack, horizon, episode end probability): the last makes
    # episodes of about two steps, so elements span more steps than the
    # ring first holds.
    capacity, stack, horizon, ends = shape
    theirs = _memory(_THEIRS, capacity, stack, horizon, prioritized, compress)
    ours = _memory(_OURS, capacity, stack, horizon, prioritized, compress)
    rng = np.random.default_rng(capacity + stack)
    for t in range(400):
      observation = rng.integers(0, 255, (3, 2)).astype(np.uint8)
      terminal = bool(rng.random() < ends)
      episode_end = terminal or bool(rng.random() < ends / 2)
      step = (observation, int(rng.integers(4)), float(rng.normal()),
              terminal, episode_end)
      kwargs = {}
      if prioritized:
        tree = theirs._sampling_distribution._sum_tree  # As agents read it.
        kwargs['priority'] = (float(rng.random()) if rng.random() < 0.5 else
                              tree.max_recorded_priority)
        self.assertEqual(
            ours._sampling_distribution._sum_tree.max_recorded_priority,
            tree.max_recorded_priority)
      theirs.add(their_elements.TransitionElement(*step), **kwargs)
      ours.add(elements.TransitionElement(*step), **kwargs)
      self.assertEqual(ours.add_count, theirs.add_count)
      if theirs.add_count and t % 3 == 0:
        reference, their_metadata = theirs.sample(with_sample_metadata=True)
        batch, metadata = ours.sample(with_sample_metadata=True)
        np.testing.assert_array_equal(metadata.keys, their_metadata.keys)
        self.assertEqual(metadata.keys.dtype, their_metadata.keys.dtype)
        _assert_batches_equal(self, reference, batch)
        if prioritized:
          np.testing.assert_array_equal(metadata.probabilities,
                                        their_metadata.probabilities)
          # Positive: zeros make Dopamine's delta-updated root drift below
          # 0 (and ours with it, bit for bit), which its draw refuses.
          priorities = rng.random(len(metadata.keys)) + 0.01
          theirs.update(their_metadata.keys, priorities=priorities)
          ours.update(metadata.keys, priorities=priorities)
    self.assertGreater(theirs.add_count, capacity)  # Evictions happened.
    self.assertEqual(list(ours._memory.keys()), list(theirs._memory.keys()))

  @parameterized.parameters(False, True)
  def test_batches_split_between_two_threads_equal_dopamines(self, compress):
    # 32 stacks of 4 frames of 40x40: enough that the native sampler fills
    # half of the batch on its helper thread (helper_thread.h).
    theirs = _memory(_THEIRS, 300, 4, 3, True, compress)
    ours = _memory(_OURS, 300, 4, 3, True, compress)
    rng = np.random.default_rng(5)
    for t in range(400):
      terminal = bool(rng.random() < 0.05)
      step = ((rng.integers(0, 4, (40, 40)) * 50).astype(np.uint8), t % 3,
              1.0, terminal, terminal)
      theirs.add(their_elements.TransitionElement(*step), priority=1.0)
      ours.add(elements.TransitionElement(*step), priority=1.0)
      if t % 50 == 49:
        reference, their_metadata = theirs.sample(32,
                                                  with_sample_metadata=True)
        batch, metadata = ours.sample(32, with_sample_metadata=True)
        np.testing.assert_array_equal(metadata.keys, their_metadata.keys)
        _assert_batches_equal(self, reference, batch)

  def test_stored_elements_read_as_dopamines(self):
    theirs = _memory(_THEIRS, 12, 4, 3, False, False)
    ours = _memory(_OURS, 12, 4, 3, False, True)
    for t in range(20):
      step = (np.full((2, 2), t, np.uint8), t, 1.0, t % 9 == 8, False)
      theirs.add(their_elements.TransitionElement(*step))
      ours.add(elements.TransitionElement(*step))
    self.assertLen(ours._memory, 12)
    for key in theirs._memory:
      _assert_batches_equal(self, theirs._memory[key], ours._memory[key])
    with self.assertRaises(KeyError):
      ours._memory[0]  # pylint: disable=pointless-statement


class AccumulatorTest(absltest.TestCase):

  def test_elements_equal_dopamines(self):
    rng = np.random.default_rng(5)
    theirs = their_accumulator.TransitionAccumulator(4, 3, 0.5)
    ours = accumulator.TransitionAccumulator(4, 3, 0.5)
    produced = 0
    for t in range(300):
      terminal = bool(rng.random() < 0.1)
      step = (rng.random((2,)), t, float(rng.normal()), terminal,
              terminal or bool(rng.random() < 0.05))
      reference = list(theirs.accumulate(
          their_elements.TransitionElement(*step)))
      mine = list(ours.accumulate(elements.TransitionElement(*step)))
      self.assertLen(mine, len(reference))
      for theirs_element, element in zip(reference, mine):
        _assert_batches_equal(self, theirs_element, element)
      produced += len(mine)
    self.assertGreater(produced, 200)

  def test_bad_sizes_are_refused_as_dopamine_asserts(self):
    for stack, horizon in ((0, 1), (1, 0)):
      with self.assertRaises(AssertionError):
        accumulator.TransitionAccumulator(stack, horizon, 0.9)


class SumTreeTest(absltest.TestCase):

  def test_sums_and_descents_equal_dopamines(self):
    rng = np.random.default_rng(3)
    theirs, ours = their_sum_tree.SumTree(300), sum_tree.SumTree(300)
    for _ in range(50):
      leaves = rng.integers(0, 300, 7)
      values = rng.random(7) * 10
      theirs.set(leaves, values)
      ours.set(leaves, values)
      np.testing.assert_array_equal(ours._nodes, theirs._nodes)
      targets = rng.uniform(0, theirs.root, 20)
      np.testing.assert_array_equal(ours.query(targets),
                                    theirs.query(targets))
    self.assertEqual(ours.max_recorded_priority, theirs.max_recorded_priority)

  def test_bad_values_are_refused_and_nothing_written(self):
    tree = sum_tree.SumTree(10)
    tree.set(np.arange(3), np.ones(3))
    before = tree._nodes.copy()
    for value in (-1.0, np.nan, np.inf):
      with self.assertRaisesRegex(errors.ArgumentError, 'Values must be'):
        tree.set(np.arange(3), np.array([1.0, value, 1.0]))
    with self.assertRaisesRegex(IndexError, 'outside'):
      tree.set(16, 1.0)
    np.testing.assert_array_equal(tree._nodes, before)


class PowerOfTwoCapacityTest(absltest.TestCase):

  def test_first_eviction_does_not_crash(self):
    # Dopamine JAX fails here with IndexError in SumTree.set: the key added
    # before the oldest is removed has no leaf in a tree of 8.
    memory = _memory(_OURS, 8, 1, 1, True, False)
    for t in range(40):
      memory.add(elements.TransitionElement(np.full((2,), t, np.float32), t,
                                            float(t), False),
                 priority=float(t + 1))
    self.assertEqual(memory.add_count, 39)
    batch, metadata = memory.sample(200, with_sample_metadata=True)
    self.assertTrue(((metadata.keys >= 31) & (metadata.keys < 39)).all())
    np.testing.assert_array_equal(batch.action, metadata.keys)
    # Each held key's priority is at its leaf: key k came with step k + 1,
    # whose priority was k + 2.
    tree = memory._sampling_distribution._sum_tree
    np.testing.assert_allclose(tree.root, sum(range(33, 41)))
    np.testing.assert_allclose(metadata.probabilities * tree.root,
                               metadata.keys + 2.0)


class CheckedAddTest(absltest.TestCase):

  def test_mismatched_values_are_refused(self):
    memory = _memory(_OURS, 10, 2, 1, False, False)
    memory.add(elements.TransitionElement(np.zeros(3, np.uint8), 1, 0.0,
                                          False))
    with self.assertRaisesRegex(ValueError, "'observation' has shape"):
      memory.add(elements.TransitionElement(np.zeros(4, np.uint8), 1, 0.0,
                                            False))
    with self.assertRaisesRegex(ValueError, "'observation'"):
      memory.add(elements.TransitionElement(np.full(3, 0.5), 1, 0.0, False))
    memory.add(elements.TransitionElement(np.zeros(3, np.uint8), 1, 0.0,
                                          False))
    with self.assertRaisesRegex(ValueError, "'action'"):
      memory.add(elements.TransitionElement(np.zeros(3, np.uint8), 1.5, 0.0,
                                            False))

  def test_sample_errors_are_dopamines(self):
    memory = _memory(_OURS, 10, 1, 1, False, False)
    with self.assertRaisesRegex(ValueError, 'No samples in replay buffer!'):
      memory.sample()
    memory.add(elements.TransitionElement(np.zeros(3), 1, 0.0, False))
    memory.add(elements.TransitionElement(np.zeros(3), 1, 0.0, False))
    with self.assertRaisesRegex(ValueError, 'Invalid size: 0'):
      memory.sample(0)


def _fill(memory, modules, seed, count, **kwargs):
  """Adds `count` of `_steps(seed, ...)` to `memory` (of `modules`)."""
  for step in _steps(seed, count):
    memory.add(modules[3].TransitionElement(*step), **kwargs)
  return memory


def _steps(seed, count, shape=(3, 2), ends=0.1):
  """`count` random steps: (observation, action, reward, terminal, end)."""
  rng = np.random.default_rng(seed)
  for _ in range(count):
    terminal = bool(rng.random() < ends)
    yield (rng.integers(0, 255, shape).astype(np.uint8),
           int(rng.integers(4)), float(rng.normal()), terminal,
           terminal or bool(rng.random() < ends / 2))


class CheckpointTest(parameterized.TestCase):

  @parameterized.product(prioritized=(False, True), compress=(False, True))
  def test_resumed_memory_samples_as_the_uninterrupted_one(self, prioritized,
                                                           compress):
    directory = fixtures.temp_dir(self)
    uninterrupted = _memory(_OURS, 40, 4, 3, prioritized, compress)
    saved = _memory(_OURS, 40, 4, 3, prioritized, compress)
    steps = list(_steps(11, 300))
    for memory in (uninterrupted, saved):
      for step in steps[:150]:
        memory.add(elements.TransitionElement(*step), priority=1.0)
      memory.sample()
    saved.save(directory, 3)
    # A fresh memory, its sampler seeded otherwise: the checkpoint brings
    # the saved one's keys, generator, tree, episode so far and frames.
    resumed = _memory(_OURS, 40, 4, 3, prioritized, compress)
    resumed._sampling_distribution._rng = np.random.default_rng(99)
    resumed.load(directory, 3)
    self.assertEqual(resumed.add_count, uninterrupted.add_count)
    for i, step in enumerate(steps[150:]):
      for memory in (uninterrupted, resumed):
        memory.add(elements.TransitionElement(*step), priority=0.5 + i % 3)
      if i % 5 == 0:
        expected, their_metadata = uninterrupted.sample(
            with_sample_metadata=True)
        batch, metadata = resumed.sample(with_sample_metadata=True)
        _assert_batches_equal(self, expected, batch)
        np.testing.assert_array_equal(metadata.keys, their_metadata.keys)
    self.assertGreater(uninterrupted.add_count, 80)  # Past two laps.

  def test_layout_and_garbage_collection_are_dopamines(self):
    directory = fixtures.temp_dir(self)
    memory = _memory(_OURS, 40, 4, 3, False, True)
    memory._checkpoint_duration = 3
    steps = _steps(4, 100)
    for iteration in range(6):
      for _ in range(10):
        memory.add(elements.TransitionElement(*next(steps)))
      memory.save(directory, iteration)
    self.assertCountEqual(os.listdir(directory),
                          ['3', '4', '5', replay_checkpoint.PACK_DIR])
    path = os.path.join(directory, '5', 'replay', 'checkpoint.msgpack')
    with open(path, 'rb') as f:
      state = msgpack.unpackb(f.read(), raw=False, strict_map_key=False)
    self.assertEqual(state['add_count'], memory.add_count)
    memory.load(directory, 4)
    self.assertLess(memory.add_count, state['add_count'])

  def test_damaged_or_missing_checkpoints_are_refused_unchanged(self):
    directory = fixtures.temp_dir(self)
    memory = _memory(_OURS, 40, 2, 1, True, True)
    for step in _steps(5, 60):
      memory.add(elements.TransitionElement(*step), priority=2.0)
    memory.save(directory, 1)
    for step in _steps(6, 7):
      memory.add(elements.TransitionElement(*step), priority=3.0)
    before = memory.to_state_dict()
    with self.assertRaises(FileNotFoundError):
      memory.load(directory, 2)
    # Another stack size: its stacks would read frames never saved.
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'stack_size=2'):
      _memory(_OURS, 40, 3, 1, True, True).load(directory, 1)
    replay = os.path.join(directory, '1', 'replay')
    packs = os.path.join(directory, replay_checkpoint.PACK_DIR)
    self.assertLen(os.listdir(packs), 1)
    with open(os.path.join(packs, os.listdir(packs)[0]), 'r+b') as f:
      f.seek(10)
      f.write(b'\xff')
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'not the one saved'):
      memory.load(directory, 1)
    with open(os.path.join(replay, 'checkpoint.msgpack'), 'wb') as f:
      f.write(msgpack.packb({'add_count': 3, 'format': 'other'}))
    with self.assertRaises(atomic_files.CorruptCheckpointError):
      memory.load(directory, 1)
    after = memory.to_state_dict()
    self.assertEqual(after['add_count'], before['add_count'])
    self.assertEqual(after['frame_parts'], before['frame_parts'])

  def test_a_save_that_fails_leaves_the_iterations_checkpoint(self):
    directory = fixtures.temp_dir(self)
    memory = _fill(_memory(_OURS, 40, 2, 1, False, False), _OURS, 7, 30)
    memory.save(directory, 1)
    saved_count = memory.add_count
    _fill(memory, _OURS, 8, 10)
    with mock.patch.object(atomic_files, 'atomic_write',
                           side_effect=OSError('disk full')):
      with self.assertRaisesRegex(OSError, 'disk full'):
        memory.save(directory, 1)
    memory.load(directory, 1)
    self.assertEqual(memory.add_count, saved_count)

  def test_saves_write_only_new_frames_and_prune_unnamed_packs(self):
    directory = fixtures.temp_dir(self)
    memory = _memory(_OURS, 2000, 4, 3, True, True)
    memory._checkpoint_duration = 2
    steps = _steps(9, 5000, shape=(16, 16), ends=0.002)
    packs = os.path.join(directory, replay_checkpoint.PACK_DIR)
    written = []
    for iteration in range(4):
      for _ in range(2000 if iteration == 0 else 50):
        memory.add(elements.TransitionElement(*next(steps)), priority=1.0)
      before = {name: os.path.getsize(os.path.join(packs, name))
                for name in atomic_files.list_directory(packs)}
      memory.save(directory, iteration)
      after = {name: os.path.getsize(os.path.join(packs, name))
               for name in os.listdir(packs)}
      written.append(sum(size for name, size in after.items()
                         if name not in before))
    # 50 new steps of 2,000: a few percent of a full save's bytes.
    for size in written[1:]:
      self.assertLess(size, 0.06 * written[0])
    # Only the packs the two kept checkpoints name remain, and they load.
    named = set()
    for iteration in (2, 3):
      with open(os.path.join(directory, str(iteration), 'replay',
                             replay_checkpoint.PACKS_NAME)) as f:
        named.update(json.load(f))
    self.assertCountEqual(os.listdir(packs), named)
    for iteration in (2, 3):
      _memory(_OURS, 2000, 4, 3, True, True).load(directory, iteration)

  def test_checkpoints_hold_compressed_blocks_not_their_literals(self):
    # Blocks are stored as literals first and compressed on a thread
    # (frame_blocks' `background`); a checkpoint waits for them.
    memory = _memory(_OURS, 200, 4, 3, True, True)
    for step in range(150):
      observation = np.full((16, 16), step % 7, np.uint8)
      observation[step % 16] = 200
      memory.add(elements.TransitionElement(observation, 1, 0.5, False,
                                            False), priority=1.0)
    blocks = [data for compressed, _, _, data in
              memory.to_state_dict()['frame_parts'] if compressed]
    self.assertLen(blocks, 150 // 4)
    # 4 frames of 256 bytes: 1,029 bytes as literals.
    self.assertLess(max(map(len, blocks)), 200)

  def test_background_save_holds_the_memory_as_it_was(self):
    directory = fixtures.temp_dir(self)
    memory = _memory(_OURS, 300, 4, 3, True, True)
    steps = _steps(12, 1000, ends=0.02)
    for _ in range(400):
      memory.add(elements.TransitionElement(*next(steps)), priority=1.0)
    expected = memory.to_state_dict()
    started, resume = threading.Event(), threading.Event()
    real_save = replay_checkpoint.save

    def held_save(*args):
      started.set()
      resume.wait(30)  # Adds, samples and updates go on meanwhile.
      return real_save(*args)

    with mock.patch.object(replay_checkpoint, 'save', held_save):
      future = memory.save(directory, 7, background=True)
      self.assertTrue(started.wait(10))
      for _ in range(300):
        memory.add(elements.TransitionElement(*next(steps)), priority=2.0)
      _, metadata = memory.sample(with_sample_metadata=True)
      memory.update(metadata.keys, priorities=np.full(6, 3.0))
      self.assertFalse(future.done())
      resume.set()
      self.assertIsNone(future.result(timeout=30))
    loaded = _memory(_OURS, 300, 4, 3, True, True)
    loaded.load(directory, 7)
    self.assertEqual(loaded.add_count, expected['add_count'])
    np.testing.assert_array_equal(
        loaded._sampling_distribution._sum_tree._nodes,
        expected['sampling_distribution']['sum_tree']['nodes'])
    reference = _memory(_OURS, 300, 4, 3, True, True)
    reference.from_state_dict(expected)
    for key in reference._memory:
      _assert_batches_equal(self, reference._memory[key], loaded._memory[key])

  def test_a_failed_background_save_raises_from_its_future(self):
    directory = fixtures.temp_dir(self)
    memory = _memory(_OURS, 40, 2, 1, False, True)
    for step in _steps(13, 60):
      memory.add(elements.TransitionElement(*step))
    with mock.patch.object(atomic_files, 'atomic_write',
                           side_effect=OSError('disk full')):
      future = memory.save(directory, 1, background=True)
      with self.assertRaisesRegex(OSError, 'disk full'):
        future.result(timeout=30)
    with self.assertRaises(FileNotFoundError):
      memory.load(directory, 1)

  def test_arrays_of_objects_are_refused(self):
    crafted = msgpack.packb({'__array__': ['|O', [1], b'\0' * 8]})
    with self.assertRaisesRegex(ValueError, 'dtype object'):
      replay_checkpoint.decode(crafted)
    with self.assertRaisesRegex(TypeError, 'cannot save'):
      replay_checkpoint.encode({'a': object()})


class DopamineImportTest(parameterized.TestCase):

  @parameterized.product(their_compress=(False, True),
                         our_compress=(False, True), prioritized=(False, True))
  def test_dopamine_checkpoint_loads_as_the_memory_it_saved(
      self, their_compress, our_compress, prioritized):
    directory = fixtures.temp_dir(self)
    theirs = _memory(_THEIRS, 60, 4, 3, prioritized, their_compress)
    steps = list(_steps(21, 300, ends=0.08))
    for step in steps[:200]:
      theirs.add(their_elements.TransitionElement(*step), priority=1.5)
    theirs.sample()
    theirs.save(directory, 5)
    theirs._make_checkpoint_manager(directory).wait_until_finished()
    ours = _memory(_OURS, 60, 4, 3, prioritized, our_compress)
    with self.assertRaises(atomic_files.CorruptCheckpointError):
      ours.load(directory, 5)  # Not our format: only when asked for.
    ours.load(directory, 5, from_dopamine=True)
    self.assertEqual(ours.add_count, theirs.add_count)
    for key in theirs._memory:
      element = theirs._memory[key]
      if element.is_compressed:
        element = element.unpack()
      _assert_batches_equal(self, element, ours._memory[key])
    # Frames about once: the elements, the episode so far, a few more.
    self.assertLess(ours._transition_accumulator.steps, 60 + 40)
    for i, step in enumerate(steps[200:]):
      theirs.add(their_elements.TransitionElement(*step), priority=1.0)
      ours.add(elements.TransitionElement(*step), priority=1.0)
      if i % 10 == 0:
        expected, their_metadata = theirs.sample(with_sample_metadata=True)
        batch, metadata = ours.sample(with_sample_metadata=True)
        np.testing.assert_array_equal(metadata.keys, their_metadata.keys)
        _assert_batches_equal(self, expected, batch)

  def test_pickles_are_never_loaded_and_objects_refused(self):
    directory = fixtures.temp_dir(self)
    theirs = _fill(_memory(_THEIRS, 20, 2, 1, False, False), _THEIRS, 3, 30)
    theirs.save(directory, 1)
    theirs._make_checkpoint_manager(directory).wait_until_finished()
    path = os.path.join(directory, '1', 'replay', 'checkpoint.msgpack')
    with open(path, 'rb') as f:
      state = msgpack.unpackb(f.read(), raw=False, strict_map_key=False)
    marker = os.path.join(directory, 'pickle_ran')
    # A pickle that would create `marker` when loaded.
    state['memory']['treedef'] = (
        b'cbuiltins\nopen\n(' + repr(marker).encode() + b"\nS'w'\ntR.")
    with open(path, 'wb') as f:
      f.write(msgpack.packb(state, use_bin_type=True))
    ours = _memory(_OURS, 20, 2, 1, False, False)
    ours.load(directory, 1, from_dopamine=True)
    self.assertFalse(os.path.exists(marker))
    self.assertEqual(ours.add_count, theirs.add_count)
    state['memory']['values'][0][1] = {'dtype': "'|O'", 'shape': [],
                                       'data': b'\0' * 8}
    with open(path, 'wb') as f:
      f.write(msgpack.packb(state, use_bin_type=True))
    with self.assertRaisesRegex(atomic_files.CorruptCheckpointError,
                                'dtype'):
      _memory(_OURS, 20, 2, 1, False, False).load(directory, 1,
                                                  from_dopamine=True)


def _run_python(script):
  return subprocess.run([sys.executable, '-c', script], capture_output=True,
                        text=True, timeout=300, check=False)


class RedirectTest(absltest.TestCase):

  def test_dopamine_names_give_our_modules(self):
    # In a fresh interpreter: after install, Dopamine's module names are
    # ours (what its agents' `_build_replay_buffer` imports), and its gin
    # bindings configure ours.
    script = '\n'.join([
        'from dopamine_per.jax import redirect',
        'redirect.install()',
        'import gin',
        'from dopamine.jax.replay_memory import accumulator, replay_buffer',
        'from dopamine.jax.replay_memory import samplers',
        'import dopamine.jax.replay_memory.sum_tree as tree',
        'import dopamine.jax.replay_memory.elements as elements',
        "gin.parse_config(['ReplayBuffer.max_capacity = 100',",
        "                  'ReplayBuffer.batch_size = 4',",
        "                  'PrioritizedSamplingDistribution.max_capacity = "
        "100'])",
        'memory = replay_buffer.ReplayBuffer(',
        '    transition_accumulator=accumulator.TransitionAccumulator(',
        '        stack_size=1, update_horizon=1, gamma=0.9),',
        '    sampling_distribution=samplers.PrioritizedSamplingDistribution(',
        '        seed=0))',
        'for module in (accumulator, replay_buffer, samplers, tree,',
        '               elements, type(memory)):',
        '  print(module.__module__ if isinstance(module, type) else',
        '        module.__name__)',
        'print(memory._max_capacity, memory._batch_size)',
    ])
    run = _run_python(script)
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    prefix = 'dopamine_per.jax.replay_memory.'
    self.assertEqual(run.stdout.split(), [
        prefix + 'accumulator', prefix + 'replay_buffer', prefix + 'samplers',
        prefix + 'sum_tree', prefix + 'elements', prefix + 'replay_buffer',
        '100', '4'])

  def test_refused_once_dopamines_modules_are_loaded(self):
    script = '\n'.join([
        'import dopamine.jax.replay_memory.samplers',
        'from dopamine_per.jax import redirect',
        'try:',
        '  redirect.install()',
        'except RuntimeError as e:',
        '  print(e)',
    ])
    run = _run_python(script)
    self.assertIn('must run before', run.stdout, run.stderr[-3000:])


if __name__ == '__main__':
  absltest.main()
