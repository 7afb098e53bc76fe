"""dopamine_per.jax.replay_memory samples what Dopamine JAX's memory samples.

Each case drives Dopamine JAX 4.1.2's memory (installed as dopamine-rl) and
ours with the same steps, seeds and calls, and compares every batch field,
dtype, key and probability bit for bit: uniform and prioritized draws with
priority updates, n-step returns, terminations and truncations, across
evictions, frames raw and compressed, and episodes short enough that the
frame ring must grow.
"""

import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
from dopamine.jax.replay_memory import accumulator as their_accumulator
from dopamine.jax.replay_memory import elements as their_elements
from dopamine.jax.replay_memory import replay_buffer as their_buffer
from dopamine.jax.replay_memory import samplers as their_samplers
from dopamine.jax.replay_memory import sum_tree as their_sum_tree
import numpy as np

from dopamine_per import errors
from dopamine_per.jax.replay_memory import accumulator
from dopamine_per.jax.replay_memory import elements
from dopamine_per.jax.replay_memory import replay_buffer
from dopamine_per.jax.replay_memory import samplers
from dopamine_per.jax.replay_memory import sum_tree

_FIELDS = ('state', 'action', 'reward', 'next_state', 'is_terminal',
           'episode_end')
_OURS = (replay_buffer, samplers, accumulator, elements)
_THEIRS = (their_buffer, their_samplers, their_accumulator, their_elements)


def _memory(modules, capacity, stack, horizon, prioritized, compress):
  buffers, sampler_module, accumulators, _ = modules
  steps = accumulators.TransitionAccumulator(
      stack_size=stack, update_horizon=horizon, gamma=0.9)
  if prioritized:
    sampler = sampler_module.PrioritizedSamplingDistribution(
        seed=7, max_capacity=capacity)
  else:
    sampler = sampler_module.UniformSamplingDistribution(seed=7)
  return buffers.ReplayBuffer(steps, sampler, batch_size=6,
                              max_capacity=capacity, compress=compress)


def _assert_batches_equal(test, theirs, ours):
  for name in _FIELDS:
    mine, reference = getattr(ours, name), getattr(theirs, name)
    np.testing.assert_array_equal(mine, reference, err_msg=name)
    test.assertEqual(np.asarray(mine).dtype, np.asarray(reference).dtype,
                     name)
    test.assertEqual(np.shape(mine), np.shape(reference), name)


class SameBatchesTest(parameterized.TestCase):

  @parameterized.product(
      prioritized=(False, True), compress=(False, True),
      shape=((50, 4, 3, 0.05), (37, 1, 1, 0.05), (20, 2, 5, 0.05),
             (30, 4, 3, 0.45)))
  def test_seeded_batches_equal_dopamines(self, prioritized, compress,
                                          shape):
    # (capacity, stack, horizon, episode end probability): the last makes
    # episodes of about two steps, so elements span more steps than the
    # ring first holds.
    capacity, stack, horizon, ends = shape
    theirs = _memory(_THEIRS, capacity, stack, horizon, prioritized, compress)
    ours = _memory(_OURS, capacity, stack, horizon, prioritized, compress)
    rng = np.random.default_rng(capacity + stack)
    for t in range(400):
      observation = rng.integers(0, 255, (3, 2)).astype(np.uint8)
      terminal = bool(rng.random() < ends)
      episode_end = terminal or bool(rng.random() < ends / 2)
      step = (observation, int(rng.integers(4)), float(rng.normal()),
              terminal, episode_end)
      kwargs = {}
      if prioritized:
        tree = theirs._sampling_distribution._sum_tree  # As agents read it.
        kwargs['priority'] = (float(rng.random()) if rng.random() < 0.5 else
                              tree.max_recorded_priority)
        self.assertEqual(
            ours._sampling_distribution._sum_tree.max_recorded_priority,
            tree.max_recorded_priority)
      theirs.add(their_elements.TransitionElement(*step), **kwargs)
      ours.add(elements.TransitionElement(*step), **kwargs)
      self.assertEqual(ours.add_count, theirs.add_count)
      if theirs.add_count and t % 3 == 0:
        reference, their_metadata = theirs.sample(with_sample_metadata=True)
        batch, metadata = ours.sample(with_sample_metadata=True)
        np.testing.assert_array_equal(metadata.keys, their_metadata.keys)
        self.assertEqual(metadata.keys.dtype, their_metadata.keys.dtype)
        _assert_batches_equal(self, reference, batch)
        if prioritized:
          np.testing.assert_array_equal(metadata.probabilities,
                                        their_metadata.probabilities)
          # Positive: zeros make Dopamine's delta-updated root drift below
          # 0 (and ours with it, bit for bit), which its draw refuses.
          priorities = rng.random(len(metadata.keys)) + 0.01
          theirs.update(their_metadata.keys, priorities=priorities)
          ours.update(metadata.keys, priorities=priorities)
    self.assertGreater(theirs.add_count, capacity)  # Evictions happened.
    self.assertEqual(list(ours._memory.keys()), list(theirs._memory.keys()))

  def test_stored_elements_read_as_dopamines(self):
    theirs = _memory(_THEIRS, 12, 4, 3, False, False)
    ours = _memory(_OURS, 12, 4, 3, False, True)
    for t in range(20):
      step = (np.full((2, 2), t, np.uint8), t, 1.0, t % 9 == 8, False)
      theirs.add(their_elements.TransitionElement(*step))
      ours.add(elements.TransitionElement(*step))
    self.assertLen(ours._memory, 12)
    for key in theirs._memory:
      _assert_batches_equal(self, theirs._memory[key], ours._memory[key])
    with self.assertRaises(KeyError):
      ours._memory[0]  # pylint: disable=pointless-statement


class AccumulatorTest(absltest.TestCase):

  def test_elements_equal_dopamines(self):
    rng = np.random.default_rng(5)
    theirs = their_accumulator.TransitionAccumulator(4, 3, 0.5)
    ours = accumulator.TransitionAccumulator(4, 3, 0.5)
    produced = 0
    for t in range(300):
      terminal = bool(rng.random() < 0.1)
      step = (rng.random((2,)), t, float(rng.normal()), terminal,
              terminal or bool(rng.random() < 0.05))
      reference = list(theirs.accumulate(
          their_elements.TransitionElement(*step)))
      mine = list(ours.accumulate(elements.TransitionElement(*step)))
      self.assertLen(mine, len(reference))
      for theirs_element, element in zip(reference, mine):
        _assert_batches_equal(self, theirs_element, element)
      produced += len(mine)
    self.assertGreater(produced, 200)

  def test_bad_sizes_are_refused_as_dopamine_asserts(self):
    for stack, horizon in ((0, 1), (1, 0)):
      with self.assertRaises(AssertionError):
        accumulator.TransitionAccumulator(stack, horizon, 0.9)


class SumTreeTest(absltest.TestCase):

  def test_sums_and_descents_equal_dopamines(self):
    rng = np.random.default_rng(3)
    theirs, ours = their_sum_tree.SumTree(300), sum_tree.SumTree(300)
    for _ in range(50):
      leaves = rng.integers(0, 300, 7)
      values = rng.random(7) * 10
      theirs.set(leaves, values)
      ours.set(leaves, values)
      np.testing.assert_array_equal(ours._nodes, theirs._nodes)
      targets = rng.uniform(0, theirs.root, 20)
      np.testing.assert_array_equal(ours.query(targets),
                                    theirs.query(targets))
    self.assertEqual(ours.max_recorded_priority, theirs.max_recorded_priority)

  def test_bad_values_are_refused_and_nothing_written(self):
    tree = sum_tree.SumTree(10)
    tree.set(np.arange(3), np.ones(3))
    before = tree._nodes.copy()
    for value in (-1.0, np.nan, np.inf):
      with self.assertRaisesRegex(errors.ArgumentError, 'Values must be'):
        tree.set(np.arange(3), np.array([1.0, value, 1.0]))
    with self.assertRaisesRegex(IndexError, 'outside'):
      tree.set(16, 1.0)
    np.testing.assert_array_equal(tree._nodes, before)


class PowerOfTwoCapacityTest(absltest.TestCase):

  def test_first_eviction_does_not_crash(self):
    # Dopamine JAX fails here with IndexError in SumTree.set: the key added
    # before the oldest is removed has no leaf in a tree of 8.
    memory = _memory(_OURS, 8, 1, 1, True, False)
    for t in range(40):
      memory.add(elements.TransitionElement(np.full((2,), t, np.float32), t,
                                            float(t), False),
                 priority=float(t + 1))
    self.assertEqual(memory.add_count, 39)
    batch, metadata = memory.sample(200, with_sample_metadata=True)
    self.assertTrue(((metadata.keys >= 31) & (metadata.keys < 39)).all())
    np.testing.assert_array_equal(batch.action, metadata.keys)
    # Each held key's priority is at its leaf: key k came with step k + 1,
    # whose priority was k + 2.
    tree = memory._sampling_distribution._sum_tree
    np.testing.assert_allclose(tree.root, sum(range(33, 41)))
    np.testing.assert_allclose(metadata.probabilities * tree.root,
                               metadata.keys + 2.0)


class CheckedAddTest(absltest.TestCase):

  def test_mismatched_values_are_refused(self):
    memory = _memory(_OURS, 10, 2, 1, False, False)
    memory.add(elements.TransitionElement(np.zeros(3, np.uint8), 1, 0.0,
                                          False))
    with self.assertRaisesRegex(ValueError, "'observation' has shape"):
      memory.add(elements.TransitionElement(np.zeros(4, np.uint8), 1, 0.0,
                                            False))
    with self.assertRaisesRegex(ValueError, "'observation'"):
      memory.add(elements.TransitionElement(np.full(3, 0.5), 1, 0.0, False))
    memory.add(elements.TransitionElement(np.zeros(3, np.uint8), 1, 0.0,
                                          False))
    with self.assertRaisesRegex(ValueError, "'action'"):
      memory.add(elements.TransitionElement(np.zeros(3, np.uint8), 1.5, 0.0,
                                            False))

  def test_sample_errors_are_dopamines(self):
    memory = _memory(_OURS, 10, 1, 1, False, False)
    with self.assertRaisesRegex(ValueError, 'No samples in replay buffer!'):
      memory.sample()
    memory.add(elements.TransitionElement(np.zeros(3), 1, 0.0, False))
    memory.add(elements.TransitionElement(np.zeros(3), 1, 0.0, False))
    with self.assertRaisesRegex(ValueError, 'Invalid size: 0'):
      memory.sample(0)


def _run_python(script):
  return subprocess.run([sys.executable, '-c', script], capture_output=True,
                        text=True, timeout=300, check=False)


class RedirectTest(absltest.TestCase):

  def test_dopamine_names_give_our_modules(self):
    # In a fresh interpreter: after install, Dopamine's module names are
    # ours (what its agents' `_build_replay_buffer` imports), and its gin
    # bindings configure ours.
    script = '\n'.join([
        'from dopamine_per.jax import redirect',
        'redirect.install()',
        'import gin',
        'from dopamine.jax.replay_memory import accumulator, replay_buffer',
        'from dopamine.jax.replay_memory import samplers',
        'import dopamine.jax.replay_memory.sum_tree as tree',
        'import dopamine.jax.replay_memory.elements as elements',
        "gin.parse_config(['ReplayBuffer.max_capacity = 100',",
        "                  'ReplayBuffer.batch_size = 4',",
        "                  'PrioritizedSamplingDistribution.max_capacity = "
        "100'])",
        'memory = replay_buffer.ReplayBuffer(',
        '    transition_accumulator=accumulator.TransitionAccumulator(',
        '        stack_size=1, update_horizon=1, gamma=0.9),',
        '    sampling_distribution=samplers.PrioritizedSamplingDistribution(',
        '        seed=0))',
        'for module in (accumulator, replay_buffer, samplers, tree,',
        '               elements, type(memory)):',
        '  print(module.__module__ if isinstance(module, type) else',
        '        module.__name__)',
        'print(memory._max_capacity, memory._batch_size)',
    ])
    run = _run_python(script)
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    prefix = 'dopamine_per.jax.replay_memory.'
    self.assertEqual(run.stdout.split(), [
        prefix + 'accumulator', prefix + 'replay_buffer', prefix + 'samplers',
        prefix + 'sum_tree', prefix + 'elements', prefix + 'replay_buffer',
        '100', '4'])

  def test_refused_once_dopamines_modules_are_loaded(self):
    script = '\n'.join([
        'import dopamine.jax.replay_memory.samplers',
        'from dopamine_per.jax import redirect',
        'try:',
        '  redirect.install()',
        'except RuntimeError as e:',
        '  print(e)',
    ])
    run = _run_python(script)
    self.assertIn('must run before', run.stdout, run.stderr[-3000:])


if __name__ == '__main__':
  absltest.main()
