"""Stress test: sampling, priority updates and adds on several threads.

As TensorFlow's threads run the ops while the agent adds; every invariant
must hold after (docs/reliability.md).
"""

import threading

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.replay_memory import prioritized_replay_buffer

_CAPACITY = 500
_ADDS = 3000


def _memory(kernels):
  return prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer(
      observation_shape=(8, 8), stack_size=4, replay_capacity=_CAPACITY,
      batch_size=32, update_horizon=3, max_sample_attempts=100000,
      kernels=kernels)


class ConcurrencyTest(parameterized.TestCase):

  @parameterized.parameters('numpy', 'native')
  def test_invariants_hold_under_concurrent_use(self, kernels):
    memory = _memory(kernels)
    self.assertEqual(memory.sum_tree._kernels.name, kernels)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (100, 8, 8), dtype=np.uint8)
    for i in range(200):
      memory.add(frames[i % 100], i % 4, 1.0, int(i % 50 == 49), 1.0)
    stop = threading.Event()
    errors = []

    def guarded(work):
      def run():
        try:
          while not stop.is_set():
            work()
        except Exception as e:  # pylint: disable=broad-except
          errors.append(e)
          stop.set()
      return run

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

    threads = [threading.Thread(target=guarded(sample)) for _ in range(2)]
    threads.append(threading.Thread(target=guarded(update)))
    for thread in threads:
      thread.start()
    try:
      for i in range(200, 200 + _ADDS):
        memory.add(frames[i % 100], i % 4, 1.0, int(i % 50 == 49), None)
    finally:
      stop.set()
      for thread in threads:
        thread.join()
    self.assertEqual(errors, [])
    memory.sum_tree.check_invariants()
    # Each add wrote 1 transition, plus 3 zero-padding ones per episode.
    episodes = sum(1 for i in range(200 + _ADDS) if i % 50 == 0)
    self.assertEqual(int(memory.add_count), 200 + _ADDS + 3 * episodes)
    # Every transition kept is one that was added, in order.
    newest = (200 + _ADDS - 1) % 100
    last = (int(memory.add_count) - 1) % _CAPACITY
    np.testing.assert_array_equal(memory._store['observation'][last],
                                  frames[newest])


if __name__ == '__main__':
  absltest.main()
