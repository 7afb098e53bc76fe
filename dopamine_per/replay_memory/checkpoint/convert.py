# coding=utf-8
r"""Converts a memory's checkpoint between Dopamine's files and chunks.

A memory with `compress_observations=True` saves its arrays and sum tree
in chunks (`chunk_checkpoint`), which Dopamine cannot read; every other
memory saves Dopamine's files. This command rewrites checkpoint N of a
directory into another directory in the other format, so that a Dopamine
user can adopt the chunked format and go back:

  python -m dopamine_per.replay_memory.checkpoint.convert \
      --checkpoint_dir=RUN/checkpoints --iteration=N \
      --output_dir=OUT --to=dopamine   # or --to=chunks

Going to Dopamine's files gives, byte for byte, the files the memory would
have saved uncompressed (those of a checkpoint that dopamine_per saved in
Dopamine's format come back identical after a round trip). Every file but
the arrays, the sum tree and the dopamine_per state is copied as it is.
The checkpoint is written as a save writes it (staged, then committed by
a journal), so a kill leaves the output's previous checkpoint N whole.
"""

import os
import re
import shutil
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Tuple

from absl import app
from absl import flags
import numpy as np

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.file_io import safe_pickle
from dopamine_per.file_io import transaction
from dopamine_per.replay_memory import sum_tree
from dopamine_per.replay_memory.checkpoint import checkpoint_reading
from dopamine_per.replay_memory.checkpoint import chunk_checkpoint
from dopamine_per.replay_memory.checkpoint import memory_checkpoint
from dopamine_per.replay_memory.memory import frame_blocks

__all__ = ['FORMATS', 'convert', 'main']

# What `--to` takes: a memory's checkpoint formats.
FORMATS = memory_checkpoint.FORMATS

_STORE = memory_checkpoint.STORE_FILENAME_PREFIX
_STATE = memory_checkpoint.DOPAMINE_PER_STATE_NAME
_SUM_TREE = 'sum_tree'
# Dopamine's own elements, in its storage signature's order.
_DOPAMINE_ELEMENTS = ('observation', 'action', 'reward', 'terminal')
# The dopamine_per state and a Dopamine sum tree are small: bounds.
_STATE_LIMITS = safe_pickle.PickleLimits(max_bytes=1 << 24,
                                         max_elements=1 << 20, max_depth=16)

Writer = Callable[[BinaryIO], None]


def convert(checkpoint_dir: str, iteration: int, to: str,
            output_dir: str) -> List[str]:
  """Writes checkpoint `iteration` of `checkpoint_dir` to `output_dir` in
  format `to`.

  Args:
    checkpoint_dir: str, a memory's checkpoint directory.
    iteration: int, the checkpoint's number.
    to: 'dopamine' (Dopamine's files) or 'chunks' (`chunk_checkpoint`).
    output_dir: str, another directory (created if missing); its other
      checkpoints are left alone.

  Returns:
    The file names written, the state file last.

  Raises:
    ValueError: If an argument is bad, or the checkpoint is already in
      format `to`.
    atomic_files.CheckpointError: If the checkpoint is missing, incomplete
      or corrupt.
  """
  if to not in FORMATS:
    raise ValueError('to must be one of {}, got {!r}'.format(FORMATS, to))
  if os.path.realpath(output_dir) == os.path.realpath(checkpoint_dir):
    raise ValueError('output_dir must not be checkpoint_dir ({!r}): the '
                     'checkpoint is written beside, not over, its source'
                     .format(output_dir))
  memory_checkpoint.roll_forward(checkpoint_dir)
  source = _Source(checkpoint_dir, iteration)
  chunked = source.exists(chunk_checkpoint.INDEX_NAME)
  if chunked == (to == 'chunks'):
    raise ValueError('checkpoint {} in {} is already in the {!r} format'
                     .format(iteration, checkpoint_dir, to))
  files, state = (_to_dopamine(source) if chunked else _to_chunks(source))
  os.makedirs(output_dir, exist_ok=True)
  return _write(output_dir, iteration, files, state)


class _Source(object):
  """Checkpoint N's files in a directory."""

  def __init__(self, directory: str, iteration: int):
    self.directory = directory
    self.iteration = iteration
    pattern = re.compile(r'^(.+)_ckpt\.{}\.gz$'.format(iteration))
    self.names = sorted(match.group(1) for match in map(
        pattern.match, atomic_files.list_directory(directory)) if match)
    self.state = self._read_state()
    if self.state is None and not {_STORE + 'observation',
                                   chunk_checkpoint.INDEX_NAME} & set(
                                       self.names):
      raise atomic_files.CheckpointNotFoundError(
          'No complete checkpoint {} in {}'.format(iteration, directory))

  def exists(self, name: str) -> bool:
    return name in self.names

  def path(self, name: str, iteration: Optional[int] = None) -> str:
    return gzip_files.checkpoint_filename(
        self.directory, name,
        self.iteration if iteration is None else iteration)

  def digest(self, name: str) -> Optional[atomic_files.FileDigest]:
    files = {} if self.state is None else self.state['files']
    return (None if name not in files else
            atomic_files.FileDigest(*files[name]))

  def copier(self, name: str) -> Writer:
    """A writer copying file `name` as it is (checked against its digest)."""
    path, expected = self.path(name), self.digest(name)

    def write(f: BinaryIO) -> None:
      with atomic_files.refusing(path):
        with atomic_files.open_for_reading(path, expected) as source:
          shutil.copyfileobj(source, f)
    return write

  def _read_state(self) -> Optional[Dict[str, Any]]:
    if _STATE not in self.names:
      return None
    path = self.path(_STATE)
    with atomic_files.refusing(path):
      state = gzip_files.load_pickle_gz(path, limits=_STATE_LIMITS)
      if not isinstance(state, dict) or not isinstance(
          state.get('files'), dict):
        raise atomic_files.CorruptCheckpointError(
            'not a dopamine_per state')
    return state


# ------------------------------------------------------------ to chunks


def _to_chunks(source: _Source) -> Tuple[List[Tuple[str, Writer]],
                                         Dict[str, Any]]:
  """Checkpoint files (name, writer) and the state, in chunks."""
  layout = (source.state or {}).get('dopamine_layout') or _layout_of(source)
  arrays = {}
  for name, _, _ in layout['arrays']:
    with atomic_files.refusing(source.path(_STORE + name)):
      arrays[name] = gzip_files.load_npy_gz(
          source.path(_STORE + name), expected=source.digest(_STORE + name))
  parts = [chunk_checkpoint.frames_part(
      name, frame_blocks.CompressedFrames.from_array(array))
           if name == 'observation' else
           chunk_checkpoint.array_part(name, array.nbytes,
                                       lambda a=array: [a])
           for name, array in arrays.items()]
  tree = None
  if source.exists(_SUM_TREE):
    tree = _read_sum_tree(source)
    parts.append(chunk_checkpoint.sum_tree_part(tree))
  saver = chunk_checkpoint.Saver(parts)
  saver.bind(None, source.iteration, None)
  replaced = {_STORE + name for name in arrays} | {_SUM_TREE}
  files = list(saver.writers().items()) + [
      (name, source.copier(name)) for name in _kept(source, layout)
      if name not in replaced]
  state = source.state or _derived_state(source, arrays['terminal'])
  if 'dopamine_layout' not in state:
    state = dict(state, dopamine_layout=dict(
        layout, arrays=[(name, array.dtype.str, array.shape)
                        for name, array in arrays.items()],
        sum_tree_leaves=None if tree is None else len(tree['nodes'][-1])))
  return files, state


def _kept(source: _Source, layout: Dict[str, Any]) -> List[str]:
  """The files copied as they are, in the layout's order."""
  order = [name for name in layout['files'] if source.exists(name)]
  return order + [name for name in source.names
                  if name not in order and name not in
                  (_STATE, memory_checkpoint.JOURNAL_NAME)]


def _layout_of(source: _Source) -> Dict[str, Any]:
  """A Dopamine checkpoint's layout, from its files (no dopamine_per
  state: Dopamine saved it)."""
  elements = [name[len(_STORE):] for name in source.names
              if name.startswith(_STORE)]
  ordered = [e for e in _DOPAMINE_ELEMENTS if e in elements] + sorted(
      e for e in elements if e not in _DOPAMINE_ELEMENTS)
  files = [_STORE + e for e in ordered] + [
      name for name in ('add_count', 'invalid_range', 'episode_end_indices',
                        _SUM_TREE) if source.exists(name)]
  return {'files': files, 'arrays': [(e, None, None) for e in ordered],
          'sum_tree_leaves': None}


def _read_sum_tree(source: _Source) -> Dict[str, Any]:
  path = source.path(_SUM_TREE)
  with atomic_files.refusing(path):
    loaded = gzip_files.load_pickle_gz(path, expected=source.digest(
        _SUM_TREE), limits=_STATE_LIMITS)
    state = (loaded.state if isinstance(
        loaded, safe_pickle.PickledSumTreeState) else loaded)
    if not isinstance(state, dict) or 'nodes' not in state:
      raise atomic_files.CorruptCheckpointError('not a sum tree')
  return state


def _derived_state(source: _Source, terminal: np.ndarray
                  ) -> Dict[str, Any]:
  """A dopamine_per state for a checkpoint Dopamine saved: what a load
  derives (the episode-start flag), no generator states."""
  add_count = int(gzip_files.load_npy_gz(source.path('add_count')))
  capacity = len(terminal)
  if source.exists('episode_end_indices'):
    ends = gzip_files.load_pickle_gz(source.path('episode_end_indices'),
                                     limits=_STATE_LIMITS)
  else:
    written = capacity if add_count >= capacity else add_count
    ends = set(np.flatnonzero(terminal[:written]).tolist())
  start = add_count == 0 or (add_count % capacity - 1) % capacity in ends
  return {'format_version': checkpoint_reading.STATE_FORMAT_VERSION,
          'next_experience_is_episode_start': bool(start),
          'rng_state': None, 'sampler_state': None, 'files': {}}


# ---------------------------------------------------------- to dopamine


def _to_dopamine(source: _Source) -> Tuple[List[Tuple[str, Writer]],
                                           Dict[str, Any]]:
  """Checkpoint files (name, writer) and the state, in Dopamine's files."""
  layout = (source.state or {}).get('dopamine_layout')
  if not isinstance(layout, dict):
    raise atomic_files.CorruptCheckpointError(
        'Checkpoint {} in {} records no Dopamine layout in its dopamine_per '
        'state: it was not saved by this version of dopamine_per'.format(
            source.iteration, source.directory))
  kinds, decoders = [], []
  for name, dtype, shape in layout['arrays']:
    size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    kind = {chunk_checkpoint.ARRAY: (
        size, size, lambda raws, _, s=tuple(shape), d=dtype:
        chunk_checkpoint.array_from(raws, s, d))}
    if name == 'observation':
      kind[chunk_checkpoint.FRAMES] = chunk_checkpoint.frames_kind(
          frame_blocks.CompressedFrames(shape[0], tuple(shape[1:]), dtype),
          np.asarray)
    kinds.append(kind)
  leaves = layout.get('sum_tree_leaves')
  if leaves:
    size = 8 * (leaves + 1)
    kinds.append({chunk_checkpoint.ARRAY: (size, size, None)})
  parts = chunk_checkpoint.read_chunks(source.path, source.digest,
                                       source.iteration, kinds)
  writers = {}
  for (name, dtype, _), kind, (which, unit, raws) in zip(
      layout['arrays'], kinds, parts):
    array = kind[which][2](raws, unit)
    writers[_STORE + name] = gzip_files.npy_gz_writer(array, name)
  if leaves:
    writers[_SUM_TREE] = gzip_files.dopamine_sum_tree_gz_writer(
        _sum_tree_state(parts[-1][2], leaves, layout, source.state))
  files = [(name, writers[name] if name in writers else source.copier(name))
           for name in layout['files'] if name in writers or
           source.exists(name)]
  return files, source.state


def _sum_tree_state(raws: List[bytes], leaves: int, layout: Dict[str, Any],
                    state: Dict[str, Any]) -> Dict[str, Any]:
  """The memory's `get_sum_tree_state()` when it was saved: the tree's
  generator is the memory's."""
  values = chunk_checkpoint.array_from(raws, (leaves + 1,), '<f8')
  tree = sum_tree.SumTree(layout['arrays'][0][2][0])
  tree.set_state({'nodes': [values[:leaves]],
                  'max_recorded_priority': float(values[leaves])})
  return {'nodes': tree.nodes,
          'max_recorded_priority': float(values[leaves]),
          'rng_state': state.get('rng_state')}


# ---------------------------------------------------------------- write


def _write(output_dir: str, iteration: int,
           files: List[Tuple[str, Writer]], state: Dict[str, Any]
          ) -> List[str]:
  """Stages `files` and the state (with their digests), then commits."""
  staging = transaction.Transaction(output_dir)
  try:
    digests = {}
    for name, writer in files:
      digests[name] = tuple(staging.write(
          gzip_files.checkpoint_filename('', name, iteration), writer))
    staging.write(gzip_files.checkpoint_filename('', _STATE, iteration),
                  gzip_files.pickle_gz_writer(dict(state, files=digests),
                                              memo=False))
  except BaseException:
    staging.abort()
    raise
  staging.commit(memory_checkpoint.journal_filename(iteration))
  return [name for name, _ in files] + [_STATE]


# ------------------------------------------------------------------ CLI


def define_flags() -> None:
  flags.DEFINE_string('checkpoint_dir', None,
                      "The memory's checkpoint directory.")
  flags.DEFINE_integer('iteration', None, 'The checkpoint to convert.')
  flags.DEFINE_enum('to', None, list(FORMATS), 'The format to write.')
  flags.DEFINE_string('output_dir', None,
                      'Where to write it (not checkpoint_dir).')
  for name in ('checkpoint_dir', 'iteration', 'to', 'output_dir'):
    flags.mark_flag_as_required(name)


def main(argv: List[str]) -> None:
  del argv
  options = flags.FLAGS
  written = convert(options.checkpoint_dir, options.iteration, options.to,
                    options.output_dir)
  print('Wrote checkpoint {} to {}: {}'.format(
      options.iteration, options.output_dir, ', '.join(written)))


if __name__ == '__main__':
  define_flags()
  app.run(main)
