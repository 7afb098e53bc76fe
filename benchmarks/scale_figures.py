r"""The scale section's figures: derived, extrapolated, checked (issue 33).

benchmarks/scale_benchmark.py measures; this module turns its raw figures
(`scale_benchmark.measure_memory`'s dict, and `scale_step.measure_steps`'
for the staged step) into the table's (`METRICS`, `derive`), extrapolates
them to 2**20 (`extrapolate`: per-operation times and ratios unchanged;
bytes and whole-memory times multiplied by 2**20 / capacity), picks the
game the targets are checked on (`least_compressible`) and checks issue
33's targets there (`evaluate_targets`; `targets` gives each as a number
and as text, for the headline table and the plot of scale_summary.py).
"""

from typing import Any, Dict, List, Mapping, Optional, Tuple

from benchmarks import compression_benchmark
from benchmarks import scale_step
from benchmarks import timing

__all__ = [
    'BATCH_SIZE',
    'METRICS',
    'TARGET_CAPACITY',
    'derive',
    'evaluate_targets',
    'extrapolate',
    'least_compressible',
    'targets',
]

BATCH_SIZE = 32
TARGET_CAPACITY = 2**20
# Issue 33's targets at 2**20 on the least compressible game.
TARGET_RESIDENT_BYTES = compression_benchmark.TARGET_RESIDENT_BYTES
TARGET_STALL_SECONDS = 0.1
TARGET_INCREMENTAL_SHARE = 0.05
TARGET_CHECKPOINT_BYTES = compression_benchmark.TARGET_CHECKPOINT_BYTES
TARGET_LOAD_SECONDS = 10.0
TARGET_FLOOR_RATIO = compression_benchmark.TARGET_FLOOR_RATIO
# With staging, the compressed memory's graph training step no slower than
# the uncompressed one's.
TARGET_STEP_RATIO = 1.0


def _median(values):
  return timing.median(values) if values else None


# (key, label, unit, scales): the table's rows, in order. `scales`: whether
# the figure is multiplied by 2**20 / capacity when extrapolated (bytes
# and whole-memory times); per-operation times and ratios are not.
METRICS = (
    ('resident', 'resident after filling (RSS delta)', 'MiB', True),
    ('resident_per', 'resident bytes per transition', 'B', False),
    ('nbytes', '`memory.nbytes`', 'MiB', True),
    ('add_fill', 'add, filling (median per add)', 'µs', False),
    ('add_wrapped', 'add, after the wrap-around', 'µs', False),
    ('cycle', f'sample({BATCH_SIZE}) + set_priority({BATCH_SIZE})', 'µs',
     False),
    ('floor', 'copy floor (uncompressed)', 'µs', False),
    ('floor_ratio', 'sample + set_priority / copy floor', 'x', False),
    ('step', 'graph training step, staged (median)', 'ms', False),
    ('step_ratio', 'that / ours uncompressed', 'x', False),
    ('stall', 'save stall seen by the trainer (median of the saves)', 'ms',
     True),
    ('save', 'save wall time (median of the saves)', 's', True),
    ('checkpoint', 'bytes on disk per checkpoint (the first)', 'MB', True),
    ('retained', 'bytes on disk, checkpoints retained after the saves',
     'MB', True),
    ('incremental', 'written by a save after new transitions (median)',
     'MB', True),
    ('incremental_share', 'that / a full checkpoint', '%', False),
    ('load', 'load into a fresh memory (median)', 's', True),
)


def derive(figures: Mapping[str, Any], name: Optional[str] = None,
           steps: Optional[Mapping[str, Any]] = None
          ) -> Dict[str, Optional[float]]:
  """The table's figures (`METRICS` keys, their units) from raw figures.

  Medians over bursts, rounds, saves and loads; a figure is None where the
  implementation has no equivalent (cpprb's checkpoints, a peer's nbytes)
  or was not measured (the staged step without `steps`).

  Args:
    figures: `measure_memory`'s dict.
    name: the implementation, for its staged step in `steps`.
    steps: `scale_step.measure_steps`' dict for the same game, or None.
  """
  capacity = figures['capacity']
  cycle, floor = _median(figures['cycle_us']), _median(figures['floor_us'])
  checkpoint = figures['checkpoint_bytes']
  written = figures['written_bytes'] or []
  incremental = _median(written[1:])
  stall, save = _median(figures['stall_s']), _median(figures['save_s'])
  nbytes = figures['nbytes']
  retained = figures['retained_bytes']
  return {
      'resident': figures['resident_bytes'] / 2**20,
      'resident_per': figures['resident_bytes'] / capacity,
      'nbytes': None if nbytes is None else nbytes / 2**20,
      'add_fill': _median(figures['add_fill_us']),
      'add_wrapped': _median(figures['add_wrapped_us']),
      'cycle': cycle,
      'floor': floor,
      'floor_ratio': cycle / floor if cycle and floor else None,
      'stall': None if stall is None else stall * 1e3,
      'save': save,
      'checkpoint': None if checkpoint is None else checkpoint / 1e6,
      'retained': None if retained is None else retained / 1e6,
      'incremental': None if incremental is None else incremental / 1e6,
      'incremental_share': (100 * incremental / checkpoint
                            if incremental is not None and checkpoint
                            else None),
      'load': _median(figures['load_s']),
      **scale_step.derive_step(steps, name),
  }


def extrapolate(derived: Mapping[str, Optional[float]], capacity: int,
                target: int = TARGET_CAPACITY
               ) -> Dict[str, Optional[float]]:
  """`derive`'s figures at `target` transitions (the rule: `METRICS`)."""
  factor = target / capacity
  scales = {key: scaled for key, _, _, scaled in METRICS}
  return {key: (value * factor if scales[key] and value is not None
                else value)
          for key, value in derived.items()}


def least_compressible(results: Mapping[str, Any]) -> Optional[str]:
  """The game whose `ours_compressed` has the largest nbytes (else whose
  `ours` checkpoint is largest); None if neither was measured."""
  for name, key in (('ours_compressed', 'nbytes'),
                    ('ours', 'checkpoint_bytes')):
    sizes = {game: memories[name][key]
             for game, memories in results['games'].items()
             if name in memories and memories[name][key] is not None}
    if sizes:
      return max(sizes, key=sizes.get)
  return None


def evaluate_targets(at_target: Mapping[str, Mapping[str, Optional[float]]]
                    ) -> List[List[Any]]:
  """Issue 33's targets, checked on figures extrapolated to 2**20.

  Args:
    at_target: {implementation: `extrapolate`'s dict}, for one game.

  Returns:
    rows [target, {ours implementation: (value text, met: bool or None)}];
    met is None where the figure is missing (or, for the targets relative
    to ours uncompressed, for ours itself, the reference).
  """
  reference_save = at_target.get('ours', {}).get('save')
  checks = [
      (f'resident ≤ {TARGET_RESIDENT_BYTES / 2**30:g} GiB', 'resident',
       lambda v: v * 2**20 <= TARGET_RESIDENT_BYTES,
       lambda v: f'{v / 1024:.2f} GiB'),
      (f'save stall ≤ {TARGET_STALL_SECONDS * 1e3:g} ms', 'stall',
       lambda v: v <= TARGET_STALL_SECONDS * 1e3, lambda v: f'{v:,.0f} ms'),
      ('save after new transitions writes ≤ '
       f'{TARGET_INCREMENTAL_SHARE * 100:g}% of a full save',
       'incremental_share', lambda v: v <= TARGET_INCREMENTAL_SHARE * 100,
       lambda v: f'{v:.1f}%'),
      (f'checkpoint ≤ {TARGET_CHECKPOINT_BYTES / 1e6:g} MB', 'checkpoint',
       lambda v: v * 1e6 <= TARGET_CHECKPOINT_BYTES,
       lambda v: f'{v:,.0f} MB'),
      ('save faster than ours uncompressed', 'save',
       lambda v: reference_save is not None and v < reference_save,
       lambda v: f'{v:.1f} s'),
      (f'load ≤ {TARGET_LOAD_SECONDS:g} s', 'load',
       lambda v: v <= TARGET_LOAD_SECONDS, lambda v: f'{v:.1f} s'),
      (f'sample + set_priority ≤ {TARGET_FLOOR_RATIO:g}x the copy floor',
       'floor_ratio', lambda v: v <= TARGET_FLOOR_RATIO,
       lambda v: f'{v:.1f}x'),
      ('staged graph training step ≤ '
       f'{TARGET_STEP_RATIO:g}x ours uncompressed', 'step_ratio',
       lambda v: v <= TARGET_STEP_RATIO, lambda v: f'{v:.2f}x'),
  ]
  rows = []
  for title, key, meets, text in checks:
    verdicts = {}
    for name in ('ours_compressed', 'ours'):
      if name not in at_target:
        continue
      value = at_target[name].get(key)
      if value is None:
        verdicts[name] = ('—', None)
      elif key in ('save', 'step_ratio') and name == 'ours':
        verdicts[name] = (text(value) + ' (reference)', None)
      else:
        verdicts[name] = (text(value), bool(meets(value)))
    rows.append([title, verdicts])
  return rows


def targets() -> Dict[str, Tuple[Optional[float], str]]:
  """{METRICS key: (issue 33's target in the key's unit or None, as text)}."""
  return {
      'resident': (TARGET_RESIDENT_BYTES / 2**20,
                   f'≤ {TARGET_RESIDENT_BYTES / 2**30:g} GiB'),
      'floor_ratio': (TARGET_FLOOR_RATIO, f'≤ {TARGET_FLOOR_RATIO:g}x'),
      'step_ratio': (TARGET_STEP_RATIO, f'≤ {TARGET_STEP_RATIO:g}x'),
      'stall': (TARGET_STALL_SECONDS * 1e3,
                f'≤ {TARGET_STALL_SECONDS * 1e3:g} ms'),
      'save': (None, 'faster than ours uncompressed'),
      'checkpoint': (TARGET_CHECKPOINT_BYTES / 1e6,
                     f'≤ {TARGET_CHECKPOINT_BYTES / 1e6:g} MB'),
      'load': (TARGET_LOAD_SECONDS, f'≤ {TARGET_LOAD_SECONDS:g} s'),
  }
