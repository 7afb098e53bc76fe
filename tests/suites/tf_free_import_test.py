"""The NumPy side of the replay memories runs without TensorFlow and JAX.

The out-of-graph memories (and so `file_io`) import, fill and sample, and
gin binds the `Wrapped*` classes, with `tensorflow` (and `jax`, `flax`)
never in `sys.modules`, each in a fresh interpreter.
"""

import textwrap

from absl.testing import absltest

from tests.support import fixtures

# Imports the three modules; every snippet starts with it.
_IMPORTS = """
import sys
from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory import sum_tree
"""

# Every snippet ends with it, unless it imports TensorFlow on purpose. JAX
# and flax (the 'jax' extra, dopamine_per.jax) stay out of the core too.
_ASSERT_NO_TF = """
loaded = sorted(name for name in sys.modules
                if name.split('.')[0] in ('tensorflow', 'jax', 'flax'))
assert not loaded, 'TensorFlow or JAX was imported: {}'.format(loaded[:5])
"""


def _run(snippet: str, imports_tensorflow: bool = False) -> None:
  """Runs the imports then `snippet` in a fresh interpreter; fails on error.

  Unless `imports_tensorflow`, TensorFlow must not have been imported.
  """
  code = _IMPORTS + textwrap.dedent(snippet)
  if not imports_tensorflow:
    code += _ASSERT_NO_TF
  result = fixtures.run_python(['-c', code], 300)
  if result.returncode:
    raise AssertionError('The snippet failed:\n{}\n{}'.format(
        code, result.stderr[-3000:]))


class TensorFlowFreeImportTest(absltest.TestCase):

  def test_memories_add_and_sample_without_tensorflow(self):
    _run("""
        import numpy as np
        plain = circular_replay_buffer.OutOfGraphReplayBuffer(
            (4,), stack_size=2, replay_capacity=50, batch_size=8)
        prioritized = (
            prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
                (4,), stack_size=2, replay_capacity=50, batch_size=8))
        for i in range(30):
          observation = np.full(4, i, np.uint8)
          plain.add(observation, i % 3, 1.0, i % 10 == 9)
          prioritized.add(observation, i % 3, 1.0, i % 10 == 9, None)
        assert len(plain.sample_transition_batch()[0]) == 8
        batch = prioritized.sample_transition_batch()
        prioritized.set_priority(batch[7], np.full(8, 2.0))
        assert (prioritized.get_priority(batch[7]) == 2.0).all()
        tree = sum_tree.SumTree(8)
        tree.set(np.arange(8), np.ones(8))
        tree.stratified_sample(4)
        """)

  def test_gin_binds_the_wrapped_memories_without_tensorflow(self):
    _run("""
        import gin
        gin.parse_config([
            'WrappedPrioritizedReplayBuffer.batch_size = 7',
            'WrappedReplayBuffer.batch_size = 5',
            'circular_replay_buffer.WrappedReplayBuffer.use_staging = True',
        ])
        assert gin.query_parameter(
            'WrappedPrioritizedReplayBuffer.batch_size') == 7
        assert gin.query_parameter('WrappedReplayBuffer.batch_size') == 5
        assert issubclass(
            prioritized_replay_buffer.WrappedPrioritizedReplayBuffer,
            circular_replay_buffer.WrappedReplayBuffer)
        """)

  def test_a_failed_load_does_not_import_tensorflow(self):
    # Each memory, with the dopamine_per state file and without it (a
    # Dopamine checkpoint).
    _run("""
        import errno
        import os
        import tempfile
        import numpy as np
        from dopamine_per.file_io import atomic_files
        prioritized = (
            prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer)
        cases = [(circular_replay_buffer.OutOfGraphReplayBuffer, (),
                  '$store$_reward'),
                 (prioritized, (None,), '$store$_reward'),
                 (prioritized, (None,), 'sum_tree')]
        for memory_class, priority, missing in cases:
          for dopamine_style in (False, True):
            with tempfile.TemporaryDirectory() as directory:
              memory = memory_class((4,), stack_size=2, replay_capacity=50,
                                    batch_size=8)
              for i in range(20):
                memory.add(np.full(4, i, np.uint8), 0, 1.0, i % 10 == 9,
                           *priority)
              memory.save(directory, 1)
              names = [missing] + (['dopamine_per_state'] if dopamine_style
                                   else [])
              for name in names:
                os.remove(os.path.join(directory, name + '_ckpt.1.gz'))
              try:
                memory_class((4,), stack_size=2, replay_capacity=50,
                             batch_size=8).load(directory, 1)
              except atomic_files.CheckpointNotFoundError as error:
                path = os.path.join(directory, missing + '_ckpt.1.gz')
                assert error.filename == path, error.filename
                assert error.errno == errno.ENOENT, error.errno
                assert missing in str(error), str(error)
              else:
                raise AssertionError('loaded without ' + missing)
        """)

  def test_tensorflow_is_reached_through_one_loader(self):
    # Issue 23: with `wrapped_replay_buffer.tensorflow_side` handing out a
    # stand-in, every TensorFlow body of the wrappers and `as_dataset` goes
    # to it (any other way would show up in sys.modules), each op with the
    # native binding the wrapper asked it for (issue 24).
    _run("""
        from dopamine_per.replay_memory.graph import wrapped_replay_buffer
        calls = []

        class StandIn(object):

          def __getattr__(self, name):
            def build(memory, *args):
              # The last argument: use_native_ops, or the native binding;
              # for the ops a sharded memory's queue serves, the binding
              # and the queue (None: not a sharded memory).
              queued = name in ('sampling_ops', 'set_priority_op')
              calls.append((name, type(memory).__name__,
                            tuple(args[-2:]) if queued else args[-1]))
              if name == 'native_binding':
                return 'binding' if args[-1] else None
              if name == 'queue_binding':
                return None
              elements = memory.get_transition_elements()
              return [element.name for element in elements], None
            return build

        wrapped_replay_buffer.tensorflow_side = StandIn
        plain = circular_replay_buffer.WrappedReplayBuffer(
            (4,), 2, replay_capacity=50, batch_size=8, use_native_ops=False)
        prioritized = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
            (4,), 2, replay_capacity=50, batch_size=8)
        assert prioritized.indices == 'indices', prioritized.indices
        prioritized.tf_set_priority([0], [1.0])
        prioritized.tf_get_priority([0])
        plain.memory.as_dataset()
        prioritized.memory.as_dataset(4, use_native_ops=False)
        plain_name, prioritized_name = (
            'OutOfGraphReplayBuffer', 'OutOfGraphPrioritizedReplayBuffer')
        assert calls == [('native_binding', plain_name, False),
                         ('queue_binding', plain_name, False),
                         ('sampling_ops', plain_name, (None, None)),
                         ('native_binding', prioritized_name, True),
                         ('queue_binding', prioritized_name, True),
                         ('sampling_ops', prioritized_name, ('binding', None)),
                         ('set_priority_op', prioritized_name,
                          ('binding', None)),
                         ('get_priority_tensor', prioritized_name, 'binding'),
                         ('dataset', plain_name, True),
                         ('dataset', prioritized_name, False)], calls
        """)

  def test_the_tensorflow_side_imports_tensorflow(self):
    # The check above would pass vacuously if TensorFlow hid from
    # sys.modules: its TF side must show up there.
    _run("""
        from dopamine_per.replay_memory.graph import wrapped_sampling
        assert 'tensorflow' in sys.modules
        """, imports_tensorflow=True)


if __name__ == '__main__':
  absltest.main()
