# coding=utf-8
"""A replay memory's checkpoints: file layout, save, load, clean-up.

The memories' `save` and `load` are thin calls into `save` and `load` here,
so that the memory classes hold storage and sampling only. The files are
Dopamine's, ``{name}_ckpt.{N}.gz`` (the storage arrays, the counters and
every public attribute), plus a ``dopamine_per_state`` file, written last,
that marks the checkpoint complete and records every other file's digest.
`load` reads and validates everything before it changes the memory. A
memory class adds files of its own with a `CheckpointExtension` (the
prioritized memory's sum tree: `SUM_TREE`). How each file is written and
read is `file_io`'s. What differs from Dopamine:
docs/compat.md#memory_checkpoint.
"""

# This module does the memories' checkpointing for them, so it reads and
# installs their private state.
# pylint: disable=protected-access

import numbers
import operator
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import logging
import numpy as np

from dopamine_per import errors
from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.file_io import safe_pickle
from dopamine_per.replay_memory import sum_tree

__all__ = [
    'STORE_FILENAME_PREFIX',
    'DOPAMINE_PER_STATE_NAME',
    'CheckpointExtension',
    'SUM_TREE',
    'latest_checkpoint_iteration',
    'checkpoint_files',
    'checkpointable_elements',
    'save',
    'load',
]

# Prefix of the checkpoint names of storage arrays; '$' cannot start an
# attribute name, so these never collide with other checkpointed attributes.
STORE_FILENAME_PREFIX = '$store$_'

# Checkpoint name of the state Dopamine does not save but we need (whether
# the next add starts an episode, the generator state). Dopamine ignores the
# file; without it we derive the values from the data.
DOPAMINE_PER_STATE_NAME = 'dopamine_per_state'

_STATE_FORMAT_VERSION = 1

# (name, format) of a checkpoint file. Formats: 'npy' (gzip'd np.save),
# 'pickle' (gzip'd plain-data pickle) and 'sum_tree' (gzip'd pickle of a
# Dopamine SumTree).
FileSpec = Tuple[str, str]


class CheckpointExtension(object):
  """A file a memory class adds to the circular memory's checkpoint.

  A memory class lists its extensions in its `_checkpoint_extensions`
  attribute. `save` writes them after the circular memory's own files (and
  before the public attributes'); `load` reads and validates them after
  everything else, and installs them first.

  Attributes:
    name: str, the checkpoint file's name.
    file_format: str, 'npy', 'pickle' or 'sum_tree'.
  """

  name = None
  file_format = None

  def value(self, memory: Any) -> Any:
    """Returns what `save` writes to the file."""
    raise NotImplementedError

  def read(self, memory: Any, path: str,
           expected: Optional[atomic_files.FileDigest]) -> Any:
    """Reads and validates the file at `path`; changes nothing.

    Args:
      memory: the memory being loaded.
      path: str, the file.
      expected: the digest the dopamine_per state records, or None.

    Returns:
      What `commit` installs.

    Raises:
      atomic_files.CheckpointError: If the file is corrupt or does not fit
        the memory.
    """
    raise NotImplementedError

  def commit(self, memory: Any, state: Any) -> None:
    """Installs what `read` returned. Must not fail."""
    raise NotImplementedError


class _SumTreeExtension(CheckpointExtension):
  """The prioritized memory's `sum_tree` file: a pickled Dopamine SumTree."""

  name = 'sum_tree'
  file_format = 'sum_tree'

  def value(self, memory: Any) -> Dict[str, Any]:
    with memory._priority_lock:
      return memory.sum_tree.get_state()

  def _limits(self, memory: Any) -> safe_pickle.PickleLimits:
    # Dopamine's binary levels: 2 * leaves - 1 floats, at most 64 bytes each
    # in any pickle protocol; and a generator state (MT19937's holds 624
    # words).
    leaves = 1 << max(memory._replay_capacity - 1, 0).bit_length()
    return safe_pickle.PickleLimits(
        max_bytes=128 * leaves + (1 << 16),
        max_elements=2 * leaves + (1 << 12), max_depth=8)

  def read(self, memory: Any, path: str,
           expected: Optional[atomic_files.FileDigest]) -> Dict[str, Any]:
    with atomic_files.refusing(path):
      loaded = gzip_files.load_pickle_gz(path, expected=expected,
                                            limits=self._limits(memory))
      if isinstance(loaded, safe_pickle.PickledSumTreeState):
        state = loaded.state
      elif isinstance(loaded, dict):
        state = loaded
      else:
        raise atomic_files.CorruptCheckpointError(
            '{}: expected a pickled SumTree, got {}'.format(
                path, type(loaded).__name__))
      # The generator is the memory's (restored from the dopamine_per
      # state), shared with the tree: keep the tree's object.
      state = {k: v for k, v in state.items() if k != 'rng_state'}
      try:
        # A scratch tree of the same priority bounds: set_state validates.
        sum_tree.SumTree(
            memory._replay_capacity,
            priority_dtype=memory.sum_tree.priority_dtype).set_state(state)
      except ValueError as e:
        raise atomic_files.CorruptCheckpointError(
            '{}: {}'.format(path, e)) from e
    return state

  def commit(self, memory: Any, state: Dict[str, Any]) -> None:
    # Validated in `read`; set_state is all-or-nothing anyway, and runs
    # before the rest is installed, so nothing has changed if it raises.
    with memory._priority_lock:
      memory.sum_tree.set_state(state)


# The prioritized memory's extension.
SUM_TREE = _SumTreeExtension()


def latest_checkpoint_iteration(checkpoint_dir: str) -> Optional[int]:
  """Returns the newest complete checkpoint written by `save`, or None.

  A checkpoint is complete once its `dopamine_per_state` file exists: `save`
  writes that file last and deletes it first, so a save or a clean-up cut
  short (a crash, SIGKILL) leaves the previous checkpoint as the newest.

  Args:
    checkpoint_dir: str, the directory given to `save`.

  Returns:
    int, the iteration number to give `load`, or None if there is none.
  """
  pattern = re.compile(r'^{}_ckpt\.(\d+)\.gz$'.format(
      re.escape(DOPAMINE_PER_STATE_NAME)))
  iterations = [int(match.group(1))
                for match in map(pattern.match,
                                 atomic_files.list_directory(checkpoint_dir))
                if match]
  return max(iterations) if iterations else None


# ----------------------------------------------------------------- layout


def _layout(memory: Any) -> List[FileSpec]:
  """Returns the files of the memory's own state (not its attributes)."""
  layout = [(STORE_FILENAME_PREFIX + e.name, 'npy')
            for e in memory.get_storage_signature()]
  layout += [('add_count', 'npy'), ('invalid_range', 'npy'),
             ('episode_end_indices', 'pickle')]
  layout += [(extension.name, extension.file_format)
             for extension in memory._checkpoint_extensions]
  return layout


def _attribute_files(memory: Any) -> List[FileSpec]:
  """Returns the files of the public attributes `_layout` does not name.

  As in Dopamine, every public attribute (e.g. a subclass's counters and
  arrays) is checkpointed: NumPy arrays as 'npy' files, anything else as a
  'pickle'; sorted by name.
  """
  own = {name for name, _ in _layout(memory)}
  return [(name, 'npy' if type(value) is np.ndarray else 'pickle')
          for name, value in sorted(vars(memory).items())
          if not name.startswith('_') and name not in own]


def checkpoint_files(memory: Any) -> List[FileSpec]:
  """Returns (name, format) of every file of a checkpoint but the state.

  Args:
    memory: an `OutOfGraphReplayBuffer`.

  Returns:
    list of (str, str), in the order `save` writes them.
  """
  return _layout(memory) + _attribute_files(memory)


def _value(memory: Any, name: str) -> Any:
  """Returns what checkpoint file `name` holds."""
  for extension in memory._checkpoint_extensions:
    if name == extension.name:
      return extension.value(memory)
  if name.startswith(STORE_FILENAME_PREFIX):
    return memory._store[name[len(STORE_FILENAME_PREFIX):]]
  if name == 'add_count':
    return memory.add_count
  if name == 'invalid_range':
    return memory.invalid_range
  if name == 'episode_end_indices':
    return set(int(i) for i in memory.episode_end_indices)
  if not name.startswith('_') and name in vars(memory):
    return vars(memory)[name]
  raise KeyError(name)


def checkpointable_elements(memory: Any) -> Dict[str, Any]:
  """Returns {file name: value} of what `save` writes (Dopamine's hook).

  Args:
    memory: an `OutOfGraphReplayBuffer`.

  Returns:
    dict, without the dopamine_per state.
  """
  return {name: _value(memory, name) for name, _ in checkpoint_files(memory)}


# ------------------------------------------------------------------- save


def _check_checkpointable(memory: Any, files: Sequence[FileSpec]) -> None:
  """Checks that every public attribute can be saved and safely loaded.

  Raises:
    TypeError: If an attribute holds something other than plain data
      (`safe_pickle.non_plain_data`): loading it would have to run code.
    ValueError: If an attribute's name cannot be a checkpoint file's.
  """
  own = {name for name, _ in _layout(memory)}
  for name, _ in files:
    if name in own:
      continue
    if not name.isidentifier() or name == DOPAMINE_PER_STATE_NAME:
      raise ValueError(
          'save(): the attribute {!r} of {} cannot be checkpointed under '
          'its name; rename it (or make it private with a leading '
          "underscore).".format(name, type(memory).__name__))
    problem = safe_pickle.non_plain_data(vars(memory)[name])
    if problem is not None:
      raise TypeError(
          'save(): the public attribute {!r} of {} holds {}; checkpoints '
          'hold plain data only (numbers, strings, bytes, None, NumPy '
          'arrays, and lists, tuples, dicts and sets of those), so that '
          'loading never runs code. Make it private (a leading '
          'underscore) or store plain data. Nothing was written.'.format(
              name, type(memory).__name__, problem))


def _extra_state(memory: Any) -> Dict[str, Any]:
  """Returns the state Dopamine's format has no file for."""
  return {
      'format_version': _STATE_FORMAT_VERSION,
      'next_experience_is_episode_start':
          bool(memory._next_experience_is_episode_start),
      'rng_state': (None if memory._rng is None else
                    memory._rng.bit_generator.state),
  }


def save(memory: Any, checkpoint_dir: str, iteration_number: int) -> None:
  """Writes `memory` to `checkpoint_dir` (`OutOfGraphReplayBuffer.save`).

  The caller holds the memory's lock. Each file is written atomically; the
  dopamine_per state, written last, records every other file's size and
  checksum and marks the checkpoint complete. Then the checkpoint
  `checkpoint_duration` iterations older is deleted (unless a multiple of
  keep_every), and so are temporaries of this memory's files left by
  killed saves.

  Args:
    memory: an `OutOfGraphReplayBuffer`.
    checkpoint_dir: str, an existing directory. If it does not exist a
      warning is logged and nothing is written.
    iteration_number: int, the checkpoint's suffix.

  Raises:
    TypeError: If a public attribute holds something other than plain data
      (see `safe_pickle.non_plain_data`); nothing is written then.
    ValueError: If a public attribute's name cannot name a file.
  """
  iteration_number = operator.index(iteration_number)
  if not atomic_files.exists(checkpoint_dir):
    logging.warning('Checkpoint directory %s does not exist: replay buffer '
                    'not saved.', checkpoint_dir)
    return
  savers = {'npy': gzip_files.save_npy_gz,
            'sum_tree': gzip_files.save_dopamine_sum_tree_gz,
            'pickle': gzip_files.save_pickle_gz}
  files = checkpoint_files(memory)
  _check_checkpointable(memory, files)
  digests = {}
  for name, file_format in files:
    filename = gzip_files.checkpoint_filename(checkpoint_dir, name,
                                                 iteration_number)
    digests[name] = tuple(savers[file_format](filename, _value(memory, name)))
  # Written last: its presence marks a complete dopamine_per checkpoint, and
  # it records every other file's size and checksum.
  state = _extra_state(memory)
  state['files'] = digests
  gzip_files.save_pickle_gz(
      gzip_files.checkpoint_filename(
          checkpoint_dir, DOPAMINE_PER_STATE_NAME, iteration_number), state)
  _collect_garbage(memory, checkpoint_dir, iteration_number)
  _remove_temporaries(checkpoint_dir, files)


def _remove_temporaries(checkpoint_dir: str,
                        files: Sequence[FileSpec]) -> None:
  """Deletes what killed saves left: temporaries of this memory's files.

  `atomic_files.atomic_write` writes each file to a temporary one first; a
  SIGKILL leaves it behind. Only temporaries of a checkpoint file of this
  memory (any iteration) are deleted, nothing else.
  """
  names = [DOPAMINE_PER_STATE_NAME] + [name for name, _ in files]
  pattern = re.compile(r'^(?:{})_ckpt\.\d+\.gz$'.format(
      '|'.join(re.escape(name) for name in names)))
  for path in atomic_files.remove_temporaries(
      checkpoint_dir, lambda target: pattern.match(target) is not None):
    logging.info('Deleted %s, left by an interrupted save.', path)


def _collect_garbage(memory: Any, checkpoint_dir: str,
                     iteration_number: int) -> None:
  """Deletes the checkpoint `checkpoint_duration` iterations older."""
  stale = iteration_number - memory._checkpoint_duration
  if stale < 0:
    return
  if memory._keep_every is not None and stale % memory._keep_every == 0:
    return
  # The state file first: a checkpoint that has one has all its files, even
  # if this deletion is interrupted.
  names = [name for name, _ in checkpoint_files(memory)]
  for name in [DOPAMINE_PER_STATE_NAME] + names:
    atomic_files.remove_if_exists(
        gzip_files.checkpoint_filename(checkpoint_dir, name, stale))


# ------------------------------------------------------------------- load


def load(memory: Any, checkpoint_dir: str, suffix: Any) -> None:
  """Restores `memory` from a checkpoint (`OutOfGraphReplayBuffer.load`).

  The caller holds the memory's lock. All-or-nothing: every file is checked
  to exist, then read and validated against the memory's configuration,
  and only then installed.

  Args:
    memory: an `OutOfGraphReplayBuffer`.
    checkpoint_dir: str, the directory.
    suffix: int or str, the checkpoint's iteration number.

  Raises:
    tf.errors.NotFoundError: If an expected file is missing (but for
      episode_end_indices, which old checkpoints lack).
    atomic_files.CheckpointError: (a ValueError) If a file is corrupt,
      unsafe, not a regular file, larger than the memory can need, or does
      not match the memory's configuration.
  """
  missing_episode_ends = False
  for name, _ in checkpoint_files(memory):
    filename = gzip_files.checkpoint_filename(checkpoint_dir, name, suffix)
    if atomic_files.exists(filename):
      continue
    if name == 'episode_end_indices':
      logging.warning('Unable to find episode_end_indices. This is '
                      'expected for old checkpoints.')
      missing_episode_ends = True
      continue
    # Dopamine's error type; TensorFlow is imported only to raise it.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    raise tf.errors.NotFoundError(None, None,
                                  'Missing file: {}'.format(filename))
  with atomic_files.refusing('checkpoint {} in {}'.format(
      suffix, checkpoint_dir)):
    pending = _read_checkpoint(memory, checkpoint_dir, suffix,
                               missing_episode_ends)
  _commit(memory, pending)


# Bounds of what each checkpoint file may hold, derived from the memory's
# configuration, so that a damaged or hostile file is refused after a
# bounded amount of reading (see file_io).


def _attribute_max_bytes(memory: Any) -> int:
  """The most bytes a public attribute's file may decompress to.

  Generous but finite: 64 MiB more than all storage arrays together.
  """
  return (1 << 26) + sum(array.nbytes for array in memory._store.values())


def _npy_max_bytes(memory: Any, name: str) -> int:
  """The most bytes the array of checkpoint file `name` may take."""
  if name == 'add_count':
    return 16  # One integer of at most 16 bytes.
  if name == 'invalid_range':
    # Room for other configurations' ranges, for a clearer error.
    return 8 * (memory._stack_size + memory._update_horizon) + (1 << 16)
  return _attribute_max_bytes(memory)


def _pickle_limits(memory: Any, name: str) -> safe_pickle.PickleLimits:
  """The bounds of the pickle in checkpoint file `name`."""
  if name == 'episode_end_indices':
    # At most one int per slot, 5 to 13 bytes each in any protocol.
    capacity = memory._replay_capacity
    return safe_pickle.PickleLimits(
        max_bytes=32 * capacity + (1 << 16), max_elements=capacity + 16,
        max_depth=4)
  if name == DOPAMINE_PER_STATE_NAME:
    # A few flags, a generator state, a (size, sha256) per file.
    files = len(checkpoint_files(memory))
    return safe_pickle.PickleLimits(
        max_bytes=(1 << 20) + 1024 * files,
        max_elements=(1 << 14) + 8 * files, max_depth=16)
  max_bytes = _attribute_max_bytes(memory)
  return safe_pickle.PickleLimits(
      max_bytes=max_bytes, max_elements=max_bytes // 8,
      max_depth=safe_pickle.DEFAULT_PICKLE_LIMITS.max_depth)


def _read_checkpoint(memory: Any, checkpoint_dir: str, suffix: Any,
                     missing_episode_ends: bool) -> Dict[str, Any]:
  """Reads and validates a checkpoint into a dict; changes nothing.

  Raises:
    atomic_files.CheckpointError: On any corrupt or mismatched file.
  """
  def filename(name):
    return gzip_files.checkpoint_filename(checkpoint_dir, name, suffix)

  extra = _read_extra_state(memory, filename(DOPAMINE_PER_STATE_NAME))
  digests = {} if extra is None else extra['files']

  def digest_of(name):
    digest = digests.get(name)
    return None if digest is None else atomic_files.FileDigest(*digest)

  capacity = memory._replay_capacity
  pending = {'store': {}}
  for element in memory.get_storage_signature():
    name = STORE_FILENAME_PREFIX + element.name
    with atomic_files.refusing(filename(name)):
      pending['store'][element.name] = gzip_files.load_npy_gz(
          filename(name), shape=(capacity,) + tuple(element.shape),
          dtype=element.type, expected=digest_of(name))
  add_count = _read_add_count(memory, filename('add_count'),
                              digest_of('add_count'))
  pending['add_count'] = add_count
  cursor = add_count % capacity
  _check_invalid_range(memory, filename('invalid_range'),
                       digest_of('invalid_range'), add_count)

  written = capacity if add_count >= capacity else cursor
  if missing_episode_ends:
    terminal = pending['store']['terminal'][:written]
    episode_ends = set(np.flatnonzero(terminal).tolist())
  else:
    episode_ends = _read_episode_ends(
        memory, filename('episode_end_indices'),
        digest_of('episode_end_indices'), written)
  pending['episode_end_indices'] = episode_ends
  pending['attributes'] = {
      name: _read_attribute(memory, name, filename(name), file_format,
                            digest_of(name))
      for name, file_format in _attribute_files(memory)}

  path = filename(DOPAMINE_PER_STATE_NAME)
  if extra is not None:
    pending['episode_start'] = extra['next_experience_is_episode_start']
  else:
    # Dopamine does not save this: the next add starts an episode if the
    # last written transition ended one.
    logging.info('%s not found (a Dopamine checkpoint?): deriving the '
                 'episode-start flag from the data.', path)
    pending['episode_start'] = (
        add_count == 0 or (cursor - 1) % capacity in episode_ends)
  pending['rng_state'] = None
  rng_state = None if extra is None else extra.get('rng_state')
  if rng_state is not None and memory._rng is not None:
    # Any error (TypeError, KeyError, OverflowError for a number out of the
    # generator's range ...) refuses the state file.
    with atomic_files.refusing(path + ' (generator state)'):
      type(memory._rng.bit_generator)().state = rng_state
    pending['rng_state'] = rng_state
  pending['extensions'] = [
      (extension, extension.read(memory, filename(extension.name),
                                 digest_of(extension.name)))
      for extension in memory._checkpoint_extensions]
  return pending


def _read_add_count(memory: Any, path: str,
                    expected: Optional[atomic_files.FileDigest]) -> int:
  """Reads the add_count file: an integer in [0, 2**63).

  Raises:
    atomic_files.CheckpointError: If the file is corrupt or the value is
      not such an integer (a uint64 of 2**63 or more, say, would break
      `add_count` and `save`).
  """
  with atomic_files.refusing(path):
    add_count = gzip_files.load_npy_gz(
        path, expected=expected,
        max_bytes=_npy_max_bytes(memory, 'add_count'))
    value = (int(add_count.reshape(())) if add_count.size == 1 and
             add_count.dtype.kind in 'iu' else None)
    if (add_count.shape not in ((), (1,)) or value is None or
        not 0 <= value <= np.iinfo(np.int64).max):
      raise atomic_files.CorruptCheckpointError(
          '{}: add_count must be an integer scalar in [0, 2**63), got {}'
          .format(path, errors.describe(
              add_count if value is None else value)))
  return value


def _check_invalid_range(memory: Any, path: str,
                         expected: Optional[atomic_files.FileDigest],
                         add_count: int) -> None:
  """Reads the invalid_range file; it must match add_count.

  Raises:
    atomic_files.CheckpointError: If the file is corrupt or does not match
      `add_count` and the memory's configuration.
  """
  with atomic_files.refusing(path):
    loaded_range = gzip_files.load_npy_gz(
        path, expected=expected,
        max_bytes=_npy_max_bytes(memory, 'invalid_range'))
    if add_count == 0:
      return  # Dopamine saves zeros of some length before the first add.
    wanted = memory._invalid_range_at(add_count)
    if (loaded_range.shape != wanted.shape or
        not np.array_equal(loaded_range, wanted)):
      raise atomic_files.CorruptCheckpointError(
          '{}: invalid_range {} does not match add_count {} with '
          'stack_size {} and update_horizon {}: a checkpoint of a '
          'differently configured buffer?'.format(
              path, loaded_range.tolist(), add_count, memory._stack_size,
              memory._update_horizon))


def _read_episode_ends(memory: Any, path: str,
                       expected: Optional[atomic_files.FileDigest],
                       written: int) -> set:
  """Reads the episode_end_indices file: a set of written slots.

  Raises:
    atomic_files.CheckpointError: If the file is corrupt, too large, or
      holds anything but ints in [0, written).
  """
  with atomic_files.refusing(path):
    loaded = gzip_files.load_pickle_gz(
        path, expected=expected,
        limits=_pickle_limits(memory, 'episode_end_indices'))
    if not isinstance(loaded, (set, frozenset, list, tuple)):
      raise atomic_files.CorruptCheckpointError(
          '{}: episode_end_indices must be a set of ints, got {}'.format(
              path, type(loaded).__name__))
    episode_ends = set()
    for index in loaded:
      if (isinstance(index, (bool, np.bool_)) or
          not isinstance(index, (numbers.Integral, np.integer)) or
          not 0 <= index < written):
        raise atomic_files.CorruptCheckpointError(
            '{}: episode end index {} is not a written slot in [0, {})'
            .format(path, errors.describe(index), written))
      episode_ends.add(int(index))
  return episode_ends


def _read_attribute(memory: Any, name: str, path: str, file_format: str,
                    expected: Optional[atomic_files.FileDigest]) -> Any:
  """Reads the checkpoint file of public attribute `name` (plain data).

  Raises:
    atomic_files.CheckpointError: If the file is corrupt, unsafe or larger
      than `_attribute_max_bytes`.
  """
  with atomic_files.refusing(path):
    if file_format == 'npy':
      return gzip_files.load_npy_gz(
          path, expected=expected, max_bytes=_npy_max_bytes(memory, name))
    value = gzip_files.load_pickle_gz(
        path, expected=expected, limits=_pickle_limits(memory, name))
    problem = safe_pickle.non_plain_data(value)
    if problem is not None:
      raise atomic_files.CorruptCheckpointError(
          '{}: an attribute must be plain data, found {}.'.format(
              path, problem))
  return value


def _read_extra_state(memory: Any, path: str) -> Optional[Dict[str, Any]]:
  """Reads and checks the dopamine_per state file; None if there is none.

  Its structure is checked before any of it is used: `files` must map
  exactly the memory's checkpoint file names (`checkpoint_files`) to
  (size, sha256) tuples, so it can name no other file.

  Raises:
    atomic_files.CheckpointError: If the file is corrupt or malformed.
  """
  if not atomic_files.exists(path):
    return None
  with atomic_files.refusing(path):
    extra = gzip_files.load_pickle_gz(
        path, limits=_pickle_limits(memory, DOPAMINE_PER_STATE_NAME))
    problem = _extra_state_problem(memory, extra)
    if problem is not None:
      raise atomic_files.CorruptCheckpointError(
          '{}: not a dopamine_per state: {}'.format(path, problem))
  return extra


def _extra_state_problem(memory: Any, extra: Any) -> Optional[str]:
  """What is wrong with a loaded dopamine_per state, or None."""
  if type(extra) is not dict:  # pylint: disable=unidiomatic-typecheck
    return 'a {}, not a dict'.format(type(extra).__name__)
  version = extra.get('format_version', _STATE_FORMAT_VERSION)
  if type(version) is not int or version != _STATE_FORMAT_VERSION:  # pylint: disable=unidiomatic-typecheck
    return 'format_version {} (this version reads {})'.format(
        errors.describe(version), _STATE_FORMAT_VERSION)
  if not isinstance(extra.get('next_experience_is_episode_start'), bool):
    return 'next_experience_is_episode_start is {}, not a bool'.format(
        errors.describe(extra.get('next_experience_is_episode_start')))
  if not isinstance(extra.get('rng_state'), (dict, type(None))):
    return 'rng_state is a {}, not a dict'.format(
        type(extra['rng_state']).__name__)
  files = extra.get('files')
  if type(files) is not dict:  # pylint: disable=unidiomatic-typecheck
    return 'files is {}, not a dict'.format(errors.describe(files))
  own = {name for name, _ in checkpoint_files(memory)}
  if set(files) != own:
    strange = sorted(errors.describe(name, 40) for name in set(files) - own)
    missing = sorted(own - set(files))
    return ('files names {} and lacks {}; it must name exactly this '
            "memory's checkpoint files".format(strange[:5], missing[:5]))
  for name, digest in files.items():
    if not (type(digest) is tuple and len(digest) == 2 and  # pylint: disable=unidiomatic-typecheck
            type(digest[0]) is int and digest[0] >= 0 and  # pylint: disable=unidiomatic-typecheck
            type(digest[1]) is str and  # pylint: disable=unidiomatic-typecheck
            re.fullmatch('[0-9a-f]{64}', digest[1])):
      return 'the digest of {} is {}, not (size, sha256)'.format(
          name, errors.describe(digest))
  return None


def _commit(memory: Any, pending: Dict[str, Any]) -> None:
  """Installs a validated checkpoint. Cannot fail."""
  for extension, state in pending['extensions']:
    extension.commit(memory, state)
  for name, array in pending['store'].items():
    memory._store[name] = array
  memory._mappings = []  # The loaded arrays are fully backed.
  memory._refresh_store_arrays()
  memory._add_count = pending['add_count']
  memory.episode_end_indices = pending['episode_end_indices']
  memory._episode_end[:] = False
  memory._episode_end[list(memory.episode_end_indices)] = True
  memory._next_experience_is_episode_start = pending['episode_start']
  if pending['rng_state'] is not None:
    memory._rng.bit_generator.state = pending['rng_state']
  for name, value in pending['attributes'].items():
    setattr(memory, name, value)
