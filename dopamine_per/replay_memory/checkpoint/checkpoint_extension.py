# coding=utf-8
"""Files a memory class adds to the circular memory's checkpoint.

A memory class lists its `CheckpointExtension`s in its
`checkpoint_extensions` class attribute; `memory_checkpoint` saves and
loads them beside the memory's own files. `SUM_TREE` is the prioritized
memory's: its sum tree, as Dopamine pickles it (or, in a chunked
checkpoint, as `chunk_checkpoint` stores it, checked by `check`).
"""

from typing import Any, BinaryIO, Callable, Dict, Optional

from dopamine_per.file_io import atomic_files
from dopamine_per.file_io import gzip_files
from dopamine_per.file_io import safe_pickle
from dopamine_per.replay_memory import sum_tree

__all__ = ['CheckpointExtension', 'SUM_TREE']


class CheckpointExtension(object):
  """A file a memory class adds to the circular memory's checkpoint.

  A memory class lists its extensions in its `checkpoint_extensions`
  class attribute. `save` writes them after the memory's own files, before
  the public attributes'; `load` reads them last and installs them first.

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

  def leaves(self, memory: Any) -> Any:
    """A 'sum_tree' extension's state as a chunked checkpoint stores it
    (`chunk_checkpoint.sum_tree_part`: the leaf level and its maximum)."""
    raise NotImplementedError

  def writer(self, memory: Any) -> Callable[[BinaryIO], None]:
    """A 'sum_tree' extension's writer of Dopamine's file, as the memory is
    now (what it copies now is all a background save's snapshot pays)."""
    raise NotImplementedError

  def check(self, memory: Any, state: Any, where: str) -> Any:
    """Validates a state of format 'sum_tree' read from a chunked
    checkpoint (`chunk_checkpoint`); returns what `commit` installs.

    Raises:
      atomic_files.CheckpointError: naming `where`, if it does not fit.
    """
    raise NotImplementedError

  def commit(self, memory: Any, state: Any) -> None:
    """Installs what `read` returned. Must not fail.

    Also takes what `value` returned, to put the memory back as it was.
    """
    raise NotImplementedError


class _SumTreeExtension(CheckpointExtension):
  """The prioritized memory's `sum_tree` file: a pickled Dopamine SumTree."""

  name = 'sum_tree'
  file_format = 'sum_tree'

  def value(self, memory: Any) -> Dict[str, Any]:
    return memory.get_sum_tree_state()

  def leaves(self, memory: Any) -> Dict[str, Any]:
    """`value` with the leaf level alone: what a chunked checkpoint
    stores (the inner levels cost a save's snapshot as much again)."""
    return memory.get_sum_tree_state(leaves_only=True)

  def writer(self, memory: Any) -> Callable[[BinaryIO], None]:
    """The function writing Dopamine's file of the tree as it is now: the
    leaves copied now, the inner levels and the pickle made when it is
    called (by a background save's thread, not in its snapshot)."""
    state = self.leaves(memory)

    def write(f: BinaryIO) -> None:
      full = dict(state, nodes=sum_tree.levels_of(state['nodes'][-1]))
      gzip_files.dopamine_sum_tree_gz_writer(full)(f)
    return write

  def read(self, memory: Any, path: str,
           expected: Optional[atomic_files.FileDigest]) -> Dict[str, Any]:
    # Dopamine's binary levels: 2 * leaves - 1 floats, at most 64 bytes each
    # in any pickle protocol; and a generator state (MT19937's: 624 words).
    leaves = 1 << max(memory.replay_capacity - 1, 0).bit_length()
    limits = safe_pickle.PickleLimits(
        max_bytes=128 * leaves + (1 << 16),
        max_elements=2 * leaves + (1 << 12), max_depth=8)
    with atomic_files.refusing(path):
      loaded = gzip_files.load_pickle_gz(path, expected=expected,
                                         limits=limits)
      if isinstance(loaded, safe_pickle.PickledSumTreeState):
        state = loaded.state
      elif isinstance(loaded, dict):
        state = loaded
      else:
        raise atomic_files.CorruptCheckpointError(
            '{}: expected a pickled SumTree, got {}'.format(
                path, type(loaded).__name__))
      return self.check(memory, state, path)

  def check(self, memory: Any, state: Dict[str, Any], where: str
           ) -> Dict[str, Any]:
    # The generator is the memory's (restored from the dopamine_per state),
    # shared with the tree: keep the tree's object.
    state = {k: v for k, v in state.items() if k != 'rng_state'}
    try:
      # A scratch tree of the same priority bounds: set_state validates.
      sum_tree.SumTree(
          memory.replay_capacity,
          priority_dtype=memory.sum_tree.priority_dtype).set_state(state)
    except ValueError as e:
      raise atomic_files.CorruptCheckpointError(
          '{}: {}'.format(where, e)) from e
    return state

  def commit(self, memory: Any, state: Dict[str, Any]) -> None:
    memory.set_sum_tree_state(state)  # Validated in `read`.


# The prioritized memory's extension.
SUM_TREE = _SumTreeExtension()
