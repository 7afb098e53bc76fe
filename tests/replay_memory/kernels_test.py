"""Tests for replay_memory.kernels.choice: `choose`, the one switch.

Only `EnvironmentDefaultTest` sets $DOPAMINE_PER_KERNELS: it tests that
`choose` reads it when no argument is given. Every other test (here and in
the other files) chooses kernels by argument.
"""

import os
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
import gin
import numpy as np

from dopamine_per.native import build
from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory import sum_tree
from dopamine_per.replay_memory.kernels import choice
from dopamine_per.replay_memory.kernels import native_kernels
from dopamine_per.replay_memory.kernels import numpy_kernels
from tests.support import fixtures



class ChooseTest(absltest.TestCase):

  def test_names_and_choices(self):
    self.assertIs(choice.choose('numpy'), choice.NUMPY)
    self.assertIs(choice.choose('auto'), choice.native())
    self.assertIs(choice.choose(choice.NUMPY), choice.NUMPY)
    self.assertIs(choice.Kernels, numpy_kernels.NumpyKernels)
    self.assertIs(type(choice.NUMPY), numpy_kernels.NumpyKernels)
    self.assertEqual((choice.NUMPY.name, choice.NUMPY.compiled),
                     ('numpy', False))
    self.assertEqual(choice.available(), ['numpy', 'native'])
    self.assertNotIn('numba', choice.__all__)
    self.assertFalse(hasattr(choice, 'numba'))

  def test_native(self):
    native = choice.choose('native')
    self.assertIs(native, choice.native())
    self.assertIs(choice.choose('native'), native)  # Created once.
    self.assertIs(type(native), native_kernels.NativeKernels)
    self.assertIsInstance(native, choice.Kernels)
    self.assertEqual((native.name, native.compiled), ('native', True))
    self.assertIs(choice.choose(native), native)

  def _run(self, script, cache, **env):
    """Runs `script` (argument: `cache`); returns its lines and stderr."""
    result = subprocess.run(
        [sys.executable, '-c', script, cache], cwd=fixtures.REPO_ROOT,
        env=fixtures.subprocess_env(DOPAMINE_PER_NATIVE_CACHE=cache, **env),
        capture_output=True, text=True, timeout=300, check=False)
    self.assertEqual(result.returncode, 0, result.stderr)
    return result.stdout.splitlines(), result.stderr

  def test_native_without_a_compiler(self):
    # A fresh cache and no compiler: importing `choice` builds nothing (nor
    # imports TensorFlow); asking for 'native' says why it cannot be built,
    # and 'auto' runs NumPy's with one warning saying so.
    cache = fixtures.temp_dir(self)
    lines, stderr = self._run(
        'import os, sys\n'
        'from dopamine_per.replay_memory.kernels import choice\n'
        'assert not os.listdir(sys.argv[1]), os.listdir(sys.argv[1])\n'
        'assert "tensorflow" not in sys.modules\n'
        'assert choice.available() == ["numpy"], choice.available()\n'
        'for _ in range(2):\n'
        '  try:\n'
        '    choice.choose("native")\n'
        '  except ValueError as e:\n'
        '    print(e)\n'
        'for _ in range(3):\n'
        '  print(choice.choose("auto").name)\n', cache, CXX='no-such-compiler')
    self.assertEqual(os.listdir(cache), [])  # Nothing was built.
    reason = ("no C++ compiler: 'no-such-compiler' is not on PATH (install "
              "g++, e.g. `apt-get install g++`, or set $CXX)")
    self.assertEqual(lines, [
        "Kernels 'native' cannot be built here: " + reason] * 2 +
                     ['numpy'] * 3)
    self.assertEqual(stderr.count('the native kernels cannot be built'), 1,
                     stderr)
    self.assertIn('the native kernels cannot be built here ({}), so the '
                  'replay memory runs its NumPy loops, several times slower'
                  .format(reason), stderr)

  def test_auto_with_an_unwritable_cache_runs_numpy_s(self):
    # A file where the cache should be (root can write anywhere else).
    blocker = os.path.join(fixtures.temp_dir(self), 'a_file')
    with open(blocker, 'w') as f:
      f.write('not a directory')
    lines, stderr = self._run(
        'from dopamine_per.replay_memory.kernels import choice\n'
        'print(choice.choose("auto").name)\n',
        os.path.join(blocker, 'cache'))
    self.assertEqual(lines, ['numpy'])
    self.assertIn('the native kernels cannot be built here (cannot write the '
                  'cache directory', stderr)
    # The remedy is the cache's, not a compiler (the probe found that).
    self.assertIn('set $DOPAMINE_PER_NATIVE_CACHE to a writable directory',
                  stderr)
    self.assertNotIn('install g++', stderr.lower())

  def test_the_fallback_warning_names_no_other_kernels(self):
    # One %s, the reason; NumPy's loops are all that can stand in.
    self.assertEqual(choice.FALLBACK_WARNING.count('%s'), 1)
    self.assertIn('runs its NumPy loops', choice.FALLBACK_WARNING)
    self.assertNotIn('numba', choice.FALLBACK_WARNING.lower())
    self.assertNotIn('pip install', choice.FALLBACK_WARNING)

  def test_kernels_are_returned_as_they_are(self):
    own = numpy_kernels.NumpyKernels()
    self.assertIsNot(own, choice.NUMPY)
    self.assertIs(choice.choose(own), own)
    native = native_kernels.NativeKernels()
    self.assertIsNot(native, choice.native())
    self.assertIs(choice.choose(native), native)

  def test_unknown_names(self):
    for name in ('fortran', 'Numba', '', 'NUMPY'):
      with self.assertRaisesRegex(
          ValueError, "^Unknown kernels '{}': use 'numpy', 'native' or "
          "'auto'.$".format(name)):
        choice.choose(name)

  def test_numba_was_removed(self):
    # Configs written for earlier versions may still ask for Numba's
    # kernels: the error says they are gone and what to use instead.
    for _ in range(2):
      with self.assertRaisesRegex(
          ValueError, r"^Kernels 'numba': the Numba kernels were removed; "
          r"use 'native' \(or 'numpy', or 'auto'\)\.$"):
        choice.choose('numba')
    with self.assertRaisesRegex(ValueError, 'Numba kernels were removed'):
      sum_tree.SumTree(4, kernels='numba')


class EnvironmentDefaultTest(absltest.TestCase):
  """Without an argument, `choose` reads $DOPAMINE_PER_KERNELS."""

  def _environment(self, value=None):
    """Patches os.environ to hold the variable with `value` (None: unset)."""
    environ = {k: v for k, v in os.environ.items() if k != choice.ENV}
    if value is not None:
      environ[choice.ENV] = value
    return mock.patch.dict(os.environ, environ, clear=True)

  def test_the_variable_chooses_when_no_argument_does(self):
    self.assertEqual(choice.ENV, 'DOPAMINE_PER_KERNELS')
    with self._environment():
      self.assertIs(choice.choose(), choice.native())  # 'auto'.
      self.assertIs(choice.choose(None), choice.native())
    for value, expected in (('numpy', choice.NUMPY),
                            ('native', choice.native()),
                            ('auto', choice.native())):
      with self._environment(value):
        self.assertIs(choice.choose(), expected)
    with self._environment('numpy'):
      # An argument wins over the variable.
      self.assertIs(choice.choose('native'), choice.native())
      self.assertIs(choice.choose(choice.native()), choice.native())
    with self._environment('native'):
      self.assertIs(choice.choose('numpy'), choice.NUMPY)

  def test_errors_name_the_variable(self):
    with self._environment('Numba'):
      with self.assertRaisesRegex(
          ValueError,
          r"Unknown kernels 'Numba' \(from \$DOPAMINE_PER_KERNELS\)"):
        choice.choose()
    with self._environment('numba'):
      with self.assertRaisesRegex(
          ValueError,
          r"^Kernels 'numba' \(from \$DOPAMINE_PER_KERNELS\): the Numba "
          r"kernels were removed; use 'native'"):
        choice.choose()
    error = build.NativeBuildError('no C++ compiler')
    with self._environment('native'), \
        mock.patch.object(choice, '_native', None), \
        mock.patch.object(native_kernels.NativeKernels, '__init__',
                          side_effect=error):
      with self.assertRaisesRegex(
          ValueError,
          r"^Kernels 'native' \(from \$DOPAMINE_PER_KERNELS\) cannot be "
          r"built here: no C\+\+ compiler$"):
        choice.choose()


class OneChoiceForEveryLoopTest(absltest.TestCase):
  """The tree's, the sampling checks' and the gathers' loops follow it."""

  def test_the_memories_and_their_trees(self):
    for name, chosen in (('numpy', choice.NUMPY),
                         ('native', choice.native())):
      self.assertIs(sum_tree.SumTree(4, kernels=chosen)._kernels, chosen)

      plain = circular_replay_buffer.OutOfGraphReplayBuffer(
          (3, 3), 4, 20, 2, kernels=name)
      self.assertIs(plain._kernels, chosen)
      memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
          (3, 3), 4, 20, 2, kernels=name)
      self.assertIs(memory._kernels, chosen)
      self.assertIs(memory.sum_tree._kernels, chosen)
    with self.assertRaisesRegex(ValueError, "Unknown kernels 'fortran'"):
      circular_replay_buffer.OutOfGraphReplayBuffer((3,), 1, 20, 2,
                                                    kernels='fortran')

  def test_the_memory_runs_its_loops_on_its_kernels(self):
    memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
        (3, 3), 4, 20, 2, kernels='numpy')
    for t in range(12):
      memory.add(np.full((3, 3), t, np.uint8), 0, 1.0, 0, 1.0)
    numpy = choice.NUMPY
    with mock.patch.object(numpy, 'transition_batch',
                           wraps=numpy.transition_batch) as gather, \
        mock.patch.object(numpy, 'valid_mask',
                          wraps=numpy.valid_mask) as valid_mask, \
        mock.patch.object(numpy, 'descend_draws',
                          wraps=numpy.descend_draws) as descend:
      memory.sample_transition_batch(2)
    gather.assert_called_once()
    valid_mask.assert_called()
    descend.assert_called()

  def test_gin_configures_the_memories(self):
    self.addCleanup(gin.clear_config)
    gin.bind_parameter(
        'dopamine_per.replay_memory.prioritized_replay_buffer.'
        'OutOfGraphPrioritizedReplayBuffer.kernels', 'numpy')
    memory = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
        (3,), 1, 20, 2)
    self.assertIs(memory._kernels, choice.NUMPY)
    self.assertIs(memory.sum_tree._kernels, choice.NUMPY)


if __name__ == '__main__':
  absltest.main()
