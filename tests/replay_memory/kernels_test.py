"""Tests for dopamine_per.replay_memory.kernels: the NumPy/Numba switch."""

import os
from unittest import mock

from absl.testing import absltest
import numpy as np

from dopamine_per.replay_memory import frame_stacks
from dopamine_per.replay_memory import kernels
from dopamine_per.replay_memory import sum_tree
from dopamine_per.replay_memory import sum_tree_kernels
from dopamine_per.replay_memory import transition_kernels


def _environment(**variables):
  """Patches os.environ to hold exactly these kernel variables."""
  environ = {k: v for k, v in os.environ.items()
             if k not in (kernels.ENV, kernels.LEGACY_ENV)}
  environ.update(variables)
  return mock.patch.dict(os.environ, environ, clear=True)


class ChooseTest(absltest.TestCase):

  def test_names_and_choices(self):
    self.assertIs(kernels.choose('numpy'), kernels.NUMPY)
    self.assertIs(kernels.choose('numba'), kernels.NUMBA)
    self.assertIs(kernels.choose('auto'), kernels.NUMBA)
    self.assertIs(kernels.choose(kernels.NUMPY), kernels.NUMPY)
    self.assertIs(kernels.choose(kernels.NUMBA), kernels.NUMBA)
    self.assertFalse(kernels.NUMPY.compiled)
    self.assertTrue(kernels.NUMBA.compiled)
    self.assertEqual(kernels.available(), ['numpy', 'numba'])

  def test_environment_variables(self):
    with _environment():
      self.assertIs(kernels.choose(), kernels.NUMBA)  # 'auto'.
    with _environment(**{kernels.LEGACY_ENV: 'numpy'}):
      self.assertIs(kernels.choose(), kernels.NUMPY)
    with _environment(**{kernels.ENV: 'numpy'}):
      self.assertIs(kernels.choose(), kernels.NUMPY)
    # The new name wins over the old one.
    with _environment(**{kernels.ENV: 'numba', kernels.LEGACY_ENV: 'numpy'}):
      self.assertIs(kernels.choose(), kernels.NUMBA)
    with _environment(**{kernels.ENV: 'numpy', kernels.LEGACY_ENV: 'numba'}):
      self.assertIs(kernels.choose(), kernels.NUMPY)
      # An argument wins over both.
      self.assertIs(kernels.choose('numba'), kernels.NUMBA)

  def test_unknown_names(self):
    with self.assertRaisesRegex(ValueError, "Unknown kernels 'fortran':"):
      kernels.choose('fortran')
    with _environment(**{kernels.ENV: 'Numba'}):
      with self.assertRaisesRegex(
          ValueError, r"Unknown kernels 'Numba' \(from \$DOPAMINE_PER_KERNELS"):
        kernels.choose()

  def test_missing_numba(self):
    with mock.patch.object(kernels, 'numba_loops', None):
      self.assertEqual(kernels.available(), ['numpy'])
      self.assertIs(kernels.choose('auto'), kernels.NUMPY)
      for choice in ('numba', kernels.NUMBA):
        with self.assertRaisesRegex(ValueError, r'dopamine_per\[fast\]'):
          kernels.choose(choice)


class OneChoiceForEveryLoopTest(absltest.TestCase):
  """The tree's, the sampling checks' and the gathers' loops follow it."""

  def test_the_tree(self):
    self.assertIs(sum_tree.SumTree(4, kernels=kernels.NUMPY)._kernels,
                  sum_tree_kernels.NumpyKernels)
    self.assertIs(sum_tree.SumTree(4, kernels=kernels.NUMBA)._kernels,
                  sum_tree_kernels.NumbaKernels)
    with _environment(**{kernels.ENV: 'numpy'}):
      self.assertIs(sum_tree.SumTree(4)._kernels, sum_tree_kernels.NumpyKernels)

  def test_the_memory_loops(self):
    terminal = np.zeros(8, np.uint8)
    self.assertIs(transition_kernels.valid_mask_function(terminal,
                                                         kernels.NUMPY),
                  transition_kernels.valid_mask_numpy)
    self.assertIs(transition_kernels.valid_mask_function(terminal,
                                                         kernels.NUMBA),
                  kernels.numba_loops.valid_mask_loop)
    frames = np.zeros((8, 3, 3), np.uint8)
    self.assertFalse(frame_stacks.compiled_4x8(frames, 4, kernels.NUMPY))
    self.assertTrue(frame_stacks.compiled_4x8(frames, 4, kernels.NUMBA))
    rewards = np.zeros(8, np.float32)
    discounts = np.ones(3, np.float32)
    for choice in (kernels.NUMPY, kernels.NUMBA):
      transitions = transition_kernels.TransitionsAndStates(
          frames, 4, terminal, rewards, discounts, kernels=choice)
      self.assertEqual(transitions.compiled, choice.compiled)


if __name__ == '__main__':
  absltest.main()
