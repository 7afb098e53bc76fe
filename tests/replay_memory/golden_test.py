"""Seeded runs sample, set and save what they did before the redesign.

Issue 32 moves sampling onto one native sampler behind both faces (the
out-of-graph memory and the graph ops). This test pins what a seeded user
sees through that change: for seeded runs (uniform and prioritized memories,
CartPole and Atari shapes, n-step returns, extra elements, stacks across the
wrap; out of graph, through the native ops and through the
`tf.numpy_function` fallback) it records the sampled batches, their indices,
the priorities and the checkpoint's contents in
testdata/golden.json, which was written by the code before the change
(`python -m tests.replay_memory.golden_test --record`) and is compared here.

Large arrays are recorded as SHA-256 digests of their dtype, shape and
bytes; indices, sampling probabilities and priorities as plain numbers, so a
failure shows where the runs part. Checkpoint files are read back (gunzip,
then `np.load` or pickle) and recorded by content, not by their compressed
bytes, so another zlib or pickle protocol does not change them; of
dopamine_per's own state file, the keys it had before the change.

Seeded means a memory built with `rng=` (the ops' generator is seeded from
it), or, without one, draws from NumPy's global generator seeded with
`np.random.seed` and `random.seed` (the out-of-graph and py_func paths,
as Dopamine's). What
is not here: the native ops' draws for a memory without `rng`, which come
from an unseeded source.
"""

import gzip
import hashlib
import json
import os
import pickle
import random
import sys
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from dopamine_per.replay_memory import circular_replay_buffer as crb
from dopamine_per.replay_memory import prioritized_replay_buffer as prb

_GOLDEN = os.path.join(os.path.dirname(__file__), 'testdata', 'golden.json')

_CARTPOLE = dict(observation_shape=(4,), stack_size=1,
                 observation_dtype=np.float32, replay_capacity=50,
                 batch_size=16, update_horizon=3, gamma=0.99)
_ATARI = dict(observation_shape=(84, 84), stack_size=4,
              observation_dtype=np.uint8, replay_capacity=100,
              batch_size=32, update_horizon=3, gamma=0.99,
              extra_storage_types=[
                  crb.ReplayElement('logits', (2,), np.float32),
                  crb.ReplayElement('step', (), np.int32)])


# dopamine_per's own checkpoint file, and what is recorded of it: not its
# digests of the other files, which are digests of compressed bytes (they
# follow zlib), nor what later versions add to it.
_STATE_FILE = 'dopamine_per_state_ckpt.'
_STATE_KEYS = ('format_version', 'next_experience_is_episode_start',
               'rng_state')


def _digest(array):
  """SHA-256 of an array's dtype, shape and bytes (hex, 16 characters)."""
  array = np.ascontiguousarray(array)
  h = hashlib.sha256()
  h.update('{}{}'.format(array.dtype.str, array.shape).encode())
  h.update(array.tobytes())
  return h.hexdigest()[:16]


def _plain(value):
  """A JSON-ready record of a checkpointed value (arrays as digests)."""
  if isinstance(value, np.ndarray):
    return 'array:' + _digest(value)
  if isinstance(value, np.generic):
    return _plain(value.item())
  if isinstance(value, dict):
    return {str(k): _plain(v) for k, v in sorted(value.items(),
                                                 key=lambda kv: str(kv[0]))}
  if isinstance(value, (list, tuple)):
    return [_plain(v) for v in value]
  if isinstance(value, (set, frozenset)):
    return sorted(_plain(v) for v in value)
  if isinstance(value, float):
    return repr(value)
  if value is None or isinstance(value, (bool, int, str)):
    return value
  if isinstance(value, bytes):
    return 'bytes:' + hashlib.sha256(value).hexdigest()[:16]
  # An object a checkpoint pickles (the sum tree): its class and state.
  state = (value.__getstate__() if hasattr(value, '__getstate__')
           else vars(value))
  return {'class': type(value).__name__, 'state': _plain(state)}


def _batch(names, arrays):
  """A sampled batch: indices and probabilities in full, the rest digests."""
  record = {}
  for name, array in zip(names, arrays):
    array = np.asarray(array)
    if name in ('indices', 'sampling_probabilities'):
      record[name] = array.tolist()
    else:
      record[name] = _digest(array)
  return record


def _fill(memory, count, seed, priorities=False):
  """Adds `count` transitions made from `seed` (episodes end now and then)."""
  source = np.random.RandomState(seed)
  shape = memory._observation_shape  # pylint: disable=protected-access
  dtype = memory._observation_dtype  # pylint: disable=protected-access
  extras = memory.get_storage_signature()[4:]
  for step in range(count):
    if np.dtype(dtype) == np.uint8:
      observation = source.randint(0, 256, size=shape).astype(dtype)
    else:
      observation = source.standard_normal(shape).astype(dtype)
    args = [observation, source.randint(4), float(source.randn()),
            int(step % 23 == 22)]
    for extra in extras:
      args.append(source.standard_normal(extra.shape).astype(extra.type)
                  if np.dtype(extra.type).kind == 'f' else
                  np.array(step, dtype=extra.type).reshape(extra.shape))
    kwargs = {'episode_end': step % 31 == 30}
    if priorities:
      args.append(None if step % 5 == 0 else float(source.uniform(0, 3)))
    memory.add(*args, **kwargs)


def _checkpoint(memory):
  """The contents of checkpoint 3 of `memory`, file by file."""
  with tempfile.TemporaryDirectory() as directory:
    memory.save(directory, 3)
    record = {}
    for name in sorted(os.listdir(directory)):
      path = os.path.join(directory, name)
      if os.path.isdir(path):
        record[name] = 'directory'
        continue
      with open(path, 'rb') as f:
        data = f.read()
      if data[:2] == b'\x1f\x8b':
        data = gzip.decompress(data)
      if data.startswith(b'\x93NUMPY'):
        record[name] = 'npy:' + _digest(np.load(_BytesFile(data)))
      else:
        record[name] = _plain(pickle.loads(data))
        if name.startswith(_STATE_FILE):
          record[name] = {key: record[name][key] for key in _STATE_KEYS}
    return record


class _BytesFile(object):
  """A minimal read-only file over bytes, for np.load."""

  def __init__(self, data):
    import io  # pylint: disable=g-import-not-at-top
    self._f = io.BytesIO(data)

  def __getattr__(self, name):
    return getattr(self._f, name)


def _out_of_graph(memory, batches, prioritized):
  """`batches` samples, each followed (prioritized) by set_priority."""
  names = [e.name for e in memory.get_transition_elements()]
  record = {'batches': []}
  for k in range(batches):
    batch = memory.sample_transition_batch()
    record['batches'].append(_batch(names, batch))
    if prioritized:
      indices = batch[names.index('indices')]
      memory.set_priority(indices, np.linspace(0.25, 2.0 + k, len(indices)))
  if prioritized:
    record['priorities'] = memory.get_priority(
        np.arange(memory._replay_capacity)).tolist()  # pylint: disable=protected-access
  record['checkpoint'] = _checkpoint(memory)
  return record


def _graph(wrapper_class, config, count, seed, runs, use_native_ops):
  """A Wrapped* memory sampled `runs` times in a session (and prioritized,
  its priorities set through `tf_set_priority` after each run)."""
  prioritized = wrapper_class is prb.WrappedPrioritizedReplayBuffer
  with tf.Graph().as_default():
    wrapper = wrapper_class(use_native_ops=use_native_ops,
                            rng=np.random.default_rng(seed), **config)
    _fill(wrapper.memory, count, seed + 1, prioritized)
    names = list(wrapper.transition)
    tensors = list(wrapper.transition.values())
    if prioritized:
      priorities = tf.linspace(0.5, 3.0, config['batch_size'])
      update = wrapper.tf_set_priority(wrapper.indices,
                                       tf.cast(priorities, tf.float32))
      read = wrapper.tf_get_priority(wrapper.indices)
    record = {'batches': []}
    with tf.compat.v1.Session() as session:
      for _ in range(runs):
        batch = session.run(tensors)
        record['batches'].append(_batch(names, batch))
        if prioritized:
          indices = batch[names.index('indices')]
          session.run(update, {wrapper.indices: indices})
          record['batches'][-1]['read'] = session.run(
              read, {wrapper.indices: indices}).tolist()
    if prioritized:
      record['priorities'] = wrapper.memory.get_priority(
          np.arange(config['replay_capacity'])).tolist()
    record['checkpoint'] = _checkpoint(wrapper.memory)
    return record


def _seeded_global(memory_class, config, count, seed, prioritized):
  """A memory without `rng`: Dopamine's global generators, seeded.

  The uniform draws come from `np.random`, the sum tree's from Python's
  `random` (both as in Dopamine).
  """
  states = np.random.get_state(), random.getstate()
  np.random.seed(seed)
  random.seed(seed)
  try:
    memory = memory_class(**config)
    _fill(memory, count, seed + 1, prioritized)
    return _out_of_graph(memory, 3, prioritized)
  finally:
    np.random.set_state(states[0])
    random.setstate(states[1])


def _own_rng(memory_class, config, count, seed, prioritized, batches=4):
  memory = memory_class(rng=np.random.default_rng(seed), **config)
  _fill(memory, count, seed + 1, prioritized)
  return _out_of_graph(memory, batches, prioritized)


CASES = {
    'cartpole_uniform': lambda: _own_rng(
        crb.OutOfGraphReplayBuffer, _CARTPOLE, 120, 1, False),
    'cartpole_prioritized': lambda: _own_rng(
        prb.OutOfGraphPrioritizedReplayBuffer, _CARTPOLE, 120, 2, True),
    'cartpole_prioritized_not_full': lambda: _own_rng(
        prb.OutOfGraphPrioritizedReplayBuffer, _CARTPOLE, 30, 3, True),
    'atari_uniform_across_the_wrap': lambda: _own_rng(
        crb.OutOfGraphReplayBuffer, _ATARI, 262, 4, False, batches=3),
    'atari_prioritized_across_the_wrap': lambda: _own_rng(
        prb.OutOfGraphPrioritizedReplayBuffer, _ATARI, 262, 5, True,
        batches=3),
    'atari_uniform_numpy_global_seed': lambda: _seeded_global(
        crb.OutOfGraphReplayBuffer, _ATARI, 180, 6, False),
    'cartpole_prioritized_numpy_global_seed': lambda: _seeded_global(
        prb.OutOfGraphPrioritizedReplayBuffer, _CARTPOLE, 90, 7, True),
    'graph_native_cartpole_uniform': lambda: _graph(
        crb.WrappedReplayBuffer, _CARTPOLE, 120, 8, 4, True),
    'graph_native_cartpole_prioritized': lambda: _graph(
        prb.WrappedPrioritizedReplayBuffer, _CARTPOLE, 120, 9, 4, True),
    'graph_native_atari_prioritized': lambda: _graph(
        prb.WrappedPrioritizedReplayBuffer, _ATARI, 262, 10, 3, True),
    'graph_py_func_cartpole_prioritized': lambda: _graph(
        prb.WrappedPrioritizedReplayBuffer, _CARTPOLE, 120, 11, 4, False),
    'graph_py_func_atari_uniform': lambda: _graph(
        crb.WrappedReplayBuffer, _ATARI, 262, 12, 3, False),
}


def record_all():
  """Runs every case; returns {case name: record}."""
  return {name: json.loads(json.dumps(run())) for name, run in CASES.items()}


class GoldenTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    with open(_GOLDEN, encoding='utf-8') as f:
      cls.golden = json.load(f)

  def test_every_case_is_recorded(self):
    self.assertCountEqual(CASES, self.golden)

  def test_seeded_runs_match_the_recorded_ones(self):
    for name, run in CASES.items():
      with self.subTest(name):
        self.assertEqual(json.loads(json.dumps(run())), self.golden[name])


if __name__ == '__main__':
  if sys.argv[1:] == ['--record']:
    os.makedirs(os.path.dirname(_GOLDEN), exist_ok=True)
    with open(_GOLDEN, 'w', encoding='utf-8') as f:
      json.dump(record_all(), f, indent=1, sort_keys=True)
      f.write('\n')
  else:
    absltest.main()
