# coding=utf-8
"""Tests for distributed.frame_shipping: a shard's batch, frames compressed.

No Ray: the memories are the shards' (`OutOfGraphPrioritizedReplayBuffer`),
in this process.
"""

import pickle

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from dopamine_per.distributed import frame_shipping
from dopamine_per.native import extension
from tests.support import frame_cases

_fill_with_numpy = frame_shipping._fill_with_numpy  # pylint: disable=protected-access


def _filled(count):
  """(uncompressed, compressed) prioritized memories after `count` adds."""
  plain, compressed = frame_cases.memories(prioritized=True)
  frame_cases.add([plain, compressed], count)
  return plain, compressed


def _valid(memory, count=None):
  """Every valid slot of `memory` (the first `count`)."""
  slots = np.flatnonzero(memory.is_valid_transition(
      np.arange(memory.replay_capacity)))
  return slots[:count]


class FrameShippingTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # Not full: the open block is the newest, no stack wraps.
      ('filling', 70),
      # Wrapped more than once: stacks read across the short last block
      # (capacity 101) into block 0, and the open block.
      ('wrapped', 260))
  def test_batch_equals_the_uncompressed_memory_s(self, count):
    plain, compressed = _filled(count)
    self.assertTrue(frame_shipping.ships_frames(compressed))
    self.assertFalse(frame_shipping.ships_frames(plain))
    slots = np.random.default_rng(1).permutation(_valid(plain))
    expected = plain.sample_transition_batch(indices=slots)
    packed = frame_shipping.pack_batch(compressed, slots)
    names = [e.name for e in plain.get_transition_elements(len(slots))]
    shipped = packed[names.index('state')]
    self.assertIsInstance(shipped, frame_shipping.ShippedFrames)
    self.assertIsNone(packed[names.index('next_state')])
    for name, got, want in zip(names, packed, expected):
      if name not in ('state', 'next_state'):
        np.testing.assert_array_equal(got, want, err_msg=name)
        self.assertEqual(got.dtype, want.dtype)
    want_states = (expected[names.index('state')],
                   expected[names.index('next_state')])
    native = frame_shipping.unpacked_states(pickle.loads(pickle.dumps(
        shipped)))
    reference = tuple(np.empty_like(s) for s in want_states)
    _fill_with_numpy(shipped, *reference)
    for got in (native, reference):
      np.testing.assert_array_equal(got[0], want_states[0])
      np.testing.assert_array_equal(got[1], want_states[1])
    # Fewer bytes than the states, though each block goes whole.
    self.assertLess(shipped.nbytes, want_states[0].nbytes)

  def test_ship_frames_is_the_memorys_public_way(self):
    plain, compressed = _filled(260)
    names = [e.name for e in plain.get_transition_elements()]
    # Sampled (no indices): the draws' states shipped, the rest as sampled.
    shipped = compressed.sample_transition_batch(ship_frames=True)
    self.assertIsInstance(shipped[names.index('state')],
                          frame_shipping.ShippedFrames)
    indices = shipped[names.index('indices')]
    expected = plain.sample_transition_batch(indices=indices)
    for name, got, want in zip(names, shipped, expected):
      if name not in ('state', 'next_state'):
        np.testing.assert_array_equal(got, want, err_msg=name)
    states = frame_shipping.unpacked_states(shipped[names.index('state')])
    np.testing.assert_array_equal(states[0], expected[names.index('state')])
    np.testing.assert_array_equal(states[1],
                                  expected[names.index('next_state')])
    # Raw frames: the usual batch; off by default.
    slots = _valid(plain, 9)
    for got, want in zip(
        plain.sample_transition_batch(indices=slots, ship_frames=True),
        plain.sample_transition_batch(indices=slots)):
      np.testing.assert_array_equal(got, want)
    self.assertNotIsInstance(
        compressed.sample_transition_batch(indices=slots)[0],
        frame_shipping.ShippedFrames)
    with self.assertRaisesRegex(ValueError, 'not a valid transition'):
      compressed.sample_transition_batch(
          indices=[compressed.cursor()], ship_frames=True)

  def test_open_block_goes_raw_and_stored_ones_as_stored(self):
    plain, compressed = _filled(70)
    frames = compressed.storage.arrays['observation']
    newest = _valid(plain)[-1:]  # Its next state ends in the open block.
    shipped = frame_shipping.pack_batch(compressed, newest)[0]
    self.assertEqual(shipped.open_block, int(frames.open_block[0]))
    np.testing.assert_array_equal(shipped.open_frames, frames.open_frames)
    self.assertNotIn(shipped.open_block, shipped.numbers.tolist())
    for j, k in enumerate(shipped.numbers.tolist()):
      start = int(shipped.sizes[:j].sum())
      self.assertEqual(shipped.payload[start:start + shipped.sizes[j]]
                       .tobytes(), frames.payload(k))
    first = frame_shipping.pack_batch(compressed, _valid(plain)[:1])[0]
    self.assertEqual(first.open_block, -1)
    self.assertFalse(first.open_frames.any())

  def test_blocks_never_stored_read_as_zeros(self):
    _, compressed = _filled(70)
    shipped = frame_shipping.pack_batch(compressed, _valid(compressed)[:3])[0]
    shipped.sizes[:] = 0  # As if none of them had been stored.
    shipped.payload = np.zeros(0, np.uint8)
    for fill in (frame_shipping.fill_states, _fill_with_numpy):
      states = np.ones((3,) + shipped.state_shape(), np.uint8)
      next_states = np.ones_like(states)
      fill(shipped, states, next_states)
      self.assertFalse(states.any() or next_states.any())

  def test_malformed_shipments_are_refused(self):
    _, compressed = _filled(70)
    good = frame_shipping.pack_batch(compressed, _valid(compressed)[:4])[0]
    self.assertGreater(len(good.numbers), 1)

    def broken(**changes):
      shipped = pickle.loads(pickle.dumps(good))
      for name, value in changes.items():
        setattr(shipped, name, value)
      return shipped

    cases = [
        ('lacks a block', broken(numbers=good.numbers[1:],
                                 sizes=good.sizes[1:],
                                 payload=good.payload[good.sizes[0]:]),
         'missing'),
        ('corrupt bytes', broken(payload=np.full_like(good.payload, 7)),
         'does not decode'),
        ('out of order', broken(numbers=good.numbers[::-1].copy()),
         'out of order'),
        ('sizes and payload disagree', broken(payload=good.payload[:-1]),
         'do not fit'),
        ('an end outside the memory', broken(ends=good.ends + 1000),
         'outside'),
        ('a block outside the memory', broken(
            numbers=good.numbers + 1000), 'outside'),
    ]
    for name, shipped, message in cases:
      with self.subTest(name):
        states = np.empty((4,) + good.state_shape(), np.uint8)
        with self.assertRaisesRegex(ValueError, message):
          frame_shipping.fill_states(shipped, states, states.copy())

  def test_outputs_that_do_not_fit_are_refused(self):
    _, compressed = _filled(70)
    shipped = frame_shipping.pack_batch(compressed, _valid(compressed)[:4])[0]
    module = extension.load()
    args = (shipped.payload, shipped.numbers, shipped.sizes,
            shipped.open_block, shipped.open_frames, shipped.ends,
            shipped.next_ends, shipped.capacity, shipped.block_frames,
            shipped.stack)
    shape = (4,) + shipped.state_shape()
    for name, states in [('too few rows', np.empty((3,) + shape[1:],
                                                   np.uint8)),
                         ('a smaller frame', np.empty(shape[:2] + (3, 4),
                                                      np.uint8))]:
      with self.subTest(name), self.assertRaisesRegex(ValueError,
                                                      'do not fit'):
        module.fill_shipped_states(*args, states, np.empty(shape, np.uint8))
    read_only = np.empty(shape, np.uint8)
    read_only.flags.writeable = False
    with self.assertRaisesRegex(ValueError, 'do not fit'):
      module.fill_shipped_states(*args, read_only, np.empty(shape, np.uint8))


if __name__ == '__main__':
  absltest.main()
