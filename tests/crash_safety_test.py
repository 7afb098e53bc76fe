"""A process killed (SIGKILL) while saving loses nothing already saved.

A child process fills a prioritized memory and saves it at every iteration.
It watches its own file-system events in the checkpoint directory (each
file renamed into place, each file deleted), whichever module makes them:
`os.replace`, `os.rename`, `os.remove` and `os.unlink` are wrapped. A first
run records every event of saves 0 to `_TARGET`; then, for each step of
save `_TARGET` (before its first file, after each file including the
completion marker, during the clean-up of the stale checkpoint), a child
SIGKILLs itself right after that event. Each time:

- the directory holds exactly the files the recorded events up to the kill
  leave (no temporary file, nothing lost);
- the newest complete checkpoint (`latest_checkpoint_iteration`) is the
  newest iteration whose completion marker those events left, and a fresh
  memory loads it equal, transition for transition and priority for
  priority, to a memory rebuilt to that iteration;
- the run resumes: the restored memory advances one iteration and saves
  over the torn checkpoint, and that save loads equal to a rebuilt memory.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional, Set, Tuple

from absl.testing import absltest
import numpy as np

from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer
from tests import replay_cases

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DURATION = 3  # checkpoint_duration: save _TARGET deletes iteration 0's files.
_TARGET = _DURATION
_MARKER = circular_replay_buffer.DOPAMINE_PER_STATE_NAME

# The child: the same `make` and `advance` as below, saving after each
# iteration; it prints each event in the checkpoint directory and kills
# itself after event number argv[3] (0: never).
_CHILD = '''
import os
import signal
import sys

from tests import crash_safety_test as t

directory, iterations, kill_after = sys.argv[1], *map(int, sys.argv[2:])
events = 0


def watched(real, kind, argument):
  def call(*args, **kwargs):
    global events
    real(*args, **kwargs)
    path = os.path.abspath(os.fspath(args[argument]))
    if os.path.dirname(path) == directory:
      events += 1
      print(kind, os.path.basename(path), flush=True)
      if events == kill_after:
        os.kill(os.getpid(), signal.SIGKILL)
  return call


os.replace = watched(os.replace, 'rename', 1)
os.rename = watched(os.rename, 'rename', 1)
os.remove = watched(os.remove, 'remove', 0)
os.unlink = watched(os.unlink, 'remove', 0)
memory = t.make()
for iteration in range(iterations):
  t.advance(memory, iteration)
  print('save', iteration, flush=True)
  memory.save(directory, iteration)
'''

# One recorded event: ('rename' or 'remove', file name, iteration saved).
_Event = Tuple[str, str, int]


def make():
  return prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
      observation_shape=(8, 8), stack_size=4, replay_capacity=500,
      batch_size=32, update_horizon=3, checkpoint_duration=_DURATION)


def advance(memory, iteration):
  """Iteration `iteration`'s adds and priority updates (deterministic)."""
  rng = np.random.default_rng(iteration)
  for step in range(150):
    memory.add(rng.integers(0, 256, (8, 8), dtype=np.uint8), step % 4,
               float(step), int(step % 40 == 39), None,
               episode_end=step % 70 == 69)
  written = min(int(memory.add_count), 500)
  indices = rng.integers(0, written, 64)
  memory.set_priority(indices, rng.random(64) * 5)


def rebuilt(iteration):
  """A memory advanced through iterations 0 to `iteration`."""
  memory = make()
  for number in range(iteration + 1):
    advance(memory, number)
  return memory


def run_child(directory: str, kill_after: int
              ) -> Tuple[List[_Event], subprocess.CompletedProcess]:
  """Runs the child; returns the events it printed, and the process."""
  child = subprocess.run(
      [sys.executable, '-c', _CHILD, directory, str(_TARGET + 1),
       str(kill_after)],
      cwd=_REPO_ROOT, capture_output=True, text=True, timeout=300,
      check=False)
  events = []
  saving = None
  for line in child.stdout.splitlines():
    kind, name = line.split(' ')
    if kind == 'save':
      saving = int(name)
    else:
      events.append((kind, name, saving))
  return events, child


def files_after(events: List[_Event]) -> Set[str]:
  """The files that `events` leave in a directory that was empty."""
  files = set()
  for kind, name, _ in events:
    if kind == 'rename':
      files.add(name)
    else:
      files.discard(name)
  return files


def newest_marked(files: Set[str]) -> Optional[int]:
  """The newest iteration whose completion marker is among `files`."""
  prefix, suffix = f'{_MARKER}_ckpt.', '.gz'
  iterations = [int(name[len(prefix):-len(suffix)]) for name in files
                if name.startswith(prefix) and name.endswith(suffix)]
  return max(iterations) if iterations else None


class CrashSafetyTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    with tempfile.TemporaryDirectory() as directory:
      cls.recorded, child = run_child(directory, kill_after=0)
      if (child.returncode != 0 or
          files_after(cls.recorded) != set(os.listdir(directory))):
        raise AssertionError(f'the recording run failed: {child.stderr}')

  def _events_of(self, iteration: int, kind: str) -> List[int]:
    """The 1-based numbers of save `iteration`'s events of kind `kind`."""
    return [number for number, (event_kind, _, saving)
            in enumerate(self.recorded, start=1)
            if saving == iteration and event_kind == kind]

  def test_recording_shows_the_order_crash_safety_relies_on(self):
    for iteration in range(_TARGET + 1):
      renames = [self.recorded[number - 1][1]
                 for number in self._events_of(iteration, 'rename')]
      self.assertGreater(len(renames), 2)
      # Every file of the iteration, the completion marker last.
      self.assertEqual(renames[-1], f'{_MARKER}_ckpt.{iteration}.gz')
      self.assertTrue(all(name.endswith(f'_ckpt.{iteration}.gz')
                          for name in renames))
      self.assertLen(set(renames), len(renames))
    removed = [self.recorded[number - 1][1]
               for number in self._events_of(_TARGET, 'remove')]
    stale = _TARGET - _DURATION
    # The stale checkpoint's marker first, then each of its files.
    self.assertEqual(removed[0], f'{_MARKER}_ckpt.{stale}.gz')
    self.assertEqual(
        sorted(removed),
        sorted(self.recorded[number - 1][1]
               for number in self._events_of(stale, 'rename')))

  def _kill_points(self) -> List[int]:
    renames = self._events_of(_TARGET, 'rename')
    removes = self._events_of(_TARGET, 'remove')
    # Before the first file; after each file (the one before the marker
    # included) and after the marker; after the first and the last deletion.
    return sorted({renames[0] - 1, *renames, removes[0], removes[-1]})

  def test_sigkill_at_each_step_of_a_save_loses_nothing(self):
    for kill_after in self._kill_points():
      with self.subTest(kill_after=kill_after,
                        event=self.recorded[kill_after - 1]):
        self._check_kill(kill_after)

  def _check_kill(self, kill_after: int):
    directory = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
    events, child = run_child(directory, kill_after)
    self.assertEqual(child.returncode, -9, child.stderr)
    self.assertEqual(events, self.recorded[:kill_after])
    files = files_after(events)
    self.assertEqual(set(os.listdir(directory)), files)

    latest = circular_replay_buffer.latest_checkpoint_iteration(directory)
    self.assertEqual(latest, newest_marked(files))
    # The kill is in save _TARGET: before its marker, the previous one is
    # the newest complete checkpoint; from its marker on, it is.
    marker_number = self._events_of(_TARGET, 'rename')[-1]
    self.assertEqual(latest, _TARGET if kill_after >= marker_number
                     else _TARGET - 1)
    restored = make()
    restored.load(directory, latest)
    replay_cases.assert_same_snapshot(
        self, replay_cases.snapshot(rebuilt(latest)),
        replay_cases.snapshot(restored))

    # Resuming: the next iteration saves over whatever the kill left.
    advance(restored, latest + 1)
    restored.save(directory, latest + 1)
    self.assertEqual(
        circular_replay_buffer.latest_checkpoint_iteration(directory),
        latest + 1)
    resumed = make()
    resumed.load(directory, latest + 1)
    replay_cases.assert_same_snapshot(
        self, replay_cases.snapshot(rebuilt(latest + 1)),
        replay_cases.snapshot(resumed))


if __name__ == '__main__':
  absltest.main()
