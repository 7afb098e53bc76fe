"""Tests for dopamine_per.replay_memory.numpy_function.

The op must behave as `tf.numpy_function(..., stateful=True)` does, values,
dtypes and errors alike, while handing contiguous arrays over unconverted;
where TF's py_func internals differ, it must be exactly
`tf.numpy_function`'s op, with one warning saying why.
"""

import gc
import threading
from unittest import mock
import weakref

from absl.testing import absltest
import numpy as np
import tensorflow as tf
from tensorflow.python.ops import script_ops  # pylint: disable=g-direct-tensorflow-import

from dopamine_per.replay_memory import numpy_function
from tests.support import graph_util


class NumpyFunctionTest(graph_util.GraphTestCase):

  def test_outputs_match_tf_numpy_function(self):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)

    def outputs(x):
      # Contiguous, strided, a list, a 0-d array and a Python scalar.
      return (x * 2, base[:, ::2], [1, 2, 3], np.int64(7), 2.5)

    types = [tf.int32, tf.float32, tf.int64, tf.int64, tf.float64]
    x = tf.constant([1, 2, 3], dtype=tf.int32)
    ours = numpy_function.numpy_function(outputs, [x], types, name='ours')
    theirs = tf.numpy_function(outputs, [x], types, stateful=True)
    self.assertTrue(numpy_function.uses_direct_outputs(ours[0].op))
    self.assertFalse(numpy_function.uses_direct_outputs(theirs[0].op))
    got_ours, got_theirs = self.session.run([ours, theirs])
    for mine, reference in zip(got_ours, got_theirs):
      np.testing.assert_array_equal(mine, reference)
      self.assertEqual(mine.dtype, reference.dtype)
    np.testing.assert_array_equal(got_ours[1], base[:, ::2])
    self.assertEqual(ours[0].op.name, 'ours')

  def test_inside_a_cond_branch(self):
    branch_ops = []

    def branch():
      out, = numpy_function.numpy_function(
          lambda: np.full(2, 3, np.int32), [], [tf.int32], name='in_branch')
      branch_ops.append(out.op)
      return out

    result = tf.cond(tf.constant(True), branch,
                     lambda: tf.zeros([2], tf.int32))
    self.assertTrue(numpy_function.uses_direct_outputs(branch_ops[0]))
    np.testing.assert_array_equal(self.session.run(result), [3, 3])

  def test_tf_threads_keep_their_python_thread_state(self):
    # A thread-local value lives in the thread state: it survives from one
    # call to the next on a TF thread only if the state is kept.
    local = threading.local()
    seen = {}

    def probe():
      ident = threading.get_ident()
      survived = ident not in seen or getattr(local, 'mark', None) == ident
      seen[ident] = True
      local.mark = ident
      return np.array(survived)

    out, = numpy_function.numpy_function(probe, [], [tf.bool], name='probe')
    self.assertTrue(all(self.session.run(out) for _ in range(20)))

  def test_no_outputs_returns_an_op_that_runs(self):
    calls = []
    op = numpy_function.numpy_function(
        lambda v: calls.append(v.copy()), [tf.constant([5, 6])], [],
        name='record')
    self.assertIsInstance(op, tf.Operation)
    self.assertTrue(numpy_function.uses_direct_outputs(op))
    self.session.run(op)
    self.session.run(op)
    self.assertLen(calls, 2)
    np.testing.assert_array_equal(calls[0], [5, 6])

  def test_a_single_array_result_is_one_output(self):
    out, = numpy_function.numpy_function(
        lambda: np.ones(3, np.float32), [], [tf.float32], name='single')
    np.testing.assert_array_equal(self.session.run(out), [1, 1, 1])

  def test_wrong_dtype_still_raises(self):
    out, = numpy_function.numpy_function(
        lambda: np.zeros(2, np.float64), [], [tf.float32], name='wrong')
    with self.assertRaises(tf.errors.InvalidArgumentError):
      self.session.run(out)

  def test_wrong_count_still_raises(self):
    out = numpy_function.numpy_function(
        lambda: [np.zeros(2, np.float32)], [], [tf.float32, tf.float32],
        name='short')
    with self.assertRaises(tf.errors.InvalidArgumentError):
      self.session.run(out)

  def test_errors_surface_as_tf_numpy_function_surfaces_them(self):
    def fail():
      raise ValueError('bad value 42')

    ours, = numpy_function.numpy_function(fail, [], [tf.float32],
                                          name='fails')
    theirs = tf.numpy_function(fail, [], [tf.float32], stateful=True)
    for fetch in (ours, theirs):
      with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                  'bad value 42'):
        self.session.run(fetch)

  def test_function_lives_as_long_as_the_graph(self):
    def make():
      data = np.arange(5, dtype=np.int32)
      return numpy_function.numpy_function(lambda: data, [], [tf.int32],
                                           name='closure')[0]

    out = make()
    gc.collect()
    np.testing.assert_array_equal(self.session.run(out), np.arange(5))

  def test_stateful_each_run_calls_again(self):
    counter = iter(range(100))
    out, = numpy_function.numpy_function(
        lambda: np.array(next(counter), np.int64), [], [tf.int64],
        name='count')
    self.assertEqual([self.session.run(out) for _ in range(3)], [0, 1, 2])


_OUT_TYPES = [tf.int32, tf.float32, tf.int64]


def _outputs(x):
  # Contiguous, strided and a list.
  return (x * 2, np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
          [4, 5])


def _fallback_warnings(logs):
  return [record.getMessage() for record in logs.records
          if 'plain tf.numpy_function' in record.getMessage()]


class FallbackTest(graph_util.GraphTestCase):
  """TF internals changed: plain `tf.numpy_function` ops, one warning.

  Each test starts unresolved, as a fresh process does, and breaks the
  internals only while it builds the graph (the registry needs them intact
  to run any py_func).
  """

  def setUp(self):
    super().setUp()
    state = mock.patch.object(numpy_function, '_fast_path',
                              numpy_function._UNRESOLVED)
    state.start()
    self.addCleanup(state.stop)

  def _build(self, name):
    return numpy_function.numpy_function(
        _outputs, [tf.constant([1, 2], tf.int32)], _OUT_TYPES, name=name)

  def _assert_plain_and_correct(self, outputs):
    op = outputs[0].op
    registered = script_ops._py_funcs.get(op.get_attr('token').decode())  # pylint: disable=protected-access
    self.assertFalse(isinstance(registered, script_ops.EagerFunc))
    self.assertFalse(numpy_function.uses_direct_outputs(op))
    got = self.session.run(outputs)
    for value, expected in zip(got, _outputs(np.array([1, 2], np.int32))):
      np.testing.assert_array_equal(value, expected)
    self.assertEqual([value.dtype for value in got],
                     [np.int32, np.float32, np.int64])

  def _assert_one_warning(self, logs, reason):
    warnings = _fallback_warnings(logs)
    self.assertLen(warnings, 1, warnings)
    self.assertIn(reason, warnings[0])
    self.assertIn(tf.__version__, warnings[0])

  def test_supported_tf_resolves_without_a_warning(self):
    with self.assertNoLogs('absl', level='WARNING'):
      outputs = self._build('fast')
    self.assertTrue(numpy_function.uses_direct_outputs(outputs[0].op))

  def _build_two_while(self, breakage):
    with self.assertLogs('absl', level='WARNING') as logs:
      with breakage:
        built = [self._build('first'), self._build('second')]
    return built, logs

  def test_eager_func_missing(self):
    eager_func = script_ops.EagerFunc
    del script_ops.EagerFunc
    try:
      with self.assertLogs('absl', level='WARNING') as logs:
        built = [self._build('first'), self._build('second')]
    finally:
      script_ops.EagerFunc = eager_func
    self._assert_one_warning(logs, "has no attribute 'EagerFunc'")
    for outputs in built:
      self._assert_plain_and_correct(outputs)

  def test_registry_raises(self):
    built, logs = self._build_two_while(mock.patch.object(
        script_ops.FuncRegistry, '__call__',
        side_effect=TypeError('registry signature changed')))
    self._assert_one_warning(logs, 'registry signature changed')
    for outputs in built:
      self._assert_plain_and_correct(outputs)

  def test_registry_converts_what_an_eager_func_returns(self):
    def call_and_convert(registry, token, device, args):
      return [np.array(value)
              for value in registry.get(token)(device, token, args)]

    built, logs = self._build_two_while(mock.patch.object(
        script_ops.FuncRegistry, '__call__', call_and_convert))
    self._assert_one_warning(logs, 'the py_func registry called an EagerFunc')
    for outputs in built:
      self._assert_plain_and_correct(outputs)

  def test_convert_answers_wrongly(self):
    built, logs = self._build_two_while(mock.patch.object(
        script_ops.FuncRegistry, '_convert', staticmethod(lambda value: value)))
    self._assert_one_warning(logs, 'FuncRegistry._convert([1, 2]) returned')
    for outputs in built:
      self._assert_plain_and_correct(outputs)

  def test_a_later_swap_fails(self):
    fast = self._build('fast')
    self.assertTrue(numpy_function.uses_direct_outputs(fast[0].op))
    np.testing.assert_array_equal(self.session.run(fast[0]), [2, 4])
    # TF now keeps its callables in another map than the one resolved.
    with mock.patch.object(script_ops._py_funcs, '_funcs',  # pylint: disable=protected-access
                           weakref.WeakValueDictionary()):
      built, logs = self._build_two_while(mock.patch.object(
          numpy_function, '_resolve',
          side_effect=AssertionError('resolved twice')))
      self._assert_one_warning(
          logs, "swapping the callable of op 'first' failed: RuntimeError(\"no "
          'callable registered under token')
      for outputs in built:
        self._assert_plain_and_correct(outputs)

  def test_a_swap_that_raises(self):
    self._build('fast')
    with self.assertLogs('absl', level='WARNING') as logs:
      with mock.patch.object(tf.Operation, 'get_attr',
                             side_effect=ValueError('no attr named token')):
        built = [self._build('first')]
      built.append(self._build('second'))
    self._assert_one_warning(logs, 'no attr named token')
    for outputs in built:
      self._assert_plain_and_correct(outputs)


class EagerTest(absltest.TestCase):

  def test_eagerly_it_is_tf_numpy_function(self):
    self.assertTrue(tf.executing_eagerly())
    out, = numpy_function.numpy_function(
        lambda x: x * 2, [tf.constant([1.0, 2.0])], [tf.float32],
        name='eager')
    np.testing.assert_array_equal(out.numpy(), [2.0, 4.0])


if __name__ == '__main__':
  absltest.main()
