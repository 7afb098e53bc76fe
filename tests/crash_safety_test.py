"""A process killed (SIGKILL) while saving loses nothing already saved.

A child process fills a prioritized memory and saves it at every iteration,
over and over; the test kills it at a random moment, many times, and each
time a fresh memory loads the newest complete checkpoint
(`latest_checkpoint_iteration`) and must equal, transition for transition
and priority for priority, a memory rebuilt to that iteration.
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
import numpy as np

from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer
from tests import replay_cases

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TRIALS = 8

# The child: the same `make` and `advance` as below, saving after each step.
# Random frames compress badly, so every save takes a while: a wide target.
_CHILD = '''
import sys
from tests import crash_safety_test as t
memory = t.make()
for iteration in range(10**6):
  t.advance(memory, iteration)
  memory.save(sys.argv[1], iteration)
  print('saved', iteration, flush=True)
'''


def make():
  return prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
      observation_shape=(84, 84), stack_size=4, replay_capacity=600,
      batch_size=32, update_horizon=3, checkpoint_duration=3)


def advance(memory, iteration):
  """Iteration `iteration`'s adds and priority updates (deterministic)."""
  rng = np.random.default_rng(iteration)
  for step in range(150):
    memory.add(rng.integers(0, 256, (84, 84), dtype=np.uint8), step % 4,
               float(step), int(step % 40 == 39), None,
               episode_end=step % 70 == 69)
  written = min(int(memory.add_count), 600)
  indices = rng.integers(0, written, 64)
  memory.set_priority(indices, rng.random(64) * 5)


class CrashSafetyTest(absltest.TestCase):

  def test_sigkill_during_save_loses_nothing(self):
    rng = random.Random(0)
    torn = 0  # Trials that left a newer, incomplete checkpoint behind.
    checked = 0
    for _ in range(_TRIALS):
      directory = tempfile.mkdtemp()
      self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
      child = subprocess.Popen(
          [sys.executable, '-c', _CHILD, directory], cwd=_REPO_ROOT,
          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
      # After the first complete save (however slow the machine), kill it
      # at a random moment of the following iterations.
      self.assertEqual(child.stdout.readline().strip(), 'saved 0')
      time.sleep(rng.uniform(0.0, 1.5))
      child.send_signal(signal.SIGKILL)
      child.wait()
      child.stdout.close()

      latest = circular_replay_buffer.latest_checkpoint_iteration(directory)
      self.assertIsNotNone(latest)
      names = os.listdir(directory)
      if any('_ckpt.{}.gz'.format(latest + 1) in name or '.tmp' in name
             for name in names):
        torn += 1
      restored = make()
      restored.load(directory, latest)
      expected = make()
      for iteration in range(latest + 1):
        advance(expected, iteration)
      replay_cases.assert_same_snapshot(self, replay_cases.snapshot(expected),
                                        replay_cases.snapshot(restored))
      checked += 1
    self.assertEqual(checked, _TRIALS)
    self.assertGreater(torn, 0, 'no kill landed in the middle of a save')


if __name__ == '__main__':
  absltest.main()
