"""The path of one graph-mode prioritized sample (docs/architecture.md).

Through the native ops (the default; issue 24), a batch sampled through
`WrappedPrioritizedReplayBuffer` runs no Python at all: while the session
executes, no Python function is called, of the package or of TensorFlow.

Through the `tf.numpy_function` ops (`use_native_ops=False`), TensorFlow's
py_func calls the memory's `sample_transition_batch` directly, and the
sample runs Python in at most 6 modules of the package, each entered only
from a module above it: no call goes back up into a module that is still
running (the pattern of a free function taking the memory and calling back
into it).

The session runs every op on the calling thread (a negative inter-op thread
count), so `sys.setprofile` sees the Python that TensorFlow's kernels call
too: every call made while the session's C++ runs (inside
`TF_SessionRun_wrapper`) comes from TensorFlow's side.
"""

import random
import sys
from typing import List, NamedTuple, Tuple

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from dopamine_per.replay_memory import prioritized_replay_buffer

_PACKAGE = 'dopamine_per.'
_MAX_MODULES = 6
# Calls from one module of the package into another, for one batch without
# redraws, and for each round of redraws (docs/architecture.md counts them).
_MAX_CROSSINGS = 8
_CROSSINGS_PER_REDRAW = 4
_REDRAW = 'dopamine_per.replay_memory.prioritized_replay_buffer._redraw'
# Where TensorFlow's py_func enters the package.
_ENTRY = ('dopamine_per.replay_memory.circular_replay_buffer.'
          'sample_transition_batch')
# The builtin through which `Session.run` runs the graph.
_SESSION_RUN = 'TF_SessionRun_wrapper'


def _module(frame) -> str:
  return frame.f_globals.get('__name__', '') if frame is not None else ''


class Trace(NamedTuple):
  """What `_trace` saw.

  Attributes:
    crossings: each (caller module, callee module) call between two modules
      of the package.
    reentries: 'module.function' of every call into a module of the package
      while a frame of that module is lower on the stack but not the caller.
    package_calls: 'module.function' of every call into the package.
    from_tensorflow: 'module.function' (or the builtin's name) of every
      Python or builtin call made while the session's C++ runs the graph.
  """
  crossings: List[Tuple[str, str]]
  reentries: List[str]
  package_calls: List[str]
  from_tensorflow: List[str]


def _trace(run) -> Trace:
  """Runs `run()` under a profiler; returns what it saw (see `Trace`)."""
  trace = Trace([], [], [], [])
  in_session = [0]

  def profile(frame, event, arg):
    if event in ('c_call', 'c_return', 'c_exception'):
      if getattr(arg, '__name__', None) == _SESSION_RUN:
        in_session[0] += 1 if event == 'c_call' else -1
        return
      if event == 'c_call' and in_session[0]:
        trace.from_tensorflow.append(getattr(arg, '__name__', repr(arg)))
      return
    if event != 'call':
      return
    callee, caller = _module(frame), _module(frame.f_back)
    if in_session[0]:
      trace.from_tensorflow.append('{}.{}'.format(callee,
                                                  frame.f_code.co_name))
    if not callee.startswith(_PACKAGE):
      return
    trace.package_calls.append('{}.{}'.format(callee, frame.f_code.co_name))
    if callee == caller:
      return
    if caller.startswith(_PACKAGE):
      trace.crossings.append((caller, callee))
    below = frame.f_back
    while below is not None:
      if _module(below) == callee:
        trace.reentries.append('{}.{}'.format(callee, frame.f_code.co_name))
        break
      below = below.f_back

  sys.setprofile(profile)
  try:
    run()
  finally:
    sys.setprofile(None)
  return trace


class SamplePathTestBase(absltest.TestCase):
  """A full Atari-shaped prioritized memory and a session sampling it."""

  use_native_ops: bool

  def setUp(self):
    super().setUp()
    graph = tf.Graph()
    with graph.as_default():
      self.wrapped = prioritized_replay_buffer.WrappedPrioritizedReplayBuffer(
          observation_shape=(84, 84), stack_size=4, replay_capacity=1000,
          batch_size=32, update_horizon=3,
          use_native_ops=self.use_native_ops)
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


class PythonSamplePathTest(SamplePathTestBase):
  """The `tf.numpy_function` ops: the memory's Python sampling."""

  use_native_ops = False

  def test_a_sample_goes_down_six_modules(self):
    self.assertEqual(self.state.op.type, 'PyFunc')
    redraws = []
    # Without an rng the tree draws from Python's `random`: these seeds give
    # batches with and without redraws (asserted below), so both paths are
    # traced on every run.
    for seed in range(16):
      random.seed(seed)
      trace = _trace(lambda: self.session.run(self.state))
      modules = {callee for _, callee in trace.crossings}
      modules.update(caller for caller, _ in trace.crossings)
      # The py_func calls the memory itself: no module of the package
      # between.
      self.assertEqual(trace.package_calls[0], _ENTRY)
      self.assertEqual(trace.package_calls.count(_ENTRY), 1)
      self.assertIn('dopamine_per.native.native_memory', modules)
      self.assertLessEqual(len(modules), _MAX_MODULES, sorted(modules))
      self.assertEqual(trace.reentries, [])
      rounds = trace.package_calls.count(_REDRAW)
      redraws.append(rounds)
      self.assertLessEqual(len(trace.crossings),
                           _MAX_CROSSINGS + rounds * _CROSSINGS_PER_REDRAW,
                           trace.crossings)
    self.assertIn(0, redraws)
    self.assertNotEqual(redraws.count(0), len(redraws))

  def test_the_tracer_sees_the_python_tensorflow_calls(self):
    # What the native test below finds empty is not empty by construction:
    # the py_func's calls all come from TensorFlow's side.
    trace = _trace(lambda: self.session.run(self.state))
    self.assertTrue(trace.package_calls)
    self.assertContainsSubset(trace.package_calls, trace.from_tensorflow)
    self.assertIn(_ENTRY, trace.from_tensorflow)

  def test_the_tracer_sees_a_call_back_up(self):
    # A hook that calls back into a module still running is caught.
    memory = self.wrapped.memory
    original = memory._draw_generator  # pylint: disable=protected-access

    def draw_calling_up(count):
      memory.is_valid_transition(0)  # circular_replay_buffer, on the stack.
      return original(count)

    memory._draw_generator = draw_calling_up  # pylint: disable=protected-access
    trace = _trace(lambda: self.session.run(self.state))
    self.assertIn(
        'dopamine_per.replay_memory.circular_replay_buffer.'
        'is_valid_transition', trace.reentries)


class NativeSamplePathTest(SamplePathTestBase):
  """The native ops (the default): no Python on the graph's sample path."""

  use_native_ops = True

  def test_a_sample_runs_no_python(self):
    self.assertEqual(self.state.op.type, 'DopaminePerSampleTransitions')
    for fetch in (self.state, self.wrapped.transition):
      trace = _trace(lambda: self.session.run(fetch))  # pylint: disable=cell-var-from-loop
      self.assertEqual(trace.package_calls, [])
      self.assertEqual(trace.from_tensorflow, [])

  def test_a_priority_update_runs_no_python(self):
    graph = self.state.graph
    with graph.as_default():
      indices = self.wrapped.transition['indices']
      update = self.wrapped.tf_set_priority(
          indices, tf.cast(indices, tf.float32) + 1.0)
      priorities = self.wrapped.tf_get_priority(indices)
    self.session.run([update, priorities])
    trace = _trace(lambda: self.session.run([update, priorities]))
    self.assertEqual(trace.package_calls, [])
    self.assertEqual(trace.from_tensorflow, [])


del SamplePathTestBase  # Not a test itself.


if __name__ == '__main__':
  absltest.main()
