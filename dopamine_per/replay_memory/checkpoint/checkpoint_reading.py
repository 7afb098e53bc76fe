# coding=utf-8
"""Reading a replay memory's checkpoint: bounds, validation, installing.

`memory_checkpoint.load` finds a checkpoint's files and hands them here:
`read` reads every file and validates it against the memory's
configuration, within bounds derived from it (so that a damaged or hostile
file is refused after a bounded read), and changes nothing; `install` then
puts what `read` returned into the memory, and cannot fail (nor can
installing what `replaced` returned, which puts the memory back). The
layout and saving are `memory_checkpoint`'s; how each file is read is
`file_io`'s.
"""

import collections
import numbers
from typing import Any, Callable, Dict, Optional, Set

from absl import logging
import numpy as np

from dopamine_per import errors
from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.file_io import safe_pickle
from dopamine_per.replay_memory.checkpoint import chunk_checkpoint
from dopamine_per.replay_memory.memory import sampling
from dopamine_per.replay_memory.memory import validation

__all__ = ['STATE_FORMAT_VERSION', 'Layout', 'read', 'state_files',
           'replaced', 'install']

# The dopamine_per state's format version: what `memory_checkpoint` writes,
# and the only one `read` accepts.
STATE_FORMAT_VERSION = 1

# What `read` needs of `memory_checkpoint`'s layout: the storage arrays'
# file name prefix, the dopamine_per state file's name, (name, format) of
# every other file (`checkpoint_files`) and of the attributes' among them.
Layout = collections.namedtuple(
    'Layout', ['store_prefix', 'state_name', 'files', 'attribute_files'])


def read(memory: Any, layout: Layout, filename: Callable[..., str],
         state_digest: Optional[atomic_files.FileDigest],
         missing_episode_ends: bool, suffix: Any = None) -> Dict[str, Any]:
  """Reads and validates a checkpoint into a dict; changes nothing.

  Args:
    memory: the memory being loaded.
    layout: Layout, the checkpoint's file names.
    filename: callable, the path of a checkpoint file given its name (and
      optionally another checkpoint's iteration: a chunked checkpoint's
      older packs).
    state_digest: the digest the state file must have (a journal's), or
      None.
    missing_episode_ends: bool, whether episode_end_indices is missing.
    suffix: the checkpoint's iteration (read if it is chunked).

  Returns:
    dict, for `install`.

  Raises:
    atomic_files.CheckpointError: On any corrupt or mismatched file.
  """
  extra = _read_extra_state(layout, filename(layout.state_name),
                            state_digest)
  digests = {} if extra is None else extra['files']

  def digest_of(name):
    digest = digests.get(name)
    return None if digest is None else atomic_files.FileDigest(*digest)

  capacity = memory.replay_capacity
  chunked = _read_chunks(memory, layout, filename, digest_of, suffix)
  pending = {'store': dict(chunked['store'])}
  for element in memory.get_storage_signature():
    if element.name in pending['store']:
      continue
    name = layout.store_prefix + element.name
    with atomic_files.refusing(filename(name)):
      array = gzip_files.load_npy_gz(
          filename(name), shape=(capacity,) + tuple(element.shape),
          dtype=element.type, expected=digest_of(name))
      # As the native ops and `add` take it: a valid `.npy` may hold a
      # Fortran-order array, which loads copied into C order.
      pending['store'][element.name] = chunk_checkpoint.as_stored(
          memory, element, np.require(
              array, requirements=['C_CONTIGUOUS', 'ALIGNED', 'WRITEABLE']))
  add_count = _read_add_count(filename('add_count'), digest_of('add_count'))
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
      name: _read_attribute(memory, filename(name), file_format,
                            digest_of(name))
      for name, file_format in layout.attribute_files}

  path = filename(layout.state_name)
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
  if rng_state is not None and memory.rng is not None:
    # Any error (TypeError, KeyError, OverflowError for a number out of the
    # generator's range ...) refuses the state file.
    with atomic_files.refusing(path + ' (generator state)'):
      type(memory.rng.bit_generator)().state = rng_state
    pending['rng_state'] = rng_state
  pending['sampler_state'] = None
  sampler_state = None if extra is None else extra.get('sampler_state')
  if sampler_state is not None and memory.native is not None:
    if not memory.native.check_sampler_state(sampler_state):
      raise atomic_files.CorruptCheckpointError(
          '{}: its sampler_state is not a generator state: {}'.format(
              path, errors.describe(sampler_state)))
    pending['sampler_state'] = sampler_state
  pending['extensions'] = [
      (extension, extension.check(memory, chunked['sum_tree'],
                                  filename(chunk_checkpoint.INDEX_NAME))
       if extension.file_format == 'sum_tree' and chunked['sum_tree']
       else extension.read(memory, filename(extension.name),
                           digest_of(extension.name)))
      for extension in memory.checkpoint_extensions]
  return pending


def _read_chunks(memory: Any, layout: Layout, filename: Callable[..., str],
                 digest_of: Callable[[str], Any], suffix: Any
                ) -> Dict[str, Any]:
  """`chunk_checkpoint.read` if the checkpoint is chunked, else nothing."""
  if chunk_checkpoint.INDEX_NAME not in dict(layout.files):
    return {'store': {}, 'sum_tree': None}
  try:
    iteration = int(suffix)
  except (TypeError, ValueError) as e:
    raise atomic_files.CorruptCheckpointError(
        'a chunked checkpoint has an integer suffix, not {!r}'.format(
            suffix)) from e
  return chunk_checkpoint.read(
      memory, filename, digest_of, iteration,
      any(e.file_format == 'sum_tree' for e in memory.checkpoint_extensions))


def _read_add_count(path: str,
                    expected: Optional[atomic_files.FileDigest]) -> int:
  """Reads the add_count file: an integer in [0, validation.MAX_ADD_COUNT].

  Raises:
    atomic_files.CheckpointError: If the file is corrupt or the value is
      not such an integer (a count past the bound, say, would break the
      next `add`, or `add_count` and `save`).
  """
  with atomic_files.refusing(path):
    add_count = gzip_files.load_npy_gz(path, expected=expected,
                                       max_bytes=16)
    if add_count.shape not in ((), (1,)):
      raise atomic_files.CorruptCheckpointError(
          '{}: add_count must be an integer scalar, got {}'.format(
              path, errors.describe(add_count)))
    try:
      return validation.check_add_count(add_count)
    except ValueError as e:
      raise atomic_files.CorruptCheckpointError('{}: {}'.format(
          path, e)) from None


def _check_invalid_range(memory: Any, path: str,
                         expected: Optional[atomic_files.FileDigest],
                         add_count: int) -> None:
  """Reads the invalid_range file; it must match add_count.

  It must hold the memory's `invalid_range` as it is after `add_count`
  adds; with `add_count` 0, any array passes.

  Raises:
    atomic_files.CheckpointError: If the file is corrupt or does not match
      `add_count` and the memory's configuration.
  """
  with atomic_files.refusing(path):
    # Room for other configurations' ranges, for a clearer error.
    loaded_range = gzip_files.load_npy_gz(
        path, expected=expected, max_bytes=8 * (
            memory.stack_size + memory.update_horizon) + (1 << 16))
    if add_count == 0:
      return  # Dopamine saves zeros of some length before the first add.
    capacity = memory.replay_capacity
    wanted = sampling.invalid_range(add_count % capacity, capacity,
                                    memory.stack_size, memory.update_horizon)
    if (loaded_range.shape != wanted.shape or
        not np.array_equal(loaded_range, wanted)):
      raise atomic_files.CorruptCheckpointError(
          '{}: invalid_range {} does not match add_count {} with '
          'stack_size {} and update_horizon {}: a checkpoint of a '
          'differently configured buffer?'.format(
              path, loaded_range.tolist(), add_count, memory.stack_size,
              memory.update_horizon))


def _read_episode_ends(memory: Any, path: str,
                       expected: Optional[atomic_files.FileDigest],
                       written: int) -> set:
  """Reads the episode_end_indices file: a set of written slots.

  Raises:
    atomic_files.CheckpointError: If the file is corrupt, too large, or
      holds anything but ints in [0, written).
  """
  # At most one int per slot, 5 to 13 bytes each in any protocol.
  capacity = memory.replay_capacity
  limits = safe_pickle.PickleLimits(
      max_bytes=32 * capacity + (1 << 16), max_elements=capacity + 16,
      max_depth=4)
  with atomic_files.refusing(path):
    loaded = gzip_files.load_pickle_gz(path, expected=expected,
                                       limits=limits)
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


def _read_attribute(memory: Any, path: str, file_format: str,
                    expected: Optional[atomic_files.FileDigest]) -> Any:
  """Reads the checkpoint file of a public attribute (plain data).

  Raises:
    atomic_files.CheckpointError: If the file is corrupt, unsafe or larger
      than 64 MiB more than all storage arrays together.
  """
  max_bytes = (1 << 26) + memory.storage.nbytes
  with atomic_files.refusing(path):
    if file_format == 'npy':
      return gzip_files.load_npy_gz(path, expected=expected,
                                    max_bytes=max_bytes)
    value = gzip_files.load_pickle_gz(
        path, expected=expected, limits=safe_pickle.PickleLimits(
            max_bytes=max_bytes, max_elements=max_bytes // 8,
            max_depth=safe_pickle.DEFAULT_PICKLE_LIMITS.max_depth))
    problem = safe_pickle.non_plain_data(value)
    if problem is not None:
      raise atomic_files.CorruptCheckpointError(
          '{}: an attribute must be plain data, found {}.'.format(
              path, problem))
  return value


def state_files(path: str, fallback: Set[str]) -> Set[str]:
  """The file names the dopamine_per state at `path` records: which format
  a checkpoint is in, before `read` reads it. `fallback` if the state is
  missing or unreadable (`read` then says why)."""
  limits = safe_pickle.PickleLimits(max_bytes=1 << 24, max_elements=1 << 20,
                                    max_depth=16)
  try:
    state = gzip_files.load_pickle_gz(path, limits=limits)
  except (atomic_files.CheckpointError, OSError, ValueError):
    return fallback
  files = state.get('files') if isinstance(state, dict) else None
  return set(files) if isinstance(files, dict) else fallback


def _read_extra_state(layout: Layout, path: str,
                      expected: Optional[atomic_files.FileDigest]
                     ) -> Optional[Dict[str, Any]]:
  """Reads and checks the dopamine_per state file; None if there is none.

  Its structure is checked before any of it is used: `files` must map
  exactly the memory's checkpoint file names (`layout.files`) to
  (size, sha256) tuples, so it can name no other file.

  Args:
    layout: Layout, the checkpoint's file names.
    path: str, the file.
    expected: the digest a pending journal records for it, or None.

  Raises:
    atomic_files.CheckpointError: If the file is corrupt or malformed, or
      missing though a journal lists it.
  """
  if expected is None and not atomic_files.exists(path):
    return None
  # A few flags, a generator state, a (size, sha256) per file.
  files = len(layout.files)
  limits = safe_pickle.PickleLimits(
      max_bytes=(1 << 20) + 1024 * files,
      max_elements=(1 << 14) + 8 * files, max_depth=16)
  with atomic_files.refusing(path):
    extra = gzip_files.load_pickle_gz(path, expected=expected,
                                      limits=limits)
    problem = _extra_state_problem(layout, extra)
    if problem is not None:
      raise atomic_files.CorruptCheckpointError(
          '{}: not a dopamine_per state: {}'.format(path, problem))
  return extra


def _extra_state_problem(layout: Layout, extra: Any) -> Optional[str]:
  """What is wrong with a loaded dopamine_per state, or None."""
  if type(extra) is not dict:  # pylint: disable=unidiomatic-typecheck
    return 'a {}, not a dict'.format(type(extra).__name__)
  version = extra.get('format_version', STATE_FORMAT_VERSION)
  if type(version) is not int or version != STATE_FORMAT_VERSION:  # pylint: disable=unidiomatic-typecheck
    return 'format_version {} (this version reads {})'.format(
        errors.describe(version), STATE_FORMAT_VERSION)
  if not isinstance(extra.get('next_experience_is_episode_start'), bool):
    return 'next_experience_is_episode_start is {}, not a bool'.format(
        errors.describe(extra.get('next_experience_is_episode_start')))
  if not isinstance(extra.get('rng_state'), (dict, type(None))):
    return 'rng_state is a {}, not a dict'.format(
        type(extra['rng_state']).__name__)
  if not isinstance(extra.get('sampler_state'), (str, type(None))):
    return 'sampler_state is a {}, not a str'.format(
        type(extra['sampler_state']).__name__)
  files = extra.get('files')
  if type(files) is not dict:  # pylint: disable=unidiomatic-typecheck
    return 'files is {}, not a dict'.format(errors.describe(files))
  own = {name for name, _ in layout.files}
  if set(files) != own:
    strange = sorted(errors.describe(name, 40) for name in set(files) - own)
    missing = sorted(own - set(files))
    return ('files names {} and lacks {}; it must name exactly this '
            "memory's checkpoint files".format(strange[:5], missing[:5]))
  for name, digest in files.items():
    if atomic_files.digest_from_data(digest, container=tuple) is None:
      return 'the digest of {} is {}, not (size, sha256)'.format(
          name, errors.describe(digest))
  return None


def replaced(memory: Any, pending: Dict[str, Any]) -> Dict[str, Any]:
  """What `install(memory, pending)` would replace, in `read`'s format.

  Installing it puts the memory back as it is now: the same storage arrays
  (`install` adopts new ones and writes none of the old), add count,
  episode ends, generator state, public attributes and extension states.
  `memory_checkpoint.load` takes it to undo a load that the native ops
  cannot take.

  Args:
    memory: the memory being loaded (the caller holds its lock).
    pending: what `read` returned for it.
  """
  storage = memory.storage.state()
  return {
      'store': storage['arrays'], 'add_count': storage['add_count'],
      'episode_end_indices': storage['episode_end_indices'],
      'episode_start': storage['episode_start'],
      'rng_state': (None if memory.rng is None else
                    memory.rng.bit_generator.state),
      # Bound, the ops' generator is untouched until the bind after the
      # install; else what `restore_sampler_state` holds for the first one.
      'sampler_state': (None if memory.native is None or memory.native.bound
                        else memory.native.sampler_state()),
      'attributes': {name: vars(memory)[name]
                     for name in pending['attributes']},
      'extensions': [(extension, extension.value(memory))
                     for extension, _ in pending['extensions']],
  }


def install(memory: Any, pending: Dict[str, Any]) -> None:
  """Installs a checkpoint `read` returned, or what `replaced` returned.

  Cannot fail.

  Args:
    memory: the memory `read` read it for (the caller still holds its lock).
    pending: what `read` or `replaced` returned.
  """
  for extension, state in pending['extensions']:
    extension.commit(memory, state)
  memory.storage.restore({
      'arrays': pending['store'], 'add_count': pending['add_count'],
      'episode_end_indices': pending['episode_end_indices'],
      'episode_start': pending['episode_start']})
  if pending['rng_state'] is not None:
    memory.rng.bit_generator.state = pending['rng_state']
  if memory.native is not None:
    memory.native.restore_sampler_state(pending['sampler_state'])
  for name, value in pending['attributes'].items():
    setattr(memory, name, value)
