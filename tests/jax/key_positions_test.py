"""Tests of `key_positions.KeyPositions` against a list and a dict (what
Dopamine's samplers hold), keys chosen to collide in its cells."""

from absl.testing import absltest
import numpy as np

from dopamine_per.jax.replay_memory import key_positions


class KeyPositionsTest(absltest.TestCase):

  def _check(self, index, keys):
    """`index` holds `keys` by position, each found at its position."""
    np.testing.assert_array_equal(index.keys, keys)
    positions = {key: i for i, key in enumerate(keys)}
    self.assertEqual(dict(index.items()), positions)
    if keys:
      np.testing.assert_array_equal(index.positions(np.asarray(keys)),
                                    np.arange(len(keys)))
    for key, position in positions.items():
      self.assertEqual(index.position(key), position)
    self.assertNotIn(-5, index)

  def test_adds_removes_grows_sorts_and_loads_as_a_list_and_dict(self):
    rng = np.random.default_rng(0)
    index = key_positions.KeyPositions(capacity=16)
    keys = []
    # Multiples of 64 share cells whatever the table's size (up to 64):
    # most keys spill, then the table grows under them.
    candidates = np.concatenate([np.arange(0, 64 * 40, 64),
                                 np.arange(1, 300)])
    for step in range(600):
      if keys and rng.random() < 0.35:
        key = keys[int(rng.integers(len(keys)))]
        position = keys.index(key)
        keys[position] = keys[-1]
        keys.pop()
        self.assertEqual(index.remove(key), position)
      else:
        key = int(rng.choice(candidates))
        if key in keys:
          continue
        keys.append(key)
        self.assertEqual(index.add(key), len(keys) - 1)
      if step % 50 == 0:
        self._check(index, keys)
    self._check(index, keys)
    index.sort()
    keys.sort()
    self._check(index, keys)
    loaded = key_positions.KeyPositions(capacity=16)
    loaded.load(index.keys, index.pairs())
    self._check(loaded, keys)
    loaded.load(np.asarray(keys), {key: i for i, key in enumerate(keys)})
    self._check(loaded, keys)
    with self.assertRaises(KeyError):
      index.position(64 * 41)

  def test_a_load_whose_positions_do_not_match_changes_nothing(self):
    index = key_positions.KeyPositions()
    for key in (3, 7, 11):
      index.add(key)
    with self.assertRaisesRegex(ValueError, 'do not match'):
      index.load(np.asarray([1, 2]), {1: 0, 2: 0})
    self._check(index, [3, 7, 11])


if __name__ == '__main__':
  absltest.main()
