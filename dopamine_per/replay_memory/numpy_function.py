# coding=utf-8
"""`tf.numpy_function` for the replay ops, without TF's per-output toll.

TensorFlow passes every array a `tf.numpy_function` returns through
`FuncRegistry._convert`, which calls `numpy_compat.np_asarray`, which parses
NumPy's version string on every call: ~6.5 us per output here, with the GIL
held. A sampled batch has nine or more outputs, so that is ~60 us of every
sampling run, and with staging it sits on the training step's critical path
(the step waits for the py_func handing over the staged batch).

`numpy_function` builds the same op as `tf.numpy_function(..., stateful=True)`
and then registers, under the op's token, a callable that hands C-contiguous
NumPy arrays to TensorFlow as they are (anything else still goes through
TF's conversion). TensorFlow's kernel converts and checks the outputs as
before: a wrong dtype or count is still an InvalidArgumentError. That
callable also keeps the Python thread state of the TF thread it runs on
(see `_keep_thread_state`), which saves another ~25 us a call. The swap uses
TF internals (`script_ops._py_funcs`, `EagerFunc`); where they are not as
expected, and when executing eagerly, the op is exactly what
`tf.numpy_function` makes.
"""

import ctypes
import threading
from typing import Any, Callable, List, Sequence, Union

import numpy as np
import tensorflow as tf

__all__ = ['numpy_function', 'uses_direct_outputs']

try:
  from tensorflow.python.ops import script_ops  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
  _EagerFunc = script_ops.EagerFunc
  _convert = script_ops.FuncRegistry._convert  # pylint: disable=protected-access
  _REGISTRY = script_ops._py_funcs  # pylint: disable=protected-access
  _FUNCS = _REGISTRY._funcs  # pylint: disable=protected-access
except (ImportError, AttributeError):  # A TF whose internals differ.
  _EagerFunc = _REGISTRY = None


if _EagerFunc is not None:

  class _DirectOutputs(_EagerFunc):  # pytype: disable=base-class-error
    """Calls `func` and returns its arrays to the PyFunc kernel unconverted.

    The registry calls an `EagerFunc` as `(device, token, args)` and returns
    its result as is; the PyFunc kernel takes a list of ndarrays.
    """

    def __init__(self, func: Callable[..., Any], out_types: Sequence[Any]):
      super().__init__(func, list(out_types), False)

    def __call__(self, device, token, args) -> List[np.ndarray]:
      del device, token
      if not getattr(_THREAD, 'state_kept', False):
        _keep_thread_state()
      result = self._func(*args)
      if result is None:
        return []
      if not isinstance(result, (tuple, list)):
        result = [result]
      return [value if type(value) is np.ndarray and  # pylint: disable=unidiomatic-typecheck
              value.flags.c_contiguous and value.dtype.kind not in 'OSU'
              else _convert(value) for value in result]


_THREAD = threading.local()


def _keep_thread_state() -> None:
  """Keeps the calling (TensorFlow) thread's Python thread state alive.

  The PyFunc kernel runs on TensorFlow's threads, which Python does not
  know: each call takes the GIL with `PyGILState_Ensure`, which creates a
  Python thread state, and releases it with `PyGILState_Release`, which
  destroys it again (with its frame stack's memory): ~25 us of every call
  here. One unmatched `PyGILState_Ensure` keeps the state, so later calls
  on this thread reuse it. TensorFlow's inter-op threads live as long as
  the process, so this keeps one state per thread, not per call.
  """
  ctypes.pythonapi.PyGILState_Ensure()
  _THREAD.state_kept = True


def numpy_function(func: Callable[..., Any], inp: Sequence[Any],
                   out_types: Sequence[Any], name: str
                   ) -> Union[List[tf.Tensor], tf.Operation]:
  """Like `tf.numpy_function(func, inp, out_types, stateful=True, name)`.

  Args:
    func: callable taking NumPy arrays and returning a list or tuple of
      arrays, one per `out_types` entry (None or [] for no outputs).
    inp: list of tensors, the arguments.
    out_types: list of dtypes of the outputs.
    name: str, the op's name.

  Returns:
    list of tf.Tensor (one per out_types entry), or, when out_types is
    empty, the tf.Operation (None when executing eagerly).
  """
  out_types = list(out_types)
  result = tf.numpy_function(func, list(inp), out_types, stateful=True,
                             name=name)
  if tf.executing_eagerly():  # func has run already.
    return [result] if len(out_types) == 1 else result
  op = result if isinstance(result, tf.Operation) else result[0].op
  _register_direct(op, func, out_types)
  return result


def _register_direct(op: tf.Operation, func: Callable[..., Any],
                     out_types: List[Any]) -> None:
  """Replaces the registry's callable for `op` with a `_DirectOutputs`."""
  if _EagerFunc is None:
    return
  graph = op.graph
  # Ops in a function body (a tf.cond branch) keep their py_funcs in the
  # outermost graph, as tf.numpy_function does.
  while getattr(graph, 'outer_graph', None) is not None:
    graph = graph.outer_graph
  try:
    token = op.get_attr('token').decode('ascii')
    registered = _FUNCS.get(token)
    kept = graph._py_funcs_used_in_graph  # pylint: disable=protected-access
  except (AttributeError, ValueError, TypeError):
    return
  if registered is None or not any(entry is registered for entry in kept):
    return
  direct = _DirectOutputs(func, out_types)
  # The registry holds functions weakly; the graph keeps them alive.
  kept.append(direct)
  _FUNCS[token] = direct


def uses_direct_outputs(op: tf.Operation) -> bool:
  """Whether `op`'s outputs bypass TF's conversion (see the module doc)."""
  if _EagerFunc is None:
    return False
  token = op.get_attr('token').decode('ascii')
  return isinstance(_FUNCS.get(token), _DirectOutputs)
