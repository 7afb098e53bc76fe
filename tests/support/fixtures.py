"""Set-ups most test files share: paths, temporary directories, subprocesses.

Plain functions rather than pytest fixtures: Bazel runs each test file as a
program, where tests/conftest.py is not loaded. Nothing here imports
TensorFlow or Ray.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, Sequence

__all__ = ['REPO_ROOT', 'DEADLINE_S', 'repo_path', 'temp_dir',
           'file_contents', 'subprocess_env', 'run_python', 'wait_until',
           'resident_bytes']

# The checkout (under Bazel, the runfiles tree that mirrors it).
REPO_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The longest a test waits, by default, for another thread or process to
# reach a state.
DEADLINE_S = 30.0


def repo_path(*parts: str) -> str:
  """The path of `parts` below the repository root, e.g. ('configs', ...)."""
  return os.path.join(REPO_ROOT, *parts)


def resident_bytes() -> int:
  """This process's resident set, in bytes (Linux's /proc/self/statm)."""
  with open('/proc/self/statm') as statm:
    return int(statm.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')


def temp_dir(test_case) -> str:
  """A new directory that `test_case`'s cleanup deletes; returns its path.

  (absltest's create_tempdir needs absl's flags parsed, which pytest does
  not do.)
  """
  path = tempfile.mkdtemp()
  test_case.addCleanup(shutil.rmtree, path, ignore_errors=True)
  return path


def file_contents(directory: str) -> Dict[str, bytes]:
  """{name: bytes} of every file directly in `directory`."""
  contents = {}
  for name in sorted(os.listdir(directory)):
    with open(os.path.join(directory, name), 'rb') as f:
      contents[name] = f.read()
  return contents


def subprocess_env(**variables: str) -> Dict[str, str]:
  """os.environ for a Python subprocess that imports this checkout.

  PYTHONPATH is the repository root, then this process's sys.path (the
  child finds what this process found, under pytest or Bazel alike);
  TensorFlow's C++ INFO and WARNING lines are silenced; RAY_ADDRESS is
  dropped, so that a child starting Ray starts its own. `variables` are set
  last.
  """
  env = dict(os.environ)
  env['PYTHONPATH'] = os.pathsep.join([REPO_ROOT] +
                                      [path for path in sys.path if path])
  env['TF_CPP_MIN_LOG_LEVEL'] = '2'
  env.pop('RAY_ADDRESS', None)
  env.update(variables)
  return env


def run_python(args: Sequence[str], timeout: float,
               **variables: str) -> subprocess.CompletedProcess:
  """Runs Python with `args` in the checkout; its output captured as text.

  The environment is `subprocess_env(**variables)`; the exit status is not
  checked.
  """
  return subprocess.run([sys.executable] + list(args),
                        env=subprocess_env(**variables), cwd=REPO_ROOT,
                        capture_output=True, text=True, timeout=timeout)


def wait_until(condition: Callable[[], bool],
               timeout_s: float = DEADLINE_S,
               message: str = 'condition not met') -> None:
  """Polls `condition()` every 10 ms until it holds.

  Raises:
    AssertionError: If it still does not after `timeout_s`, with `message`.
  """
  deadline = time.monotonic() + timeout_s
  while not condition():
    if time.monotonic() > deadline:
      raise AssertionError('{} within {} s'.format(message, timeout_s))
    time.sleep(0.01)
