# coding=utf-8
"""Crash-safe experiment checkpoints, as Dopamine's ``checkpointer``.

Same names and files as ``dopamine.discrete_domains.checkpointer``: each
iteration N writes ``ckpt.N`` (the pickled experiment data: the agent's
bundle, the iteration number, ...) after the agent has written its own files
(``tf_ckpt-N.*``, the replay memory's ``*_ckpt.N.gz``), then the marker
``sentinel_checkpoint_complete.N``; `get_latest_checkpoint_number` returns
the newest N with a marker.

Every file is written atomically; the marker, written last, lists every
file of the iteration with its size and SHA-256, so `verify` can say why
a checkpoint is not usable and `Runner` falls back to an older one; stale
iterations lose their marker before their data; markers and ``ckpt.N`` are
read only if they are bounded regular files, ``ckpt.N`` as plain data
(`safe_pickle.restricted_loads`). For the agents' TF checkpoints,
`check_tf_checkpoint`, `VariableSnapshot` and `recorded_tf_checkpoints`
make a restore all-or-nothing. What differs from Dopamine:
docs/compat.md#checkpointer.
"""

import json
import os
import pickle
import re
import stat
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from absl import logging
import gin
import tensorflow as tf

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import safe_pickle

__all__ = ['get_latest_checkpoint_number', 'get_complete_checkpoint_numbers',
           'iteration_files', 'Checkpointer', 'check_tf_checkpoint',
           'VariableSnapshot', 'recorded_tf_checkpoints', 'error_summary']

_MARKER_FORMAT = 'dopamine_per.checkpoint_complete/2'

# A marker lists one iteration's files (a few dozen names, ~100 bytes each).
_MAX_MARKER_BYTES = 1 << 20
# ``ckpt.N`` holds the agent's bundle and the statistics of every iteration
# so far: a few MB after 200 Atari iterations (a few hundred numbers per
# iteration). A file 100 times that size is not one the runner wrote.
_MAX_DATA_BYTES = 1 << 28
# TF's ``checkpoint`` file names the last few TF checkpoints.
_MAX_TF_STATE_BYTES = 1 << 20
# Iteration numbers in marker names: ASCII digits (str.isdigit also takes
# other scripts' digits), no more than an int64 holds.
_ITERATION_NUMBER = re.compile(r'[0-9]{1,18}')
_SHA256 = re.compile(r'[0-9a-f]{64}')
# Mismatching variables named in one refusal (a network with another width
# mismatches in every layer and every optimizer slot).
_MISMATCHES_SHOWN = 2
# Lines of TF's graph-error messages that locate the error but do not say
# what it is.
_TF_CONTEXT_LINES = ('Detected at node', 'File "', 'Node:', '[[',
                     'Original stack trace')


def _sentinel_prefix(sentinel_file_identifier: str) -> str:
  return 'sentinel_{}_complete'.format(sentinel_file_identifier)


def error_summary(error: BaseException) -> str:
  """Returns one line saying why a checkpoint was refused.

  The first informative line of the message (TF's graph errors start with a
  generic 'Graph execution error:' and where the op was built), cut to 500
  characters, after the exception's type unless it is a
  `atomic_files.CheckpointError` (whose messages name the file and the
  reason).

  Args:
    error: the exception raised while reading the checkpoint.
  """
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  informative = [line for line in lines if not (
      line.endswith('error:') or line.startswith(_TF_CONTEXT_LINES))]
  line = (informative or lines or [''])[0]
  if not isinstance(error, atomic_files.CheckpointError) or not line:
    line = '{}: {}'.format(type(error).__name__, line).rstrip(': ')
  return line if len(line) <= 500 else line[:497] + '...'


def _file_size(path: str) -> int:
  """Returns the size of the regular file at `path`, without opening it.

  Raises:
    atomic_files.CheckpointError: If nothing is there, or something other
      than a regular file (a directory, a FIFO, a device), which reading
      would fail on, block on, or never finish.
  """
  if atomic_files.is_url(path):
    if not tf.io.gfile.exists(path):
      raise atomic_files.CheckpointError('{} is missing'.format(path))
    if tf.io.gfile.isdir(path):
      raise atomic_files.CheckpointError(
          '{} is not a regular file'.format(path))
    try:
      return tf.io.gfile.stat(path).length
    except tf.errors.OpError as e:
      raise atomic_files.CheckpointError('{}: {}'.format(
          path, error_summary(e))) from e
  try:
    status = os.stat(path)
  except FileNotFoundError:
    raise atomic_files.CheckpointError(
        '{} is missing'.format(path)) from None
  except OSError as e:
    raise atomic_files.CheckpointError('{}: {}'.format(
        path, e.strerror or e)) from e
  if not stat.S_ISREG(status.st_mode):
    raise atomic_files.CheckpointError('{} is not a regular file'.format(path))
  return status.st_size


def _read_file(path: str, limit: int, what: str) -> bytes:
  """Returns the content of the regular file at `path`, at most limit bytes.

  Args:
    path: str, the file.
    limit: int, the largest size accepted.
    what: str, what the file is, for the error message.

  Raises:
    atomic_files.CheckpointError: If the file is missing, not a regular
      file, larger than `limit`, or cannot be read.
  """
  try:
    return atomic_files.read_file(path, limit, what)
  except FileNotFoundError:
    raise atomic_files.CheckpointError(
        '{} is missing'.format(path)) from None


def _belongs_to_iteration(name: str, iteration_number: int) -> bool:
  """Whether `name` is a file name of iteration N's checkpoint.

  N stands between a '.' or '-' and a '.' or the end: ``ckpt.N``,
  ``tf_ckpt-N.index``, ``add_count_ckpt.N.gz``. Temporary files (names
  starting with '.') and paths are not.
  """
  if name.startswith('.') or os.path.basename(name) != name:
    return False
  return re.search(r'[.-]{}(\.|$)'.format(int(iteration_number)),
                   name) is not None


def get_complete_checkpoint_numbers(
    base_directory: str,
    sentinel_file_identifier: str = 'checkpoint') -> List[int]:
  """Returns the iteration numbers that have a completion marker, newest first.

  Args:
    base_directory: str, the checkpoint directory.
    sentinel_file_identifier: str, the marker names' identifier.
  """
  prefix = _sentinel_prefix(sentinel_file_identifier) + '.'
  try:
    names = tf.io.gfile.listdir(base_directory)
  except tf.errors.NotFoundError:
    return []
  numbers = []
  for name in names:
    if (name.startswith(prefix) and
        _ITERATION_NUMBER.fullmatch(name[len(prefix):])):
      numbers.append(int(name[len(prefix):]))
  return sorted(numbers, reverse=True)


@gin.configurable
def get_latest_checkpoint_number(base_directory: str,
                                 override_number: Optional[int] = None,
                                 sentinel_file_identifier: str = 'checkpoint'
                                ) -> int:
  """Returns the newest iteration with a completion marker, or -1.

  Args:
    base_directory: str, the checkpoint directory.
    override_number: int or None, returned as is if not None (a gin override).
    sentinel_file_identifier: str, the marker names' identifier.
  """
  if override_number is not None:
    return override_number
  numbers = get_complete_checkpoint_numbers(base_directory,
                                            sentinel_file_identifier)
  return numbers[0] if numbers else -1


def iteration_files(base_directory: str, iteration_number: int,
                    exclude: Optional[str] = None) -> Dict[str, list]:
  """Returns {file name: [size, sha256]} of one iteration's checkpoint files.

  A file belongs to iteration N if its name has N between a '.' or '-' and a
  '.' or its end: ``ckpt.N``, ``tf_ckpt-N.index``, ``add_count_ckpt.N.gz``.
  Temporary files (names starting with '.') are left out.

  Args:
    base_directory: str, the checkpoint directory.
    iteration_number: int, N.
    exclude: str or None, a name to leave out (the marker itself).
  """
  files = {}
  for name in tf.io.gfile.listdir(base_directory):
    if name == exclude or not _belongs_to_iteration(name, iteration_number):
      continue
    path = os.path.join(base_directory, name)
    if tf.io.gfile.isdir(path):
      continue
    files[name] = list(atomic_files.file_digest(path))
  return files


def _listed_files(marker: Any, iteration_number: int,
                  marker_path: str) -> Dict[str, atomic_files.FileDigest]:
  """Returns a marker's {file name: FileDigest}, after checking its structure.

  Raises:
    atomic_files.CheckpointError: If the marker is not of iteration N, or
      its file list is not {name of one of N's files: [size, sha256]}.
  """
  def malformed(what):
    return atomic_files.CheckpointError(
        '{} is malformed: {}'.format(marker_path, what))

  if marker.get('iteration', iteration_number) != iteration_number:
    raise malformed('it is the marker of iteration {!r}'.format(
        marker.get('iteration')))
  files = marker.get('files')
  if not isinstance(files, dict):
    raise malformed("its 'files' entry is not a dict")
  listed = {}
  for name, digest in files.items():
    if not (isinstance(name, str) and
            _belongs_to_iteration(name, iteration_number)):
      raise malformed('it lists {!r}, which is not a file name of checkpoint '
                      '{}'.format(name, iteration_number)[:300])
    if not (isinstance(digest, list) and len(digest) == 2 and
            isinstance(digest[0], int) and not isinstance(digest[0], bool)
            and digest[0] >= 0 and
            isinstance(digest[1], str) and _SHA256.fullmatch(digest[1])):
      raise malformed('the size and SHA-256 of {} are not [int, hex '
                      'digest]'.format(name))
    listed[name] = atomic_files.FileDigest(digest[0], digest[1])
  return listed


@gin.configurable
class Checkpointer(object):
  """Saves and loads the experiment data of each iteration."""

  def __init__(self, base_directory: str, checkpoint_file_prefix: str = 'ckpt',
               sentinel_file_identifier: str = 'checkpoint',
               checkpoint_frequency: int = 1, checkpoint_duration: int = 4,
               keep_every: Optional[int] = None):
    """Creates the directory if needed.

    Args:
      base_directory: str, the checkpoint directory.
      checkpoint_file_prefix: str, the data files' prefix.
      sentinel_file_identifier: str, the marker names' identifier.
      checkpoint_frequency: int, checkpoint every this many iterations.
      checkpoint_duration: int, checkpoints kept (in units of the frequency).
      keep_every: int or None, never delete iterations that are multiples of
        keep_every * checkpoint_frequency.

    Raises:
      ValueError: If base_directory is empty or cannot be created.
    """
    if not base_directory:
      raise ValueError('No path provided to Checkpointer.')
    self._checkpoint_file_prefix = checkpoint_file_prefix
    self._sentinel_file_prefix = _sentinel_prefix(sentinel_file_identifier)
    self._checkpoint_frequency = checkpoint_frequency
    self._checkpoint_duration = checkpoint_duration
    self._keep_every = keep_every
    self._base_directory = base_directory
    try:
      tf.io.gfile.makedirs(base_directory)
    except tf.errors.PermissionDeniedError as e:
      raise ValueError('Unable to create checkpoint path: {}.'.format(
          base_directory)) from e

  def _generate_filename(self, file_prefix: str, iteration_number: int) -> str:
    return os.path.join(self._base_directory,
                        '{}.{}'.format(file_prefix, iteration_number))

  def save_checkpoint(self, iteration_number: int, data: Any) -> None:
    """Writes `data` and then the completion marker of `iteration_number`.

    Call it after everything else of the iteration (the agent's TF and
    replay files) is written: the marker lists those files.

    Args:
      iteration_number: int, the iteration.
      data: picklable plain data (see the module docstring).
    """
    if iteration_number % self._checkpoint_frequency != 0:
      return
    payload = pickle.dumps(data, protocol=4)
    atomic_files.atomic_write(
        self._generate_filename(self._checkpoint_file_prefix,
                                iteration_number),
        lambda f: f.write(payload))
    marker_name = '{}.{}'.format(self._sentinel_file_prefix, iteration_number)
    marker = {
        'format': _MARKER_FORMAT,
        'iteration': int(iteration_number),
        'files': iteration_files(self._base_directory, iteration_number,
                                 exclude=marker_name),
    }
    encoded = json.dumps(marker, indent=1, sort_keys=True).encode('utf-8')
    atomic_files.atomic_write(
        os.path.join(self._base_directory, marker_name),
        lambda f: f.write(encoded))
    self._clean_up_old_checkpoints(iteration_number)

  def _clean_up_old_checkpoints(self, iteration_number: int) -> None:
    stale = iteration_number - (self._checkpoint_frequency *
                                self._checkpoint_duration)
    if stale < 0:
      return
    if (self._keep_every is not None and
        stale % (self._keep_every * self._checkpoint_frequency) == 0):
      return
    # The marker goes first: a half-deleted checkpoint is never complete.
    for prefix in (self._sentinel_file_prefix, self._checkpoint_file_prefix):
      atomic_files.remove_if_exists(self._generate_filename(prefix, stale))

  def verify(self, iteration_number: int) -> None:
    """Checks iteration_number's marker and the files it lists.

    Reads the marker (a bounded regular file) and checks its structure, then
    each listed file's type, size and SHA-256. A Dopamine marker (``done``)
    lists nothing and passes.

    Args:
      iteration_number: int, the iteration.

    Raises:
      atomic_files.CheckpointError: Naming the file and why: the marker is
        missing, unreadable or malformed; a listed file is missing, not a
        regular file, or changed since the checkpoint was written.
    """
    marker_path = self._generate_filename(self._sentinel_file_prefix,
                                          iteration_number)
    content = _read_file(marker_path, _MAX_MARKER_BYTES, 'completion marker')
    try:
      marker = json.loads(content.decode('utf-8'))
    except (ValueError, RecursionError):  # ValueError: also Unicode errors.
      marker = None
    if not isinstance(marker, dict) or marker.get('format') != _MARKER_FORMAT:
      if content.strip() in (b'done', b''):
        return  # Dopamine's marker: nothing to verify.
      raise atomic_files.CheckpointError(
          '{} is neither a completion marker of ours nor '
          "Dopamine's".format(marker_path))
    for name, digest in _listed_files(marker, iteration_number,
                                      marker_path).items():
      path = os.path.join(self._base_directory, name)
      size = _file_size(path)
      if size != digest.size or atomic_files.file_digest(path) != digest:
        raise atomic_files.CheckpointError(
            '{} changed since the checkpoint was written ({} bytes, '
            'recorded {} bytes{})'.format(
                path, size, digest.size,
                ', another SHA-256' if size == digest.size else ''))

  def is_complete(self, iteration_number: int) -> bool:
    """Returns whether iteration_number's marker exists and its files match.

    A checkpoint with a marker that fails `verify` is logged with the reason.

    Args:
      iteration_number: int, the iteration.
    """
    if not tf.io.gfile.exists(self._generate_filename(
        self._sentinel_file_prefix, iteration_number)):
      return False
    try:
      self.verify(iteration_number)
    except atomic_files.CheckpointError as e:
      logging.warning('Checkpoint %d is not usable: %s', iteration_number, e)
      return False
    return True

  def _load_data(self, iteration_number: int) -> Any:
    path = self._generate_filename(self._checkpoint_file_prefix,
                                   iteration_number)
    return safe_pickle.restricted_loads(
        _read_file(path, _MAX_DATA_BYTES, 'experiment data file'),
        filename=path)

  def load_checkpoint(self, iteration_number: int) -> Optional[Any]:
    """Returns the data saved for iteration_number, or None.

    None when the checkpoint is not complete (see `is_complete`) or its data
    file is missing (Dopamine's contract; `load_verified_checkpoint` says
    why instead).

    Args:
      iteration_number: int, the iteration.

    Raises:
      atomic_files.CheckpointError: If the data file is corrupt, not a
        regular file, too large, or holds more than plain data.
    """
    if not self.is_complete(iteration_number):
      return None
    if not tf.io.gfile.exists(self._generate_filename(
        self._checkpoint_file_prefix, iteration_number)):
      return None
    return self._load_data(iteration_number)

  def load_verified_checkpoint(self, iteration_number: int) -> Any:
    """Returns the data of iteration_number, after `verify`.

    Args:
      iteration_number: int, the iteration.

    Raises:
      atomic_files.CheckpointError: If the checkpoint fails `verify`, or
        its data file is missing, not a regular file, too large, corrupt, or
        holds more than plain data; the message names the file.
    """
    self.verify(iteration_number)
    return self._load_data(iteration_number)


# ------------------------------------------------- the agents' TF checkpoints


def _shape_text(shape: Sequence[Optional[int]]) -> str:
  return '({})'.format(', '.join(str(d) for d in shape) +
                       (',' if len(shape) == 1 else ''))


def _check_regular_tf_files(prefix: str) -> None:
  """Refuses a TF checkpoint's index or data file that is not a regular file.

  TF would block forever opening a FIFO.
  """
  _file_size(prefix + '.index')
  directory, base = os.path.split(prefix)
  for name in tf.io.gfile.listdir(directory or '.'):
    if name.startswith(base + '.data-'):
      _file_size(os.path.join(directory, name))


def _variables_by_name(
    variables: Union[Mapping[str, tf.Variable], Sequence[tf.Variable]]
) -> Dict[str, tf.Variable]:
  if isinstance(variables, Mapping):
    return dict(variables)
  return {variable.op.name: variable for variable in variables}


def check_tf_checkpoint(
    prefix: str,
    variables: Union[Mapping[str, tf.Variable], Sequence[tf.Variable]]
) -> None:
  """Checks that a TF checkpoint holds exactly `variables`, shapes and dtypes.

  Call it before `tf.compat.v1.train.Saver.restore`: the saver restores
  resource variables without checking their shapes, so an agent configured
  with another network would silently run with the checkpoint's. Every
  value is read once too (TF checks each one's checksum), so a damaged data
  file is found before anything is restored.

  Args:
    prefix: str, the checkpoint's path prefix (``.../tf_ckpt-N``).
    variables: what the Saver was given: {checkpoint name: variable}, or a
      list of graph-mode variables (named by their op names, as the Saver
      names them).

  Raises:
    atomic_files.CheckpointError: If an index or data file is missing or
      not a regular file, the index cannot be read, a variable is missing,
      extra, or of another shape or dtype (the message names the variables,
      up to two, and both shapes), or a value does not read back.
  """
  _check_regular_tf_files(prefix)
  try:
    reader = tf.train.load_checkpoint(prefix)
    saved_shapes = reader.get_variable_to_shape_map()
    saved_dtypes = reader.get_variable_to_dtype_map()
  except tf.errors.OpError as e:
    raise atomic_files.CheckpointError('{}.index cannot be read: {}'.format(
        prefix, error_summary(e))) from e
  expected = _variables_by_name(variables)
  problems = []
  # Shortest names first: a layer's variables before their optimizer slots.
  for name in sorted(set(expected) | set(saved_shapes),
                     key=lambda n: (len(n), n)):
    if name not in saved_shapes:
      problems.append('variable {} of the configured network is not in the '
                      'checkpoint'.format(name))
      continue
    if name not in expected:
      problems.append('variable {} of the checkpoint is not in the '
                      'configured network'.format(name))
      continue
    variable = expected[name]
    shape = tuple(variable.shape.as_list())
    if tuple(saved_shapes[name]) != shape:
      problems.append('variable {} has shape {} in the checkpoint, {} in the '
                      'configured network'.format(
                          name, _shape_text(saved_shapes[name]),
                          _shape_text(shape)))
    elif saved_dtypes[name] != variable.dtype.base_dtype:
      problems.append('variable {} has dtype {} in the checkpoint, {} in the '
                      'configured network'.format(
                          name, saved_dtypes[name].name,
                          variable.dtype.base_dtype.name))
  if problems:
    more = len(problems) - _MISMATCHES_SHOWN
    raise atomic_files.CheckpointError(
        '{} does not match the configured network: {}{}'.format(
            prefix, '; '.join(problems[:_MISMATCHES_SHOWN]),
            ' (and {} more)'.format(more) if more > 0 else ''))
  for name in saved_shapes:
    try:
      reader.get_tensor(name)
    except tf.errors.OpError as e:
      raise atomic_files.CheckpointError('{}: variable {} cannot be read: '
                                          '{}'.format(prefix, name,
                                                      error_summary(e))) from e


class VariableSnapshot(object):
  """The values of some TF variables, to put back after a failed restore."""

  def __init__(self, sess: tf.compat.v1.Session,
               variables: Sequence[tf.Variable]):
    """Reads the variables' values.

    Args:
      sess: the session holding the variables.
      variables: graph-mode variables of sess's graph.
    """
    self._sess = sess
    self._variables = list(variables)
    self._values = sess.run(self._variables)

  def restore(self) -> None:
    """Assigns the values read at construction back to the variables.

    The assign ops are built here, in the session's graph: only the failure
    path pays for them.
    """
    with self._sess.graph.as_default():
      placeholders = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape)
                      for v in self._variables]
      assign = tf.group(*[v.assign(p) for v, p in zip(self._variables,
                                                      placeholders)])
    self._sess.run(assign, feed_dict=dict(zip(placeholders, self._values)))


def recorded_tf_checkpoints(checkpoint_dir: str) -> List[str]:
  """Returns the TF checkpoints listed in checkpoint_dir's ``checkpoint`` file.

  Only paths of this directory's ``tf_ckpt-N`` checkpoints are returned: the
  saver deletes the files of the paths it is given once it has newer ones,
  so a damaged file must not point it elsewhere. A ``checkpoint`` file that
  is missing, not a regular file, too large or unparsable gives [].

  Args:
    checkpoint_dir: str, the checkpoint directory.
  """
  path = os.path.join(checkpoint_dir, 'checkpoint')
  if not tf.io.gfile.exists(path):
    return []
  try:
    _read_file(path, _MAX_TF_STATE_BYTES, "TF 'checkpoint' file")
  except atomic_files.CheckpointError as e:
    logging.warning('Ignoring %s', e)
    return []
  state = tf.train.get_checkpoint_state(checkpoint_dir)
  if state is None:
    return []
  normalize = (lambda p: p.rstrip('/')) if atomic_files.is_url(
      checkpoint_dir) else (lambda p: os.path.normpath(os.path.abspath(p)))
  directory = normalize(checkpoint_dir)
  recorded = []
  # get_checkpoint_state has put checkpoint_dir before relative paths.
  for prefix in state.all_model_checkpoint_paths:
    if (normalize(os.path.dirname(prefix)) == directory and
        re.fullmatch(r'tf_ckpt-[0-9]{1,18}', os.path.basename(prefix))):
      recorded.append(prefix)
  return recorded
