"""Gzip bombs, and loads whose peak memory is measured in a fresh process.

The tests of bounded reads (issue 12) craft files that would inflate to
gigabytes and require them refused with little memory used: each load runs
in a fresh Python, under an address-space limit 4 GiB above what it holds
when the loads start (a regression fails with MemoryError instead of
exhausting the machine), and reports its outcome and how much the peak
resident memory grew.
"""

import gzip
import json
import subprocess
import sys
import textwrap
from typing import Dict, Mapping

from tests.support import fixtures

__all__ = ['gzip_bomb', 'measure_loads']

_SCRIPT = textwrap.dedent('''
    import json, resource
    from dopamine_per.file_io import atomic_files, gzip_files, safe_pickle
    {setup}
    loads = {loads}
    with open('/proc/self/statm') as statm:
      used = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + (4 << 30),) * 2)
    reports = {{}}
    for name, load in loads.items():
      before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
      try:
        load()
        outcome = 'loaded'
      except atomic_files.CheckpointError as e:
        outcome = 'refused: ' + str(e)[:1000]
      except BaseException as e:
        outcome = 'raised {{}}: {{}}'.format(type(e).__name__, str(e)[:200])
      growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
      reports[name] = {{'outcome': outcome, 'peak_growth_kib': growth}}
    print(json.dumps(reports))
''')


def gzip_bomb(prefix: bytes, inflated_bytes: int) -> bytes:
  """Gzip of `prefix`, then `inflated_bytes` zeros in repeated 64 MiB members
  (gzip readers read them as one stream): about 1 KB per MB."""
  chunk = 1 << 26
  member = gzip.compress(b'\0' * chunk, compresslevel=9, mtime=0)
  return gzip.compress(prefix, mtime=0) + member * (inflated_bytes // chunk)


def measure_loads(loads: Mapping[str, str], setup: str = '',
                  timeout: float = 300) -> Dict[str, Dict]:
  """Runs each expression of `loads` in one fresh Python, after `setup`.

  Args:
    loads: name -> a Python expression that loads something; atomic_files,
      gzip_files and safe_pickle are imported.
    setup: statements run first, outside the measure and the limit.
    timeout: seconds before the process is killed (an error).

  Returns:
    name -> {'outcome': 'loaded', 'refused: <message>' (a CheckpointError)
    or 'raised <type>: <message>', 'peak_growth_kib': int}.

  Raises:
    AssertionError: the process died (a crash, as a signal) or failed.
  """
  code = _SCRIPT.format(setup=setup, loads='{' + ', '.join(
      '{!r}: lambda: {}'.format(name, load) for name, load in loads.items())
                        + '}')
  done = subprocess.run([sys.executable, '-c', code], cwd=fixtures.REPO_ROOT,
                        capture_output=True, text=True, timeout=timeout,
                        check=False)
  if done.returncode:
    raise AssertionError('the loads died: {} {}'.format(
        done.returncode, done.stderr[-2000:]))
  return json.loads(done.stdout.strip().splitlines()[-1])
