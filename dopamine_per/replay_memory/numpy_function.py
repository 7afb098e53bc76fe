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
(see `_keep_thread_state`), which saves another ~25 us a call.

The swap uses TF internals (`script_ops.EagerFunc`, `script_ops._py_funcs`
and its `_funcs` map, `FuncRegistry._convert`, the op's `token` attribute,
the graph's `_py_funcs_used_in_graph`). The first graph-mode call looks them
up and probes them (`_resolve`: the registry must hand an `EagerFunc` its
call as `(device, token, args)` and return what it returns); if anything is
missing, raises or answers unexpectedly, then or at any later swap, the op
is left exactly as `tf.numpy_function` made it, every later op too, and one
absl warning per process says why. Eagerly, the op is always
`tf.numpy_function`'s.
"""

import ctypes
import threading
from typing import Any, Callable, List, MutableMapping, Optional, Sequence
from typing import Union

from absl import logging
import numpy as np
import tensorflow as tf

__all__ = ['numpy_function', 'uses_direct_outputs']

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


class _FastPath:
  """The TF internals the swap uses, found and probed once per process.

  Attributes:
    direct_class: the `EagerFunc` subclass registered in place of
      `tf.numpy_function`'s callable.
    funcs: the registry's token -> callable map (weak values).
  """

  def __init__(self, direct_class: type,
               funcs: MutableMapping[str, Any]):
    self.direct_class = direct_class
    self.funcs = funcs


def _resolve() -> _FastPath:
  """Looks up TF's py_func internals and checks they behave as expected.

  Returns:
    The `_FastPath`.

  Raises:
    Exception: whatever a missing or changed internal raises, or
      RuntimeError when the probe gets an unexpected answer.
  """
  from tensorflow.python.ops import script_ops  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
  eager_func = script_ops.EagerFunc
  convert = script_ops.FuncRegistry._convert  # pylint: disable=protected-access
  registry = script_ops._py_funcs  # pylint: disable=protected-access
  funcs = registry._funcs  # pylint: disable=protected-access

  class _DirectOutputs(eager_func):  # pytype: disable=base-class-error
    """Calls `func` and returns its arrays to the PyFunc kernel unconverted.

    The registry calls an `EagerFunc` as `(device, token, args)` and returns
    its result as is; the PyFunc kernel takes a list of ndarrays. The
    `EagerFunc` base is only the registry's marker: its constructor is not
    called, so its signature does not matter.
    """

    def __init__(self, func: Callable[..., Any]):  # pylint: disable=super-init-not-called
      self._numpy_func = func

    def __call__(self, device, token, args) -> List[np.ndarray]:
      del device, token
      if not getattr(_THREAD, 'state_kept', False):
        _keep_thread_state()
      result = self._numpy_func(*args)
      if result is None:
        return []
      if not isinstance(result, (tuple, list)):
        result = [result]
      return [value if type(value) is np.ndarray and  # pylint: disable=unidiomatic-typecheck
              value.flags.c_contiguous and value.dtype.kind not in 'OSU'
              else convert(value) for value in result]

  _probe(registry, funcs, eager_func, convert)
  return _FastPath(_DirectOutputs, funcs)


def _probe(registry: Any, funcs: MutableMapping[str, Any], eager_func: type,
           convert: Callable[[Any], np.ndarray]) -> None:
  """Checks the registry's dispatch and `convert` as the swap relies on them.

  Args:
    registry: `script_ops._py_funcs`, called by the PyFunc kernel as
      `registry(token, device, args)`.
    funcs: its token -> callable map.
    eager_func: `script_ops.EagerFunc`.
    convert: `FuncRegistry._convert`.

  Raises:
    RuntimeError: an answer other than the one expected.
  """
  expected = [np.arange(3, dtype=np.int32)]
  calls = []

  class _Probe(eager_func):  # pytype: disable=base-class-error

    def __init__(self):  # pylint: disable=super-init-not-called
      pass

    def __call__(self, device, token, args):
      calls.append((device, token, list(args)))
      return expected

  token = 'dopamine_per_numpy_function_probe'
  probe = _Probe()
  funcs[token] = probe
  try:
    result = registry(token, b'/device:CPU:0', [expected[0]])
  finally:
    funcs.pop(token, None)
  called_as_expected = (len(calls) == 1 and calls[0][1] == token and
                        len(calls[0][2]) == 1 and calls[0][2][0] is expected[0])
  if result is not expected or not called_as_expected:
    raise RuntimeError(f'the py_func registry called an EagerFunc {calls!r}'
                       f' and returned {type(result).__name__}')
  converted = convert([1, 2])
  if type(converted) is not np.ndarray or converted.tolist() != [1, 2]:  # pylint: disable=unidiomatic-typecheck
    raise RuntimeError(f'FuncRegistry._convert([1, 2]) returned {converted!r}')


_UNRESOLVED = object()
# `_FastPath` once resolved; None once the fast path is off for the process.
_fast_path: Any = _UNRESOLVED
# Graphs may be built on several threads: resolve and fall back once.
_STATE_LOCK = threading.RLock()


def _get_fast_path() -> Optional[_FastPath]:
  """The `_FastPath`, resolved on first use; None if it is off."""
  global _fast_path
  if _fast_path is _UNRESOLVED:
    with _STATE_LOCK:
      if _fast_path is _UNRESOLVED:
        try:
          _fast_path = _resolve()
        except Exception as error:  # pylint: disable=broad-except
          _fall_back(f'looking up or probing them failed: {error!r}')
  return _fast_path


def _fall_back(reason: str) -> None:
  """Turns the fast path off for the process and says why, once."""
  global _fast_path
  with _STATE_LOCK:
    if _fast_path is None:
      return
    _fast_path = None
  logging.warning(
      'dopamine_per numpy_function: TensorFlow %s\'s py_func internals are '
      'not as expected (%s); replay ops use plain tf.numpy_function from now '
      'on (same results, each output converted by TensorFlow).',
      tf.__version__, reason)


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
  fast_path = _get_fast_path()
  if fast_path is not None:
    try:
      _register_direct(fast_path, result, func)
    except Exception as error:  # pylint: disable=broad-except
      _fall_back(f'swapping the callable of op {name!r} failed: {error!r}')
  return result


def _register_direct(fast_path: _FastPath,
                     result: Union[List[tf.Tensor], tf.Operation],
                     func: Callable[..., Any]) -> None:
  """Replaces the registry's callable for the op with a `_DirectOutputs`.

  Changes nothing unless every look-up succeeds.

  Args:
    fast_path: the resolved internals.
    result: what `tf.numpy_function` returned in graph mode.
    func: the function the op calls.

  Raises:
    Exception: whatever a changed internal raises, or RuntimeError when
      the op's registered callable is not where `tf.numpy_function` keeps it.
  """
  op = result if isinstance(result, tf.Operation) else result[0].op
  graph = op.graph
  # Ops in a function body (a tf.cond branch) keep their py_funcs in the
  # outermost graph, as tf.numpy_function does.
  while getattr(graph, 'outer_graph', None) is not None:
    graph = graph.outer_graph
  token = op.get_attr('token').decode('ascii')
  registered = fast_path.funcs.get(token)
  kept = graph._py_funcs_used_in_graph  # pylint: disable=protected-access
  # tf.numpy_function appended it just now: search from the end.
  if registered is None or not any(
      entry is registered for entry in reversed(kept)):
    raise RuntimeError(f'no callable registered under token {token!r} is '
                       'kept by the graph')
  direct = fast_path.direct_class(func)
  # The registry holds functions weakly; the graph keeps them alive.
  kept.append(direct)
  fast_path.funcs[token] = direct


def uses_direct_outputs(op: tf.Operation) -> bool:
  """Whether `op`'s outputs bypass TF's conversion (see the module doc)."""
  fast_path = _fast_path
  if fast_path is None or fast_path is _UNRESOLVED:
    return False
  token = op.get_attr('token').decode('ascii')
  return isinstance(fast_path.funcs.get(token), fast_path.direct_class)
