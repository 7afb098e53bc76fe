# coding=utf-8
"""All-or-nothing restores of an agent's TF variables (`DQNAgent.unbundle`).

`check_tf_checkpoint` refuses a TF checkpoint that does not match the graph
or is damaged, before anything is restored; `VariableSnapshot` puts the
variables back when a later part of the load fails. See
docs/compat.md#checkpointer.
"""

import os
from typing import Dict, Mapping, Optional, Sequence, Union

import tensorflow as tf

from dopamine_per.discrete_domains import checkpointer
from dopamine_per.file_io import atomic_files

__all__ = ['check_tf_checkpoint', 'VariableSnapshot']

# Mismatching variables named in one refusal (a network with another width
# mismatches in every layer and every optimizer slot).
_MISMATCHES_SHOWN = 2


def _shape_text(shape: Sequence[Optional[int]]) -> str:
  return '({})'.format(', '.join(str(d) for d in shape) +
                       (',' if len(shape) == 1 else ''))


def _check_regular_tf_files(prefix: str) -> None:
  """Refuses a TF checkpoint's index or data file that is not a regular file.

  TF would block forever opening a FIFO.
  """
  checkpointer.regular_file_size(prefix + '.index')
  directory, base = os.path.split(prefix)
  for name in tf.io.gfile.listdir(directory or '.'):
    if name.startswith(base + '.data-'):
      checkpointer.regular_file_size(os.path.join(directory, name))


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
        prefix, checkpointer.error_summary(e))) from e
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
      raise atomic_files.CheckpointError(
          '{}: variable {} cannot be read: {}'.format(
              prefix, name, checkpointer.error_summary(e))) from e


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
