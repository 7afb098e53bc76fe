"""What the benchmark sections share besides timing (see timing.py).

Our implementations are named `ours-<kernels>` ('ours-native', 'ours-numpy';
plain 'ours' is ours with the default kernels), and run with
the kernels their name gives chosen through the environment variable the
library reads.
The peers (Dopamine's TF replay memory, cpprb) take part when installed.
Each section prints a stand-alone document: a title, the machine, the
section's tables.

Each section module starts with the same three lines, which make the
repository root importable when it is run as a script (`python
benchmarks/x.py`): they cannot live here, since they are what makes this
module importable.
"""

import concurrent.futures
import datetime
import importlib
import multiprocessing
import os
import platform
import sys
from typing import Dict, List, Mapping, Optional

from absl import flags
import numpy as np

from benchmarks import timing
from dopamine_per.replay_memory.kernels import choice

__all__ = [
    'OURS',
    'OURS_PREFIX',
    'available_ours',
    'cpprb_available',
    'define_output_flag',
    'describe_machine',
    'document',
    'dopamine_available',
    'in_fresh_process',
    'kernels_environ',
    'kernels_of',
    'load_average',
    'log2_name',
    'write_report',
]

OURS_PREFIX = 'ours-'
# Ours with each kernel set, the default (native) first (the tables'
# column order); 'ours-native' where its extension builds
# (`choice.available`).
OURS = ('ours-native', 'ours-numpy')


def kernels_of(name: str) -> Optional[str]:
  """The kernels an implementation's name gives ('numpy'), or None."""
  if name.startswith(OURS_PREFIX):
    return name[len(OURS_PREFIX):]
  return None


def kernels_environ(kernels: Optional[str]) -> Dict[str, str]:
  """The environment that chooses `kernels` ({} for None: the default).

  The variable is the one the library reads first (`choice.ENV`), so that
  no other kernel variable set outside overrides it.
  """
  return {choice.ENV: kernels} if kernels else {}


def available_ours() -> List[str]:
  """Ours with each kernel set installed here, in `OURS` order."""
  return [name for name in OURS
          if kernels_of(name) in choice.available()]


def _importable(module: str) -> bool:
  try:
    importlib.import_module(module)
  except ImportError:
    return False
  return True


def dopamine_available() -> bool:
  """Whether dopamine-rl's TF replay memory (and sum tree) can be imported."""
  return _importable('dopamine.tf.replay_memory.sum_tree')


def cpprb_available() -> bool:
  """Whether cpprb can be imported."""
  return _importable('cpprb')


def _first_field(path: str, prefix: str) -> Optional[str]:
  """What follows `prefix` on the first line of `path` starting with it."""
  try:
    with open(path, encoding='utf-8') as lines:
      for line in lines:
        if line.startswith(prefix):
          return line[len(prefix):]
  except OSError:
    pass
  return None


def describe_machine() -> Dict[str, str]:
  """Returns a dict describing the machine, Python and NumPy."""
  cpu = _first_field('/proc/cpuinfo', 'model name')
  cpu = (cpu.split(':', 1)[1].strip() if cpu is not None else
         platform.processor() or platform.machine())
  try:
    usable = len(os.sched_getaffinity(0))
  except AttributeError:
    usable = os.cpu_count()
  memory = _first_field('/proc/meminfo', 'MemTotal:')
  description = {
      'CPU': cpu,
      'cores': f'{usable} usable of {os.cpu_count()}',
  }
  if memory is not None:
    description['memory'] = f'{int(memory.split()[0]) / 2**20:.1f} GiB'
  description.update({
      'OS': platform.platform(),
      'Python': platform.python_version(),
      'NumPy': np.__version__,
      'date': datetime.datetime.now(datetime.timezone.utc).strftime(
          '%Y-%m-%d %H:%M UTC'),
  })
  return description


def load_average() -> str:
  """The 1-minute load average, e.g. '0.42' ('unknown' where unavailable)."""
  try:
    return f'{os.getloadavg()[0]:.2f}'
  except OSError:
    return 'unknown'


def in_fresh_process(function, *args, progress=None):
  """Returns function(*args, progress=...) computed in a new interpreter.

  Each section (and each memory of the scale section) gets a process of its
  own, so that what one leaves behind (gigabytes of freed replay memory, the
  allocator's state, threads) cannot change the next one's timings or
  resident memory. The child prints its progress to stderr.
  """
  context = multiprocessing.get_context('spawn')
  with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
    return pool.submit(function, *args, progress=(
        timing.print_progress if progress else None)).result()


def log2_name(value: int) -> str:
  """'2**17' for a power of two, else the number."""
  log = int(value).bit_length() - 1
  return f'2**{log}' if 2**log == value else str(value)


def define_output_flag() -> None:
  """Defines --output, the Markdown file a section run alone writes."""
  flags.DEFINE_string('output', '',
                      'Markdown file to write the results to; empty: print '
                      'only (`python -m benchmarks` writes RESULTS.md).')


def document(title: str, machine: Mapping[str, str], section: str) -> str:
  """A stand-alone document: a `#` title, the machine, then the section."""
  lines = [f'# {title}', '']
  lines += [f'- {name}: {value}' for name, value in machine.items()]
  return '\n'.join(lines) + '\n\n' + section


def write_report(report: str, output: str) -> None:
  """Prints `report`, and writes it to the file `output` unless empty."""
  print(report, flush=True)
  if output:
    with open(output, 'w', encoding='utf-8') as out:
      out.write(report)
    print(f'Written to {output}.', file=sys.stderr)
