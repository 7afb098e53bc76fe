"""Stress test: sampling, priority updates and adds on several threads.

As TensorFlow's threads run the ops while the agent adds; every invariant
must hold after (docs/reliability.md), and a background save taken meanwhile
holds the memory as it was when called.
"""

import contextlib
import threading

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.replay_memory import prioritized_replay_buffer
from tests.support import fixtures
from tests.support import replay_cases

_CAPACITY = 500
_ADDS = 3000


def _memory(kernels, compress=False):
  return prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
      observation_shape=(8, 8), stack_size=4, replay_capacity=_CAPACITY,
      batch_size=32, update_horizon=3, max_sample_attempts=100000,
      kernels=kernels, compress_observations=compress)


@contextlib.contextmanager
def _running(test, steps):
  """Runs each of `steps` in a loop on a thread of its own while the
  `with` body runs; then stops and joins them, and asserts none raised."""
  stop, errors = threading.Event(), []

  def guarded(step):
    def run():
      try:
        while not stop.is_set():
          step()
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)
        stop.set()
    return run

  threads = [threading.Thread(target=guarded(step)) for step in steps]
  for thread in threads:
    thread.start()
  try:
    yield
  finally:
    stop.set()
    for thread in threads:
      thread.join()
  test.assertEqual(errors, [])


class ConcurrencyTest(parameterized.TestCase):

  @parameterized.parameters('numpy', 'native')
  def test_invariants_hold_under_concurrent_use(self, kernels):
    memory = _memory(kernels)
    self.assertEqual(memory.sum_tree._kernels.name, kernels)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (100, 8, 8), dtype=np.uint8)
    for i in range(200):
      memory.add(frames[i % 100], i % 4, 1.0, int(i % 50 == 49), 1.0)

    def sample():
      batch = memory.sample_transition_batch()
      indices, priorities = batch[7], batch[-1]
      # The batch's own view: valid slots, positive priorities.
      assert np.all(priorities > 0), priorities
      assert np.all((indices >= 0) & (indices < _CAPACITY)), indices

    def update():
      indices = np.random.randint(0, _CAPACITY, 64)
      memory.set_priority(indices, np.random.random(64) * 3)
      memory.get_priority(indices)

    with _running(self, [sample, sample, update]):
      for i in range(200, 200 + _ADDS):
        memory.add(frames[i % 100], i % 4, 1.0, int(i % 50 == 49), None)
    memory.sum_tree.check_invariants()
    # Each add wrote 1 transition, plus 3 zero-padding ones per episode.
    episodes = sum(1 for i in range(200 + _ADDS) if i % 50 == 0)
    self.assertEqual(int(memory.add_count), 200 + _ADDS + 3 * episodes)
    # Every transition kept is one that was added, in order.
    newest = (200 + _ADDS - 1) % 100
    last = (int(memory.add_count) - 1) % _CAPACITY
    np.testing.assert_array_equal(memory._store['observation'][last],
                                  frames[newest])

  @parameterized.parameters(False, True)
  def test_background_saves_amid_concurrent_use_hold_their_moment(
      self, compress):
    memory = _memory('native', compress)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (100, 8, 8), dtype=np.uint8)
    for i in range(200):
      memory.add(frames[i % 100], i % 4, 1.0, int(i % 50 == 49), 1.0)

    def update():
      indices = np.random.randint(0, _CAPACITY, 64)
      memory.set_priority(indices, np.random.random(64) * 3)

    count = iter(range(200, 10 ** 9))

    def add():
      i = next(count)
      memory.add(frames[i % 100], i % 4, 1.0, int(i % 50 == 49), None)

    directory = fixtures.temp_dir(self)
    expected = []
    with _running(self, [memory.sample_transition_batch,
                         memory.sample_transition_batch, update, add]):
      for iteration in range(4):
        # The moment a save is called: under both locks, nothing moves.
        with memory._lock, memory._priority_lock:  # pylint: disable=protected-access
          expected.append(replay_cases.snapshot(memory))
          future = memory.save(directory, iteration, background=True)
        future.result(timeout=fixtures.DEADLINE_S)
    memory.sum_tree.check_invariants()
    for iteration in range(4):
      restored = _memory('native', compress)
      restored.load(directory, iteration)
      restored.sum_tree.check_invariants()
      replay_cases.assert_same_snapshot(self, expected[iteration],
                                        replay_cases.snapshot(restored))
    self.assertGreater(int(memory.add_count), expected[-1]['add_count'])


if __name__ == '__main__':
  absltest.main()
