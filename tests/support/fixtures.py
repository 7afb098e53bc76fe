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
           'subprocess_env', 'run_python', 'wait_until']

# The checkout (under Bazel, the runfiles tree that mirrors it).
REPO_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The longest a test waits, by default, for another thread or process to
# reach a state.
DEADLINE_S = 30.0


def repo_path(*parts: str) -> str:
  """The path of `parts` below the repository root, e.g. ('configs', ...)."""
  return os.path.join(REPO_ROOT, *parts)


def temp_dir(test_case) -> str:
  """Creates a directory that is deleted, with its contents, after the test.

  (Not absltest's create_tempdir, which needs absl's flags parsed, and they
  are not under pytest.)

  Args:
    test_case: the unittest.TestCase whose cleanup deletes the directory.

  Returns:
    The directory's path.
  """
  path = tempfile.mkdtemp()
  test_case.addCleanup(shutil.rmtree, path, ignore_errors=True)
  return path


def subprocess_env(**variables: str) -> Dict[str, str]:
  """The environment for a Python subprocess that imports this checkout.

  PYTHONPATH lists the repository root, then this process's own sys.path
  (so that the child finds what this process found, under pytest or Bazel
  alike); TensorFlow's C++ INFO and WARNING lines are silenced, and
  RAY_ADDRESS, which a local Ray of this process sets, is dropped so that
  a child starting Ray starts its own.

  Args:
    **variables: further variables, set last (over the ones above).

  Returns:
    A copy of os.environ with those changes.
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
  """Polls `condition` until it holds; fails after `timeout_s` seconds.

  Args:
    condition: callable() -> bool, checked every 10 ms.
    timeout_s: seconds before giving up.
    message: what did not happen, for the failure.

  Raises:
    AssertionError: If `condition` still does not hold after `timeout_s`.
  """
  deadline = time.monotonic() + timeout_s
  while not condition():
    if time.monotonic() > deadline:
      raise AssertionError('{} within {} s'.format(message, timeout_s))
    time.sleep(0.01)
