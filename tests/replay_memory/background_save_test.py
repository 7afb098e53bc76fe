"""Tests of `save(..., background=True)`: a checkpoint written while the
memory changes holds the memory as it was when the save was called.

Kills during a background save: tests/suites/crash_safety_test.py
(BackgroundSaveKillTest).
"""

import os
import threading
from unittest import mock

from absl.testing import absltest
import numpy as np

from dopamine_per.file_io import transaction
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from tests.support import fixtures
from tests.support import replay_cases


def _memory(compress=False):
  return prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
      observation_shape=(8, 8), stack_size=4, replay_capacity=300,
      batch_size=32, update_horizon=3, rng=0,
      compress_observations=compress)


def _advance(memory, seed, count=200):
  """`count` adds (episodes of 50) and a priority update, from `seed`."""
  rng = np.random.default_rng(seed)
  for step in range(count):
    memory.add(rng.integers(0, 256, (8, 8), dtype=np.uint8), step % 4,
               float(step), step % 50 == 49, None)
  memory.set_priority(rng.integers(0, 300, 64), rng.random(64) + 0.5)



class BackgroundSaveTest(absltest.TestCase):

  COMPRESS = False

  def _memory(self):
    return _memory(self.COMPRESS)

  def setUp(self):
    super().setUp()
    self.memory = self._memory()
    _advance(self.memory, 0, 400)  # Wrapped around.
    self.expected = fixtures.temp_dir(self)
    self.memory.save(self.expected, 7)  # In the foreground, for reference.

  def test_a_checkpoint_holds_the_memory_as_it_was_when_called(self):
    directory = fixtures.temp_dir(self)
    # While this thread holds the memory's lock the saving thread cannot
    # copy anything out: every slot the adds below overwrite must be kept
    # for it first.
    with self.memory._lock:  # pylint: disable=protected-access
      future = self.memory.save(directory, 7, background=True)
      _advance(self.memory, 1)  # 200 of the 300 slots overwritten.
      self.memory.sample_transition_batch()
      self.assertFalse(future.done())
    self.assertIsNone(future.result(timeout=fixtures.DEADLINE_S))
    self.assertEqual(fixtures.file_contents(directory),
                     fixtures.file_contents(self.expected))
    after = replay_cases.snapshot(self.memory)
    restored = self._memory()
    restored.load(directory, 7)
    reference = self._memory()
    reference.load(self.expected, 7)
    replay_cases.assert_same_snapshot(self, replay_cases.snapshot(reference),
                                      replay_cases.snapshot(restored))
    # And the memory itself went on from where it was.
    replay_cases.assert_same_snapshot(self, after,
                                      replay_cases.snapshot(self.memory))

  def test_save_and_load_wait_for_a_background_save(self):
    directory = fixtures.temp_dir(self)
    with self.memory._lock:  # pylint: disable=protected-access
      future = self.memory.save(directory, 7, background=True)
      _advance(self.memory, 1)
    self.memory.load(directory, 7)  # Waits, then reads it whole.
    self.assertTrue(future.done())
    reference = self._memory()
    reference.load(self.expected, 7)
    replay_cases.assert_same_snapshot(self, replay_cases.snapshot(reference),
                                      replay_cases.snapshot(self.memory))

  def test_a_failed_background_save_raises_from_result_and_keeps_the_old(
      self):
    directory = fixtures.temp_dir(self)
    self.memory.save(directory, 7)
    _advance(self.memory, 1)
    real_write = transaction.Transaction.write
    calls = []

    def failing_write(staging, target, writer):
      calls.append(target)
      if len(calls) == 3:
        raise OSError(28, 'No space left on device')
      return real_write(staging, target, writer)

    with mock.patch.object(transaction.Transaction, 'write', failing_write):
      future = self.memory.save(directory, 7, background=True)
      with self.assertRaisesRegex(OSError, 'No space left'):
        future.result(timeout=fixtures.DEADLINE_S)
    self.assertEqual(fixtures.file_contents(directory),
                     fixtures.file_contents(self.expected))
    # The memory keeps no rows for the failed save, and saves again.
    _advance(self.memory, 2)
    self.memory.save(directory, 8, background=True).result(
        timeout=fixtures.DEADLINE_S)
    self.assertEqual(
        memory_checkpoint.latest_checkpoint_iteration(directory), 8)

  def test_refusals_come_before_the_future(self):
    self.memory.note = object()  # Not plain data: refused, nothing written.
    directory = fixtures.temp_dir(self)
    with self.assertRaisesRegex(TypeError, "attribute 'note'"):
      self.memory.save(directory, 8, background=True)
    self.assertEqual(os.listdir(directory), [])
    del self.memory.note
    missing = os.path.join(directory, 'missing')
    future = self.memory.save(missing, 8, background=True)
    self.assertIsNone(future.result(timeout=0))
    self.assertFalse(os.path.exists(missing))

  def test_adds_and_samples_go_on_while_a_save_is_written(self):
    directory = fixtures.temp_dir(self)
    started = threading.Event()
    real_stage = memory_checkpoint.stage

    def slow_stage(*args):
      started.set()
      return real_stage(*args)

    with mock.patch.object(memory_checkpoint, 'stage', slow_stage):
      future = self.memory.save(directory, 7, background=True)
      self.assertTrue(started.wait(fixtures.DEADLINE_S))
      for seed in range(1, 4):  # Adds, samples and updates meanwhile.
        _advance(self.memory, seed, 50)
        self.memory.sample_transition_batch()
      future.result(timeout=fixtures.DEADLINE_S)
    self.assertEqual(fixtures.file_contents(directory),
                     fixtures.file_contents(self.expected))


class CompressedBackgroundSaveTest(BackgroundSaveTest):
  """The same with compressed frames, saved in chunks (the snapshot copies
  the frames' block table; adds replace blocks the save still packs)."""

  COMPRESS = True


class WrappedSaveTest(absltest.TestCase):

  def test_the_wrapper_passes_background_on(self):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with tf.Graph().as_default():
      wrapped = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
          observation_shape=(8, 8), stack_size=4, replay_capacity=300,
          batch_size=32, update_horizon=3)
    _advance(wrapped.memory, 0)
    directory = fixtures.temp_dir(self)
    self.assertIsNone(wrapped.save(directory, 1))
    future = wrapped.save(directory, 2, background=True)
    self.assertIsNone(future.result(timeout=fixtures.DEADLINE_S))
    self.assertEqual(
        memory_checkpoint.latest_checkpoint_iteration(directory), 2)


if __name__ == '__main__':
  absltest.main()
