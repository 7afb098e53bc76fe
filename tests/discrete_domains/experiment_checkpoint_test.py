"""Saving an experiment checkpoint again loses neither the old nor the new one.

Issue 22, points 1 and 3 (docs/reliability.md). Each killed save is a child
forked from one process that imported TensorFlow once (sessions are created
after the fork), so a kill costs a couple of seconds, not a cold start.
"""

# The tests read the runner's and the agent's state, as a user's debugger would.
# pylint: disable=protected-access

import hashlib
import json
import os
import re
import resource
import shutil
import signal
import tempfile
import traceback
from typing import Any, Dict, List, Optional
from unittest import mock

from absl.testing import absltest
import numpy as np

from dopamine_per.discrete_domains import experiment_resume
from dopamine_per.file_io import transaction
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from tests.support import fault_injection
from tests.support import fixtures
from tests.support import gin_util
from tests.support import tiny_cartpole

# The template run checkpoints iterations 0, 1 and 2
# (tiny_cartpole.TRAINED_ITERATIONS); the save under test resumes from 1 and
# saves 2 again, with fewer training steps (so the two checkpoints 2 differ
# in every counter) and a checkpoint_duration of 2 (so it also prunes
# checkpoint 0, by its marker).
_RESAVED = 2
_RESAVE_BINDINGS = [
    'get_latest_checkpoint_number.override_number = {}'.format(_RESAVED - 1),
    'Runner.training_steps = 30',
    'Checkpointer.checkpoint_duration = 2',
]
# The forked jobs evaluate longer: ckpt.N, which logs every evaluation
# episode, then outgrows the replay memory's files as much as
# test_full_disk_leaves_the_old_checkpoint needs.
_JOB_BINDINGS = ['Runner.evaluation_steps = 300']
_JOURNAL = 'ckpt_journal'
_STAGING = '.ckpt_staging'
# atomic_files' temporary names end in 8 random characters.
_RANDOM_PART = re.compile(r'\.[a-z0-9_]{8}\.tmp$')
# The zygote: runs the jobs of argv[1] (JSON), writes their exit codes to
# argv[2].
_ZYGOTE = ('import sys\n'
           'from tests.discrete_domains import experiment_checkpoint_test '
           'as t\n'
           't.serve(sys.argv[1], sys.argv[2])\n')
_ZYGOTE_TIMEOUT = 1800
# A forked job's own bound (SIGALRM kills it): a train job takes ~30 s, a
# re-save or a resume a few seconds.
_JOB_TIMEOUT = 300


def fingerprint(runner) -> Dict[str, Any]:
  """What a checkpoint restores: counters, variables, the memory's count."""
  agent = runner._agent
  digest = hashlib.sha256()
  for value in agent._sess.run(
      agent._sess.graph.get_collection('variables')):
    digest.update(np.ascontiguousarray(value).tobytes())
  return {'training_steps': int(agent.training_steps),
          'add_count': int(agent._replay.memory.add_count),
          'variables': digest.hexdigest()}


def _listing(root: str) -> List[str]:
  """Every file and directory below root, as sorted relative paths."""
  found = []
  for directory, dirs, files in os.walk(root):
    for name in dirs + files:
      found.append(os.path.relpath(os.path.join(directory, name), root))
  return sorted(found)


# ------------------------------------------------------- the forked jobs


class _Watcher(object):
  """Records each file-system event below a directory; may SIGKILL after one.

  Wraps `os.replace`, `os.rename` (a rename: its destination), `os.remove`,
  `os.unlink`, `os.rmdir` (their path, also relative to a ``dir_fd`` as
  `shutil.rmtree` calls them) and `os.fsync` of a regular file (a file
  written in full), whichever module calls them. TensorFlow's own writes
  (C++) are not seen; they happen before the memory's.
  """

  def __init__(self, root: str, events_path: Optional[str],
               kill_after: Optional[int]):
    self._root = root
    self._events = open(events_path, 'w') if events_path else None
    self._kill_after = kill_after
    self._count = 0

  def install(self) -> None:
    for name, kind, argument in (('replace', 'rename', 1),
                                 ('rename', 'rename', 1),
                                 ('remove', 'remove', 0),
                                 ('unlink', 'remove', 0),
                                 ('rmdir', 'rmdir', 0)):
      setattr(os, name, self._wrapped(getattr(os, name), kind, argument))
    real_fsync = os.fsync

    def fsync(fd):
      real_fsync(fd)
      number = fd if isinstance(fd, int) else fd.fileno()
      path = os.readlink('/proc/self/fd/{}'.format(number))
      if os.path.isfile(path):
        self._record('fsync', path)
    os.fsync = fsync
    if self._kill_after == 0:  # Before the first event.
      os.kill(os.getpid(), signal.SIGKILL)

  def _wrapped(self, real, kind, argument):
    def call(*args, **kwargs):
      result = real(*args, **kwargs)
      path = os.fsdecode(args[argument])
      dir_fd = kwargs.get('dir_fd')
      if dir_fd is not None:
        path = os.path.join(os.readlink('/proc/self/fd/{}'.format(dir_fd)),
                            path)
      self._record(kind, path)
      return result
    return call

  def _record(self, kind: str, path: str) -> None:
    path = os.path.abspath(path)
    if not path.startswith(self._root + os.sep):
      return
    self._count += 1
    if self._events:
      self._events.write('{} {}\n'.format(kind, _RANDOM_PART.sub(
          '.TMP', os.path.relpath(path, self._root))))
      self._events.flush()
    if self._count == self._kill_after:
      os.kill(os.getpid(), signal.SIGKILL)


def _train_job(job: Dict[str, Any]) -> None:
  tiny_cartpole.runner(job['base_dir'], tiny_cartpole.TRAINED_ITERATIONS,
                       _JOB_BINDINGS).run_experiment()


def _resave_job(job: Dict[str, Any]) -> None:
  """Resumes from checkpoint _RESAVED - 1 and saves _RESAVED again.

  It writes what it saves to job['saved'], then records the save's events
  (job['events']) and kills itself after event job['kill_after'], or limits
  the size of its files (job['file_size_limit'] = [when, bytes]) from the
  save's start or the replay memory's save on (when: 'start' or 'memory').
  """
  runner = tiny_cartpole.runner(job['base_dir'], _RESAVED + 1,
                                _JOB_BINDINGS + _RESAVE_BINDINGS)
  assert runner._start_iteration == _RESAVED, runner._start_iteration
  original = runner._checkpoint_experiment
  checkpoint_dir = os.path.join(job['base_dir'], 'checkpoints')

  when, limit = job.get('file_size_limit') or (None, None)

  def limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

  def checkpoint(iteration):
    with open(job['saved'], 'w') as f:
      json.dump(fingerprint(runner), f)
    if when == 'start':
      limit_file_size()
    elif when == 'memory':
      # Where the memory's save starts, in the background or not.
      take_snapshot = memory_checkpoint.take_snapshot

      def limited(*args):
        limit_file_size()
        return take_snapshot(*args)
      memory_checkpoint.take_snapshot = limited
    _Watcher(checkpoint_dir, job.get('events'),
             job.get('kill_after')).install()
    original(iteration)

  runner._checkpoint_experiment = checkpoint
  runner.run_experiment()


def _resume_job(job: Dict[str, Any]) -> None:
  """A fresh Runner on job['base_dir']: where it starts, what it loaded."""
  try:
    runner = tiny_cartpole.runner(job['base_dir'], _RESAVED + 2,
                                  _JOB_BINDINGS)
    result = {'start': runner._start_iteration,
              'fingerprint': fingerprint(runner)}
  except experiment_resume.CannotResumeError as e:
    result = {'error': e.message}
  result['files'] = _listing(os.path.join(job['base_dir'], 'checkpoints'))
  with open(job['result'], 'w') as f:
    json.dump(result, f)


_JOBS = {'train': _train_job, 'resave': _resave_job, 'resume': _resume_job}


def serve(jobs_path: str, results_path: str) -> None:
  """Runs each job in a forked child, in order; writes their exit codes.

  A job is a dict with 'op': 'copy' (a directory tree, here) or a key of
  `_JOBS` (in a child, which exits with status 0, or 3 after writing its
  traceback to job['error'], or is killed by SIGALRM after _JOB_TIMEOUT
  seconds).
  """
  with open(jobs_path) as f:
    jobs = json.load(f)
  codes = []
  for job in jobs:
    if job['op'] == 'copy':
      shutil.copytree(job['source'], job['destination'])
      codes.append(0)
      continue
    pid = os.fork()
    if pid == 0:
      code = 0
      try:
        signal.alarm(_JOB_TIMEOUT)
        try:
          _JOBS[job['op']](job)
        except BaseException:  # pylint: disable=broad-except
          code = 3
          # A file size limit would cut the traceback.
          resource.setrlimit(resource.RLIMIT_FSIZE,
                             (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
          with open(job['error'], 'w') as f:
            f.write(traceback.format_exc())
      finally:
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    codes.append(os.waitstatus_to_exitcode(status))
  with open(results_path, 'w') as f:
    json.dump(codes, f)


def _run_jobs(directory: str, jobs: List[Dict[str, Any]]) -> List[int]:
  """Runs `jobs` in a zygote process; returns their exit codes."""
  jobs_path = os.path.join(directory, 'jobs.json')
  results_path = os.path.join(directory, 'results.json')
  with open(jobs_path, 'w') as f:
    json.dump(jobs, f)
  child = fixtures.run_python(['-c', _ZYGOTE, jobs_path, results_path],
                               _ZYGOTE_TIMEOUT)
  if child.returncode != 0:
    raise AssertionError('the zygote failed: ' + child.stderr[-3000:])
  with open(results_path) as f:
    return json.load(f)


def _job_error(job: Dict[str, Any]) -> str:
  """What a failed job left in job['error'] (its traceback), for messages."""
  try:
    with open(job['error']) as f:
      return '{}:\n{}'.format(job['op'], f.read()[-3000:])
  except FileNotFoundError:
    return '{}: no traceback'.format(job['op'])


def _read_json(path: str) -> Any:
  with open(path) as f:
    return json.load(f)


def _read_events(path: str) -> List[str]:
  with open(path) as f:
    return f.read().splitlines()


# ---------------------------------------------------------------- the tests


class ResaveKillTest(absltest.TestCase):
  """A re-save of checkpoint 2 killed at each step, or by a full disk."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = tempfile.mkdtemp()
    cls.template = os.path.join(cls.dir, 'template')
    recording = os.path.join(cls.dir, 'recording')
    old = os.path.join(cls.dir, 'old')
    cls.recorded = {name: os.path.join(cls.dir, 'recorded_' + name)
                    for name in ('events', 'saved', 'resumed', 'old')}
    jobs = [
        {'op': 'train', 'base_dir': cls.template,
         'error': os.path.join(cls.dir, 'train_error')},
        {'op': 'copy', 'source': cls.template, 'destination': recording},
        {'op': 'copy', 'source': cls.template, 'destination': old},
        {'op': 'resume', 'base_dir': old, 'result': cls.recorded['old'],
         'error': os.path.join(cls.dir, 'old_error')},
        {'op': 'resave', 'base_dir': recording,
         'events': cls.recorded['events'], 'saved': cls.recorded['saved'],
         'error': os.path.join(cls.dir, 'recording_error')},
        {'op': 'resume', 'base_dir': recording,
         'result': cls.recorded['resumed'],
         'error': os.path.join(cls.dir, 'resumed_error')},
    ]
    codes = _run_jobs(cls.dir, jobs)
    if codes != [0] * len(codes):
      raise AssertionError('the recording failed: {}\n{}'.format(
          codes, '\n'.join(_job_error(job) for job, code in zip(jobs, codes)
                           if code)))
    cls.events = _read_events(cls.recorded['events'])
    cls.old = _read_json(cls.recorded['old'])['fingerprint']
    cls.new = _read_json(cls.recorded['saved'])
    cls.template_files = _listing(os.path.join(cls.template, 'checkpoints'))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.dir, ignore_errors=True)
    super().tearDownClass()

  def _event_number(self, event: str) -> int:
    """The 1-based number of the (only) recorded event `event`."""
    numbers = [n for n, e in enumerate(self.events, start=1) if e == event]
    self.assertLen(numbers, 1, event)
    return numbers[0]

  def test_recording_shows_the_order_the_guarantee_relies_on(self):
    self.assertEqual(_read_json(self.recorded['resumed'])['start'],
                     _RESAVED + 1)
    self.assertEqual(_read_json(self.recorded['resumed'])['fingerprint'],
                     self.new)
    for key in ('training_steps', 'add_count', 'variables'):
      self.assertNotEqual(self.old[key], self.new[key], key)
    marker = 'sentinel_checkpoint_complete.{}'.format(_RESAVED)
    commit = self._event_number('rename ' + _JOURNAL)
    renames = [e for e in self.events[commit:] if e.startswith('rename ')]
    # After the journal, every file of the checkpoint is renamed into place
    # (the marker last), then the journal and the staging directory go,
    # then the stale checkpoint 0: its marker first.
    self.assertEqual(renames[-1], 'rename ' + marker)
    self.assertIn('rename ckpt.{}'.format(_RESAVED), renames)
    self.assertIn('rename tf_ckpt-{}.index'.format(_RESAVED), renames)
    self.assertIn('rename add_count_ckpt.{}.gz'.format(_RESAVED), renames)
    self.assertLess(self.events.index(renames[-1]),
                    self._event_number('remove ' + _JOURNAL))
    self.assertLess(self._event_number('remove ' + _JOURNAL),
                    self._event_number('rmdir ' + _STAGING))
    stale = [e for e in self.events[commit:]
             if re.match(r'remove [^/]*[.-]0(\.|$)', e)]
    self.assertEqual(stale[0], 'remove sentinel_checkpoint_complete.0')
    self.assertEqual(
        sorted(e.split(' ')[1] for e in stale),
        sorted(name for name in self.template_files
               if re.search(r'[.-]0(\.|$)', name)))
    # Before the journal nothing outside the staging directory changed name.
    for event in self.events[:commit - 1]:
      kind, path = event.split(' ')
      self.assertTrue(kind == 'fsync' or path.startswith(_STAGING + '/') or
                      path.startswith('.'), event)

  def _resave_and_resume(self, prefix: str,
                         cases: List[Dict[str, Any]]) -> List[Any]:
    """Per case, re-saves checkpoint 2 of a copy of the template, resumes it.

    Args:
      prefix: names the copies.
      cases: the re-save jobs' options ('kill_after' or 'file_size_limit').

    Returns:
      Per case, (the re-save's exit code, its job, the resume's exit code
      and job); the job's files hold what each wrote.
    """
    jobs = []
    for number, options in enumerate(cases):
      base_dir = os.path.join(self.dir, '{}_{}'.format(prefix, number))
      resave = dict(options, op='resave', base_dir=base_dir,
                    saved=base_dir + '_saved', error=base_dir + '_error')
      if 'kill_after' in options:  # A size limit would cut the events.
        resave['events'] = base_dir + '_events'
      jobs += [
          {'op': 'copy', 'source': self.template, 'destination': base_dir},
          resave,
          {'op': 'resume', 'base_dir': base_dir,
           'result': base_dir + '_resumed', 'error': base_dir + '_error2'},
      ]
    codes = _run_jobs(self.dir, jobs)
    return [(codes[i + 1], jobs[i + 1], codes[i + 2], jobs[i + 2])
            for i in range(0, len(jobs), 3)]

  def _resumed(self, code: int, job: Dict[str, Any]) -> Dict[str, Any]:
    """A resume job's result, checked: at 3, no dot-file or journal left."""
    self.assertEqual(code, 0, _job_error(job))
    resumed = _read_json(job['result'])
    self.assertNotIn('error', resumed)
    self.assertEqual(resumed['start'], _RESAVED + 1)
    for path in resumed['files']:
      self.assertFalse(os.path.basename(path).startswith('.'), path)
      self.assertNotEqual(path, _JOURNAL)
    return resumed

  def test_sigkill_at_every_step_resumes_the_old_or_the_new_checkpoint(self):
    commit = self._event_number('rename ' + _JOURNAL)
    kills = range(len(self.events) + 1)
    outcomes = self._resave_and_resume(
        'kill', [{'kill_after': kill_after} for kill_after in kills])
    for kill_after, (code, resave, *resume) in zip(kills, outcomes):
      event = self.events[kill_after - 1] if kill_after else 'the start'
      with self.subTest(kill_after=kill_after, event=event):
        self.assertEqual(code, -signal.SIGKILL, _job_error(resave))
        self.assertEqual(_read_events(resave['events']),
                         self.events[:kill_after])
        # The new checkpoint once the journal is in place, not before.
        self.assertEqual(self._resumed(*resume)['fingerprint'],
                         self.old if kill_after < commit
                         else _read_json(resave['saved']))

  def test_full_disk_leaves_the_old_checkpoint(self):
    def size(name):
      return os.path.getsize(os.path.join(self.template, 'checkpoints',
                                          name))
    memory = max(size(name) for name in self.template_files
                 if name.endswith('_ckpt.{}.gz'.format(_RESAVED)))
    data = size('ckpt.{}'.format(_RESAVED))
    self.assertLess(memory, data - 500, 'the limits below need it')
    # No file can grow past 1 byte from the save's start (TF's fails), or
    # from the replay memory's on (after TF's files; its largest file
    # fails), or, from there too, past the memory's files (ckpt.N fails).
    limits = [['start', 1], ['memory', 1000],
              ['memory', (memory + data) // 2]]
    outcomes = self._resave_and_resume(
        'full', [{'file_size_limit': limit} for limit in limits])
    for limit, (code, resave, *resume) in zip(limits, outcomes):
      with self.subTest(limit=limit):
        self.assertEqual(code, 3, _job_error(resave))
        with open(resave['error']) as f:
          self.assertRegex(f.read(), r'File too large|EFBIG|errno 27')
        self.assertEqual(self._resumed(*resume)['fingerprint'], self.old)


class ResaveFailureTest(absltest.TestCase):
  """A re-save that raises part-way leaves the old checkpoint loadable."""

  def setUp(self):
    super().setUp()
    gin_util.hide_dopamine_configurables(self)
    self.dir = fixtures.temp_dir(self)
    # What checkpoint _RESAVED of the trained run restores.
    old = tiny_cartpole.copy_trained_run(os.path.join(self.dir, 'old'))
    self.old = fingerprint(tiny_cartpole.runner(old, _RESAVED + 2))

  def _assert_resumes_the_old_checkpoint(self, base_dir: str) -> None:
    runner = tiny_cartpole.runner(base_dir, _RESAVED + 2)
    self.assertEqual(runner._start_iteration, _RESAVED + 1)
    self.assertEqual(fingerprint(runner), self.old)
    for path in _listing(os.path.join(base_dir, 'checkpoints')):
      self.assertFalse(os.path.basename(path).startswith('.'), path)

  def test_an_exception_at_each_point_leaves_the_old_checkpoint(self):
    failing = fault_injection.failing
    points = {
        # The replay memory's save (in the background), after TF wrote its
        # files.
        'memory': (memory_checkpoint, 'stage',
                   failing(memory_checkpoint.stage)),
        # An agent file staged for the switch, after others were.
        'adopt': (transaction.Transaction, 'adopt', failing(
            transaction.Transaction.adopt,
            'invalid_range_ckpt.{}.gz'.format(_RESAVED))),
        # ckpt.N, then the marker.
        'data': (transaction.Transaction, 'write', failing(
            transaction.Transaction.write, 'ckpt.{}'.format(_RESAVED))),
        'marker': (transaction.Transaction, 'write', failing(
            transaction.Transaction.write,
            'sentinel_checkpoint_complete.{}'.format(_RESAVED))),
        # The journal: the commit point is never reached.
        'journal': (transaction, 'commit', failing(transaction.commit,
                                                    _JOURNAL)),
    }
    for point, (owner, name, replacement) in points.items():
      with self.subTest(point=point):
        base_dir = tiny_cartpole.copy_trained_run(
            os.path.join(self.dir, point))
        runner = tiny_cartpole.runner(base_dir, _RESAVED + 1,
                                      _RESAVE_BINDINGS)
        with mock.patch.object(owner, name, replacement):
          with self.assertRaisesRegex(OSError, fault_injection.INJECTED):
            runner.run_experiment()
        self._assert_resumes_the_old_checkpoint(base_dir)


if __name__ == '__main__':
  absltest.main()
