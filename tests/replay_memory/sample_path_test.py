"""The path of one graph-mode prioritized sample (docs/architecture.md).

A batch sampled through `WrappedPrioritizedReplayBuffer` must run Python in
at most 6 modules of the package, each entered only from a module above it:
no call goes back up into a module that is still running (the pattern of a
free function taking the memory and calling back into it). The session
runs every op on the calling thread (a negative inter-op thread count), so
`sys.setprofile` sees the py_func's Python too.
"""

import sys
from typing import List, Tuple

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from dopamine_per.replay_memory import prioritized_replay_buffer

_PACKAGE = 'dopamine_per.'
_MAX_MODULES = 6
# Calls from one module of the package into another, for one batch with at
# most one round of redraws (docs/architecture.md counts them).
_MAX_CROSSINGS = 14


def _module(frame) -> str:
  return frame.f_globals.get('__name__', '') if frame is not None else ''


def _trace(run) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Runs `run()` under a profiler; returns its crossings and re-entries.

  Returns:
    (crossings, re-entries): each (caller module, callee module) call between
    two modules of the package, and 'module.function' of every call into a
    module of the package while a frame of that module is lower on the
    stack but not the caller.
  """
  crossings, reentries = [], []

  def profile(frame, event, unused_arg):
    if event != 'call':
      return
    callee, caller = _module(frame), _module(frame.f_back)
    if not callee.startswith(_PACKAGE) or callee == caller:
      return
    if caller.startswith(_PACKAGE):
      crossings.append((caller, callee))
    below = frame.f_back
    while below is not None:
      if _module(below) == callee:
        reentries.append('{}.{}'.format(callee, frame.f_code.co_name))
        break
      below = below.f_back

  sys.setprofile(profile)
  try:
    run()
  finally:
    sys.setprofile(None)
  return crossings, reentries


class SamplePathTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    graph = tf.Graph()
    with graph.as_default():
      self.wrapped = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
          observation_shape=(84, 84), stack_size=4, replay_capacity=1000,
          batch_size=32, update_horizon=3)
      self.state = self.wrapped.transition['state']
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=-1)
    self.session = tf.compat.v1.Session(graph=graph, config=config)
    self.addCleanup(self.session.close)
    rng = np.random.default_rng(0)
    for t in range(1200):  # Full, with episode ends to redraw around.
      self.wrapped.memory.add(
          rng.integers(0, 256, (84, 84), dtype=np.uint8), 0, 1.0,
          t % 97 == 96, priority=None)
    self.session.run(self.state)  # Compiles and caches on the first run.

  def test_a_sample_goes_down_six_modules(self):
    crossings, reentries = _trace(lambda: self.session.run(self.state))
    modules = {callee for _, callee in crossings}
    modules.update(caller for caller, _ in crossings)
    self.assertIn('dopamine_per.replay_memory.numpy_function', modules)
    self.assertIn('dopamine_per.replay_memory.numba_kernels', modules)
    self.assertLessEqual(len(modules), _MAX_MODULES, sorted(modules))
    self.assertEqual(reentries, [])
    self.assertLessEqual(len(crossings), _MAX_CROSSINGS, crossings)

  def test_the_tracer_sees_a_call_back_up(self):
    # A hook that calls back into a module still running is caught.
    memory = self.wrapped.memory
    original = memory._draw  # pylint: disable=protected-access

    def draw_calling_up(count):
      memory.is_valid_transition(0)  # circular_replay_buffer, on the stack.
      return original(count)

    memory._draw = draw_calling_up  # pylint: disable=protected-access
    _, reentries = _trace(lambda: self.session.run(self.state))
    self.assertIn(
        'dopamine_per.replay_memory.circular_replay_buffer.'
        'is_valid_transition', reentries)


if __name__ == '__main__':
  absltest.main()
