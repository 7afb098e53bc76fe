"""A process killed (SIGKILL) or failed (disk full) while saving loses nothing.

A child process saves a prioritized memory following a plan and prints each
file-system event in the checkpoint directory; a first run records them,
then a child SIGKILLs itself right after a chosen event of the plan's last
save. What each test class covers: docs/reliability.md.
"""

import errno
import os
import re
import subprocess
import tempfile
from typing import List, Optional, Sequence, Set, Tuple
from unittest import mock

from absl.testing import absltest
import numpy as np

from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from tests.support import fixtures
from tests.support import replay_cases

_DURATION = 3  # checkpoint_duration: save 3 deletes iteration 0's files.
_MARKER = memory_checkpoint.DOPAMINE_PER_STATE_NAME
_JOURNAL = memory_checkpoint.JOURNAL_NAME
# A temporary file a killed save left, planted before the last save of a
# plan that asks for it: that save's clean-up deletes it.
_PLANTED = '.add_count_ckpt.7.gz.abcdefgh.tmp'
# Set to '1' in the environment: the memories compress their frames, and
# the child saves in small chunks (4 blocks, 256 bytes) so that its
# checkpoints share packs.
_COMPRESS = 'DOPAMINE_PER_CRASH_TEST_COMPRESS'

# The child: argv = directory, plan, kill_after (0: never), plant (0 or 1),
# background (0 or 1). It prints 'save K' before step K's save and one line
# per event, and kills itself after event number kill_after. In the
# background, the last save is written while the memory advances.
_CHILD = '''
import os
import signal
import sys

from tests.suites import crash_safety_test as t

if os.environ.get(t._COMPRESS) == '1':
  from dopamine_per.replay_memory.checkpoint import chunk_checkpoint
  chunk_checkpoint.GROUP_BLOCKS = 4
  chunk_checkpoint.ARRAY_CHUNK_BYTES = 256

directory, plan = sys.argv[1], t.parse_plan(sys.argv[2])
kill_after, plant = int(sys.argv[3]), sys.argv[4] == '1'
background = sys.argv[5] == '1'
events = 0


def event(*fields):
  global events
  events += 1
  print(*fields, flush=True)
  if events == kill_after:
    os.kill(os.getpid(), signal.SIGKILL)


def watched(real, kind, paths):
  """`real`, printing event `kind` of `paths(*args)` (the last one inside)."""
  def call(*args, **kwargs):
    result = real(*args, **kwargs)
    named = paths(*args)
    if named and os.path.dirname(os.path.abspath(named[-1])) == directory:
      event(kind, *(t.name_of(path) for path in named))
    return result
  return call


os.open = watched(os.open, 'create', lambda path, flags, *_: (
    [path] if flags & os.O_CREAT else []))
for kind, names, count in (('rename', ('replace', 'rename'), 2),
                            ('remove', ('remove', 'unlink'), 1)):
  for name in names:
    setattr(os, name, watched(getattr(os, name), kind,
                              lambda *args, count=count: args[:count]))
memory = t.make()
for step, (iteration, number) in enumerate(plan):
  if iteration is not None:
    t.advance(memory, iteration)
  if plant and step == len(plan) - 1:
    os.close(os.open(os.path.join(directory, t._PLANTED),
                     os.O_CREAT | os.O_WRONLY))
  print('save', step, flush=True)
  if not background:
    memory.save(directory, number)
    continue
  future = memory.save(directory, number, background=True)
  if step == len(plan) - 1:
    t.advance(memory, 50)  # Not in the checkpoint.
  future.result()
'''

# One recorded event: (kind, file names..., plan step), kind 'create',
# 'rename' (source, destination) or 'remove'.
_Event = Tuple


def make():
  return prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
      observation_shape=(8, 8), stack_size=4, replay_capacity=500,
      batch_size=32, update_horizon=3, checkpoint_duration=_DURATION,
      compress_observations=os.environ.get(_COMPRESS) == '1')


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


def rebuilt(iterations: Sequence[int]):
  """A memory advanced through `iterations`, in order."""
  memory = make()
  for number in iterations:
    advance(memory, number)
  return memory


def parse_plan(plan: str) -> List[Tuple[Optional[int], int]]:
  """'0:5,-:2' -> [(0, 5), (None, 2)]: (iteration to advance or None, save)."""
  steps = []
  for step in plan.split(','):
    iteration, number = step.split(':')
    steps.append((None if iteration == '-' else int(iteration), int(number)))
  return steps


def name_of(path) -> str:
  """A file's name, the random part of a temporary's name as 'XXXXXXXX'."""
  return re.sub(r'^(\..+)\.[a-z0-9_]{8}\.tmp$', r'\1.XXXXXXXX.tmp',
                os.path.basename(os.fspath(path)))


def run_child(directory: str, plan: str, kill_after: int, plant: bool,
              background: bool = False
              ) -> Tuple[List[_Event], subprocess.CompletedProcess]:
  """Runs the child; returns the events it printed, and the process."""
  child = fixtures.run_python(
      ['-c', _CHILD, directory, plan, str(kill_after), '1' if plant else '0',
       '1' if background else '0'], 300)
  events = []
  saving = None
  for line in child.stdout.splitlines():
    kind, *names = line.split(' ')
    if kind == 'save':
      saving = int(names[0])
    else:
      events.append((kind, *names, saving))
  return events, child


def files_after(events: Sequence[_Event]) -> Set[str]:
  """The files that `events` leave in a directory that was empty."""
  files = set()
  for kind, *names, _ in events:
    if kind == 'create':
      files.add(names[0])
    elif kind == 'rename':
      files.discard(names[0])
      files.add(names[1])
    else:
      files.discard(names[0])
  return files


def listing(directory: str) -> Set[str]:
  return {name_of(name) for name in os.listdir(directory)}


def is_temporary(name: str) -> bool:
  return name.endswith('.tmp')


def assert_same_memory(test_case, iterations, number, directory):
  """Checkpoint `number` loads as `rebuilt(iterations)`; returns the memory."""
  restored = make()
  restored.load(directory, number)
  replay_cases.assert_same_snapshot(
      test_case, replay_cases.snapshot(rebuilt(iterations)),
      replay_cases.snapshot(restored))
  return restored


def assert_resumes(test_case, directory, latest, iterations, number):
  """Checkpoint `latest` holds `iterations`; advanced through iteration 99
  and saved as `number` over it, it loads back, leaving no staged file."""
  restored = assert_same_memory(test_case, iterations, latest, directory)
  advance(restored, 99)
  restored.save(directory, number)
  test_case.assertEqual(
      memory_checkpoint.latest_checkpoint_iteration(directory), number)
  test_case.assertEqual(
      [name for name in listing(directory)
       if is_temporary(name) or name.startswith(_JOURNAL)], [])
  assert_same_memory(test_case, [*iterations, 99], number, directory)


class CrashTestCase(absltest.TestCase):
  """Records a plan's events once; kills a child after chosen ones."""

  PLAN = ''
  PLANT = False
  BACKGROUND = False

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.steps = parse_plan(cls.PLAN)
    cls.last = len(cls.steps) - 1
    cls.number = cls.steps[-1][1]
    with tempfile.TemporaryDirectory() as directory:
      cls.recorded, child = run_child(directory, cls.PLAN, 0, cls.PLANT,
                                      cls.BACKGROUND)
      if (child.returncode != 0 or
          files_after(cls.recorded) != listing(directory)):
        raise AssertionError(f'the recording run failed: {child.stderr}')

  def events_of(self, step: int, kind: str) -> List[int]:
    """The 1-based numbers of step `step`'s events of kind `kind`."""
    return [number for number, (event_kind, *_, saving)
            in enumerate(self.recorded, start=1)
            if saving == step and event_kind == kind]

  def commit_point(self) -> int:
    """The number of the last save's event renaming its journal into place."""
    journal = f'{_JOURNAL}_ckpt.{self.number}'
    points = [number for number in self.events_of(self.last, 'rename')
              if self.recorded[number - 1][2] == journal]
    self.assertLen(points, 1)
    return points[0]

  def iterations_saved(self, step: int) -> List[int]:
    """The iterations advanced through up to plan step `step`."""
    return [iteration for iteration, _ in self.steps[:step + 1]
            if iteration is not None]

  def check_kill(self, kill_after: int, latest: int,
                 expected_iterations: Sequence[int]):
    """Kills the child after event `kill_after` (1-based); checks what it left.

    The newest checkpoint must be `latest`, holding `expected_iterations`.
    """
    directory = fixtures.temp_dir(self)
    events, child = run_child(directory, self.PLAN, kill_after, self.PLANT,
                              self.BACKGROUND)
    self.assertEqual(child.returncode, -9, child.stderr)
    self.assertEqual(events, self.recorded[:kill_after])
    self.assertEqual(listing(directory), files_after(events))

    self.assertEqual(
        memory_checkpoint.latest_checkpoint_iteration(directory), latest)
    assert_resumes(self, directory, latest, expected_iterations, self.number)


class NewCheckpointTest(CrashTestCase):
  """Saves 0 to 3 (save 3 deletes checkpoint 0); kills in save 3."""

  PLAN = '0:0,1:1,2:2,3:3'
  # The stale checkpoint's files its deletion keeps (packs still named).
  SHARED = []

  def test_recording_shows_the_order_crash_safety_relies_on(self):
    for step, (_, number) in enumerate(self.steps):
      created = [self.recorded[n - 1][1]
                 for n in self.events_of(step, 'create')]
      renames = [self.recorded[n - 1][1:3]
                 for n in self.events_of(step, 'rename')]
      journal = f'{_JOURNAL}_ckpt.{number}'
      # Every file staged (the completion marker last), then the journal.
      self.assertEqual(created[-2], f'.{_MARKER}_ckpt.{number}.gz.XXXXXXXX.tmp')
      self.assertEqual(created[-1], f'.{journal}.XXXXXXXX.tmp')
      self.assertTrue(all(is_temporary(name) for name in created))
      # The journal renamed into place first (the commit point), then each
      # staged file onto its name, in the order staged.
      self.assertEqual(renames[0], (created[-1], journal))
      self.assertEqual([source for source, _ in renames[1:]], created[:-1])
      self.assertEqual(renames[-1][1], f'{_MARKER}_ckpt.{number}.gz')
      self.assertTrue(all(target.endswith(f'_ckpt.{number}.gz')
                          for _, target in renames[1:]))
      # Then the journal is deleted, first of the removals.
      removed = [self.recorded[n - 1][1]
                 for n in self.events_of(step, 'remove')]
      self.assertEqual(removed[0], journal)
    removed = [self.recorded[n - 1][1]
               for n in self.events_of(self.last, 'remove')][1:]
    stale = self.number - _DURATION
    # The stale checkpoint's marker first, then each of its files (but a
    # pack of chunks a retained checkpoint still names).
    self.assertEqual(removed[0], f'{_MARKER}_ckpt.{stale}.gz')
    kept = files_after(self.recorded)
    self.assertEqual(
        sorted(removed),
        sorted(target for _, target in
               (self.recorded[n - 1][1:3] for n in self.events_of(0, 'rename'))
               if not target.startswith(_JOURNAL) and target not in kept))
    self.assertEqual([name for name in kept if name.endswith(f'.{stale}.gz')],
                     self.SHARED)

  def _kill_points(self) -> List[int]:
    creates = self.events_of(self.last, 'create')
    renames = self.events_of(self.last, 'rename')
    removes = self.events_of(self.last, 'remove')
    # Before the first file; after the first and the last staged file; at
    # the commit point; after the first and the last rename; after the
    # journal's deletion; after the last deletion.
    return sorted({creates[0] - 1, creates[0], creates[-2], renames[0],
                   renames[1], renames[-1], removes[0], removes[-1]})

  def test_sigkill_at_each_step_of_a_save_loses_nothing(self):
    commit = self.commit_point()
    for kill_after in self._kill_points():
      with self.subTest(kill_after=kill_after,
                        event=self.recorded[kill_after - 1]):
        # Before the journal is in place, checkpoint 2 is the newest.
        step = self.last if kill_after >= commit else self.last - 1
        self.check_kill(kill_after, self.steps[step][1],
                        self.iterations_saved(step))


class BackgroundSaveKillTest(NewCheckpointTest):
  """NewCheckpointTest's saves in the background; the memory advances
  while the last one is written, and it holds the memory as it was."""

  BACKGROUND = True


class CompressedBackgroundSaveKillTest(BackgroundSaveKillTest):
  """BackgroundSaveKillTest with compressed frames, saved in chunks that
  checkpoints share: the stale checkpoint's pack outlives it."""

  SHARED = ['chunk_pack_ckpt.0.gz']

  @classmethod
  def setUpClass(cls):
    cls.enterClassContext(mock.patch.dict(os.environ, {_COMPRESS: '1'}))
    super().setUpClass()


class ResaveTest(CrashTestCase):
  """Checkpoint 5 saved, then saved again with other content.

  Checkpoint 2 is saved (same content as the first 5) between them, so that
  the re-save's clean-up deletes it; a planted temporary is deleted too.
  """

  PLAN = '0:5,-:2,1:5'
  PLANT = True

  def test_recording_has_every_step(self):
    kinds = [event[0] for event in self.recorded if event[-1] == self.last]
    files = len(memory_checkpoint.checkpoint_files(make())) + 1
    # Staged files and the journal, their renames, the journal's deletion,
    # checkpoint 2's files and the planted temporary.
    self.assertEqual(kinds.count('create'), files + 1)
    self.assertEqual(kinds.count('rename'), files + 1)
    self.assertEqual(kinds.count('remove'), 1 + files + 1)
    self.assertIn(('remove', name_of(_PLANTED), self.last), self.recorded)

  def test_sigkill_at_every_event_of_a_resave_loses_nothing(self):
    commit = self.commit_point()
    before = self.iterations_saved(self.last - 1)
    after = self.iterations_saved(self.last)
    first = min(self.events_of(self.last, kind)[0]
                for kind in ('create', 'rename', 'remove'))
    last = len(self.recorded)
    for kill_after in range(first - 1, last + 1):
      with self.subTest(kill_after=kill_after,
                        event=self.recorded[kill_after - 1]):
        # Before the journal is in place: all of the old checkpoint 5; from
        # then on, all of the new one.
        self.check_kill(kill_after, self.number,
                        after if kill_after >= commit else before)


# The child of DiskFullResaveTest: argv = directory, fail_at, limit. Saves
# checkpoint 5, advances, and saves 5 again with RLIMIT_FSIZE at `limit`
# bytes: from the start if fail_at is 0, else from the fail_at-th file the
# save creates. Prints the errno of the save's error, or 'saved'.
_DISK_FULL_CHILD = '''
import resource
import signal
import sys

from dopamine_per.file_io import atomic_files
from tests.suites import crash_safety_test as t

directory, fail_at, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() raises EFBIG.
memory = t.make()
t.advance(memory, 0)
memory.save(directory, 5)
t.advance(memory, 1)
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
created = 0
real_create = atomic_files.create_temporary


def create_temporary(path):
  global created
  created += 1
  if created == fail_at:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
  return real_create(path)


atomic_files.create_temporary = create_temporary
if fail_at == 0:
  resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
try:
  memory.save(directory, 5)
except OSError as e:
  print(e.errno)
else:
  print('saved')
'''


class DiskFullResaveTest(absltest.TestCase):
  """A re-save of checkpoint 5 that runs out of file size (EFBIG)."""

  def _resave(self, fail_at: int, limit: int) -> str:
    directory = fixtures.temp_dir(self)
    child = fixtures.run_python(
        ['-c', _DISK_FULL_CHILD, directory, str(fail_at), str(limit)], 300)
    self.assertEqual(child.returncode, 0, child.stderr)
    self.assertEqual(child.stdout.strip(), str(errno.EFBIG), child.stderr)
    return directory

  def test_full_at_each_file_of_the_resave_or_from_its_start(self):
    # At every checkpoint file, the state file, then the journal; then at
    # 4 KB from the start (the observations' file, 24 KB gzip'd, passes it).
    files = len(memory_checkpoint.checkpoint_files(make())) + 1
    for fail_at, limit in [(n, 0) for n in range(1, files + 2)] + [(0, 4096)]:
      with self.subTest(fail_at=fail_at, limit=limit):
        directory = self._resave(fail_at, limit)
        # Nothing staged is left, checkpoint 5 is the first save's, and
        # saving works again.
        self.assertEqual([name for name in os.listdir(directory)
                          if is_temporary(name) or name.startswith(_JOURNAL)],
                         [])
        assert_resumes(self, directory, 5, [0], 5)


if __name__ == '__main__':
  absltest.main()
