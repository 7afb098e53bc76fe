"""Interleaved timing and Markdown helpers shared by the benchmarks.

On a shared, noisy machine a measurement of one implementation made a minute
after another's compares two different machines. Every benchmark here
therefore times *cases* (one operation of one implementation on one input
size) in *rounds*: a round times each case once, as a short burst of calls,
in a freshly shuffled order, and the rounds repeat. Noise then falls on all
cases alike, and the median over rounds of each case's per-call time is what
the tables report, with ratios of those medians.
"""

import contextlib
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, Hashable, Iterable, Iterator, List
from typing import Mapping, Optional, Sequence, Tuple

import numpy as np

__all__ = [
    'Case',
    'environment',
    'markdown_table',
    'format_microseconds',
    'format_targets',
    'median',
    'print_progress',
    'rotating',
    'run_interleaved',
    'shuffled_rounds',
    'speedup',
    'time_burst',
    'verdict',
]


class Case(object):
  """One thing to time: a call, and the environment it runs under.

  Attributes:
    call: callable without arguments doing one operation.
    environ: dict of environment variables set around each burst (outside
      the timed region), e.g. to choose dopamine_per's sum tree kernels.
    max_seconds: stop timing the case in later rounds once this much time
      has been spent on it and it has `min_rounds` samples (see
      `run_interleaved`); None for no limit. For calls that take seconds.
  """

  def __init__(self, call: Callable[[], object],
               environ: Optional[Mapping[str, str]] = None,
               max_seconds: Optional[float] = None):
    self.call = call
    self.environ = dict(environ or {})
    self.max_seconds = max_seconds


@contextlib.contextmanager
def environment(environ: Mapping[str, str]) -> Iterator[None]:
  """Sets environment variables for the duration of a `with` block."""
  saved = {name: os.environ.get(name) for name in environ}
  os.environ.update(environ)
  try:
    yield
  finally:
    for name, value in saved.items():
      if value is None:
        os.environ.pop(name, None)
      else:
        os.environ[name] = value


def time_burst(call: Callable[[], object], repeats: int) -> float:
  """Returns the mean microseconds per call of `repeats` calls of `call`."""
  start = time.perf_counter_ns()
  for _ in range(repeats):
    call()
  return (time.perf_counter_ns() - start) / repeats / 1e3


def _calibrate(case: Case, burst_seconds: float) -> int:
  """Returns how many calls of `case` make a burst of `burst_seconds`.

  After a warm-up call (and a second call if the first was slower than a
  burst), doubles a trial burst until it lasts a quarter of
  `burst_seconds`, so that one slow (cold) call cannot set the length.
  """
  target_us = burst_seconds * 1e6
  with environment(case.environ):
    # The warm-up; if it was slow, time one more call: a first call may
    # compile or load compiled code, which must not set the length.
    if (time_burst(case.call, 1) >= target_us and
        time_burst(case.call, 1) >= target_us):
      return 1
    calls = 1
    while True:
      per_call = time_burst(case.call, calls)
      if per_call * calls >= target_us / 4 or calls >= 1 << 20:
        return max(1, int(target_us / max(per_call, 1e-3)))
      calls *= 2


def rotating(pool: Sequence[Sequence[Any]],
             operation: Callable[..., object]) -> Callable[[], None]:
  """A call applying `operation` to the pool's argument tuples in turn.

  Each call takes the next tuple (cycling), so that no call is flattered by
  finding what the previous one left in the caches.
  """
  position = [0]

  def call():
    arguments = pool[position[0] % len(pool)]
    position[0] += 1
    operation(*arguments)
  return call


def shuffled_rounds(keys: Iterable[Hashable], rounds: int,
                    rng: np.random.Generator,
                    progress: Optional[Callable[[str], None]] = None
                   ) -> Iterator[Tuple[int, Hashable]]:
  """Yields (round, key): every key once a round, in a fresh random order.

  Args:
    keys: what to time, each once a round.
    rounds: int, the number of rounds.
    rng: numpy.random.Generator for the orders.
    progress: optional callable taking a str, told after every fifth of
      the rounds.
  """
  keys = list(keys)
  for round_number in range(rounds):
    for i in rng.permutation(len(keys)):
      yield round_number, keys[i]
    if progress and (round_number + 1) % max(1, rounds // 5) == 0:
      progress(f'round {round_number + 1}/{rounds}')


def run_interleaved(cases: Mapping[Hashable, Case], rounds: int,
                    burst_seconds: float, rng: np.random.Generator,
                    min_rounds: int = 3,
                    progress: Optional[Callable[[str], None]] = None
                   ) -> Dict[Hashable, List[float]]:
  """Times every case in interleaved, shuffled rounds.

  Each case is first called once (a warm-up) and its burst length set so
  that a burst lasts about `burst_seconds` (at least one call; see
  `_calibrate`).

  Args:
    cases: mapping from a key to a `Case`.
    rounds: int, the number of rounds.
    burst_seconds: float, the approximate duration of one burst.
    rng: numpy.random.Generator for the orders.
    min_rounds: int, rounds every case takes part in, whatever its
      `max_seconds`.
    progress: optional callable taking a str, for progress messages.

  Returns:
    dict mapping each key to its list of per-call microseconds, one per
    round the case took part in.
  """
  repeats = {key: _calibrate(case, burst_seconds)
             for key, case in cases.items()}
  samples = {key: [] for key in cases}
  spent = {key: 0.0 for key in cases}
  for round_number, key in shuffled_rounds(cases, rounds, rng, progress):
    case = cases[key]
    if (round_number >= min_rounds and case.max_seconds is not None and
        spent[key] >= case.max_seconds):
      continue
    with environment(case.environ):
      per_call = time_burst(case.call, repeats[key])
    samples[key].append(per_call)
    spent[key] += per_call * repeats[key] / 1e6
  return samples


def print_progress(text: str) -> None:
  """Prints a progress message to stderr (picklable, for child processes)."""
  print(text, file=sys.stderr, flush=True)


def median(values: Sequence[float]) -> float:
  """The median of a non-empty sequence."""
  return statistics.median(values)


def format_microseconds(value: Optional[float]) -> str:
  """Formats a time in microseconds for a table ('—' for None)."""
  if value is None:
    return '—'
  if value >= 1000:
    return f'{value:,.0f}'
  if value >= 10:
    return f'{value:.1f}'
  return f'{value:.2f}'


def speedup(results: Mapping[Hashable, float], key: Tuple[Any, ...],
            peer: str, ours: str) -> Optional[float]:
  """The ratio peer / ours of the medians `results[key + (name,)]`.

  Above 1, ours is faster; None if either median is missing.
  """
  peer_time = results.get(key + (peer,))
  ours_time = results.get(key + (ours,))
  if peer_time is None or ours_time is None:
    return None
  return peer_time / ours_time


def verdict(ratio: float, required: float) -> str:
  """'2.3x (met)' or '0.8x (NOT met)' for a ratio and its target."""
  return f'{ratio:.2f}x ({"met" if ratio >= required else "NOT met"})'


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]],
                   align: Optional[Sequence[str]] = None) -> List[str]:
  """Returns the lines of a Markdown table.

  Args:
    header: the column titles.
    rows: the cells, as strings.
    align: per column, 'l' or 'r'; default: the first column left, the rest
      right.

  Returns:
    list of str, one per line.
  """
  if align is None:
    align = ['l'] + ['r'] * (len(header) - 1)
  rule = ['---' if a == 'l' else '---:' for a in align]
  return (['| ' + ' | '.join(header) + ' |', '|' + '|'.join(rule) + '|'] +
          ['| ' + ' | '.join(row) + ' |' for row in rows])


def format_targets(targets: Sequence[Sequence[object]],
                   ours: Sequence[str]) -> List[str]:
  """Returns a Markdown table of targets and whether each of ours meets them.

  Args:
    targets: rows (target, case, required ratio, {ours name: ratio or
      None}); a ratio is peer / ours, so that above `required` is met.
    ours: the names of our variants, one column each.

  Returns:
    list of str, the table's lines.
  """
  rows = []
  for target, case, required, ratios in targets:
    row = [str(target), str(case), f'{required:g}x']
    for name in ours:
      ratio = ratios.get(name)
      row.append('—' if ratio is None else verdict(ratio, required))
    rows.append(row)
  return markdown_table(['target', 'case', 'required'] + list(ours), rows,
                        align=['l', 'l', 'r'] + ['r'] * len(ours))
