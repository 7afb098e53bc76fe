"""The native ops and the LZ4 codec under AddressSanitizer and UBSan.

Runs, in a Python with libasan preloaded and the sanitized libraries
loaded, normal sampling, priority updates while Python adds (frames stored
raw, and compressed), every bad input of native_ops_test's BadInputTest,
and a batch queue's batches, shipped states, priority updates, errors and
closing; in another, the JAX memory (issue 34: stacks with zeroed frames,
its binary sum tree, refused out-of-bounds arguments); and in a third, the
LZ4 codec's
round trips and seeded fuzz (tests/native/lz4_cases.py) through the
sanitized extension module: no sanitizer report, exit 0.

libstdc++ is preloaded with libasan: else ASan's `__cxa_throw` interceptor
finds no libstdc++ when Python starts (it has none) and aborts at the first
C++ exception thrown by a library loaded later.
"""

import os
import subprocess
import sys

from absl.testing import absltest

from dopamine_per.native import build
from tests.support import fixtures

_SCRIPT = r'''
import gc
import os
import threading

import numpy as np
import tensorflow as tf

from dopamine_per.native import core
from dopamine_per.replay_memory import circular_replay_buffer
from dopamine_per.replay_memory import prioritized_replay_buffer
from dopamine_per.replay_memory.graph import native_ops

native_ops.load()
with open('/proc/self/maps') as f:
  maps = f.read()
for path in os.environ['SANITIZED_LIBRARIES'].split(os.pathsep):
  assert path in maps, 'not loaded: ' + path
assert 'libasan' in maps, 'no libasan'

Prioritized = prioritized_replay_buffer.OutOfGraphPrioritizedReplayBuffer
rng = np.random.default_rng(0)


def refused(errors, function, message='no error'):
  try:
    function()
  except errors:
    return
  raise AssertionError(message)


def fill(memory, count):
  for i in range(count):
    memory.add(rng.integers(0, 256, (84, 84), dtype=np.uint8), i % 4,
               float(i), i % 37 == 36, rng.standard_normal(3).astype(
                   np.float32), priority=1.0 + i % 3,
               episode_end=i % 23 == 22)


def normal_use(memory):
  """Eagerly, in a session, with Python adding meanwhile."""
  native = native_ops.binding(memory, True)
  assert native is not None
  elements = memory.get_transition_elements()
  for _ in range(20):
    batch = native_ops.sample(native, elements)
    indices = batch[7].numpy()
    expected = memory.sample_transition_batch(indices=indices)
    for got, want in zip(batch, expected):
      assert got.numpy().tobytes() == want.tobytes()
    native_ops.set_priority(native, batch[7], tf.fill([8], 2.0))
    native_ops.transitions_at(native, elements, batch[7])
    native_ops.get_priority(native, batch[7])
    native_ops.total_priority(native)
  graph = tf.Graph()
  with graph.as_default():
    sample = native_ops.sample(native, elements)
    update = native_ops.set_priority(native, sample[7], tf.fill([8], 0.5))
    session = tf.compat.v1.Session()
  stop = threading.Event()

  def add():
    while not stop.is_set():
      fill(memory, 1)

  adder = threading.Thread(target=add)
  adder.start()
  for _ in range(200):
    session.run([sample, update])
  stop.set()
  adder.join()
  memory.sum_tree.check_invariants()
  return native, graph, session


def make(**kwargs):
  memory = Prioritized(
      (84, 84), 4, 64, 8, update_horizon=3, rng=0, extra_storage_types=[
          circular_replay_buffer.ReplayElement('logits', (3,), np.float32)],
      **kwargs)
  fill(memory, 100)  # Wrapped around.
  return memory


# Compressed frames: the ops decode blocks Python replaces meanwhile.
normal_use(make(compress_observations=True))
memory = make()
native, graph, session = normal_use(memory)
elements = memory.get_transition_elements()

# Bad input: errors, nothing written.
IAE = tf.errors.InvalidArgumentError
FPE = tf.errors.FailedPreconditionError
two = memory.get_transition_elements(2)
valid = np.flatnonzero(memory.is_valid_transition(np.arange(64)))
invalid = np.flatnonzero(~memory.is_valid_transition(np.arange(64)))
bad = [
    (IAE, lambda: native_ops.set_priority(native, [3, 64], [1.0, 1.0])),
    (IAE, lambda: native_ops.set_priority(native, [-1], [1.0])),
    (IAE, lambda: native_ops.get_priority(native, [64])),
    (IAE, lambda: native_ops.get_priority(native, [-5])),
    (IAE, lambda: native_ops.transitions_at(native, two, [valid[0], 64])),
    (IAE, lambda: native_ops.transitions_at(native, two, [-1, valid[0]])),
    (IAE, lambda: native_ops.transitions_at(native, two,
                                            [valid[0], invalid[0]])),
    (IAE, lambda: native_ops.transitions_at(native, two, [[1, 2], [3, 4]])),
    (IAE, lambda: native_ops.transitions_at(native, two,
                                            np.zeros(0, np.int64))),
    (IAE, lambda: native_ops.transitions_at(native, two, valid[:3])),
    (IAE, lambda: native_ops.transitions_at(native, two, [1.0, 2.0])),
    (IAE, lambda: native_ops.set_priority(native, [1, 2, 3], [1.0, 2.0])),
    (IAE, lambda: native_ops.set_priority(native, [1, 2], [1.0, np.nan])),
    (IAE, lambda: native_ops.set_priority(native, [1, 2], [np.inf, 1.0])),
    (IAE, lambda: native_ops.set_priority(native, [1], [-1.0])),
    (IAE, lambda: native_ops.set_priority(native, [1], np.array([1e-300]))),
    (IAE, lambda: native_ops.sample(native,
                                    memory.get_transition_elements(65))),
]
leaves = memory.sum_tree._flat.copy()
for error, function in bad:
  refused(error, function)
assert np.array_equal(memory.sum_tree._flat, leaves)

uniform = circular_replay_buffer.OutOfGraphReplayBuffer((2,), 2, 10, 4)
uniform_native = native_ops.binding(uniform, True)
refused((IAE, FPE), lambda: native_ops.sample(
    uniform_native, uniform.get_transition_elements()))
refused((IAE, FPE),
        lambda: native_ops.set_priority(uniform_native, [1], [1.0]))
memory.set_priority(np.arange(64), 0.0)
refused(FPE, lambda: native_ops.sample(native, elements),
        'sampled an empty tree')

# A deleted memory; a closed registration whose lock the memory keeps.
with graph.as_default():
  ops = [native_ops.sample(uniform_native, uniform.get_transition_elements()),
         native_ops.total_priority(native)]
del memory, uniform
gc.collect()
for op in ops:
  refused(FPE, lambda: session.run(op), 'a deleted memory answered')
closed = Prioritized((2,), 1, 10, 2)
closed.native_memory().close()
for i in range(12):
  closed.add(np.zeros(2, np.uint8), 0, 0.0, False, 1.0)
assert len(closed.sample_transition_batch()[0]) == 2

# The batch queue: arrays and shipped states (rows scattered), errors,
# stale and dropped batches, a full queue, closing while an op waits.
from dopamine_per.native import batch_queue
shipping = Prioritized((6, 5), 4, 30, 6, update_horizon=3,
                       compress_observations=True)
for i in range(41):
  shipping.add(rng.integers(0, 9, (6, 5), dtype=np.uint8), 0, 1.0,
               i % 9 == 8, 1.0)
slots = shipping.sample_index_batch(6)
expected = shipping.sample_transition_batch(indices=slots)
batch = shipping.sample_transition_batch(indices=slots, ship_frames=True)
frames = batch[0]  # The state's position; next_state's is None.
arrays = [None if a is None or a is frames else a for a in batch]
blocks = batch_queue.Blocks(frames)
order = np.array([5, 0, 3, 1, 4, 2])
queue = batch_queue.BatchQueue(1)
elements = shipping.get_transition_elements(6)
assert queue.push(batch_queue.ReadyBatch(arrays, [(
    blocks, order, frames.ends[order], frames.next_ends[order])]),
                  queue.generation, 0.0)
assert not queue.push(batch_queue.ReadyBatch(arrays, []), queue.generation,
                      0.01)
got = [t.numpy() for t in native_ops.dequeue(queue, elements)]
for a, b in zip(got, expected):
  np.testing.assert_array_equal(a, b)
queue.push_error(batch_queue.INVALID_ARGUMENT, 'bad', queue.generation)
refused(IAE, lambda: native_ops.dequeue(queue, elements))
assert queue.push(batch_queue.ReadyBatch(arrays, []), queue.generation - 1,
                  0.0) is None
waiter = threading.Thread(target=lambda: refused(
    FPE, lambda: native_ops.dequeue(queue, elements, timeout_s=30.0)))
waiter.start()
assert queue.wait_wanted(30.0)
native_ops.queue_priorities(queue, 30, np.array([4, 9, 4]),
                            np.array([1.0, 0.0, 2.0], np.float32))
refused(IAE, lambda: native_ops.queue_priorities(queue, 30, [30], [1.0]))
taken = queue.take_priorities()
assert taken[0].tolist() == [4, 9, 4] and taken[1].tolist() == [1, 0, 2]
assert len(queue.take_priorities()[0]) == 0
queue.close()
waiter.join()
count = batch_queue.queue_count()
del queue, blocks
gc.collect()
assert batch_queue.queue_count() == count - 1, 'the queue outlived its owner'
print('sanitized ops: OK')
'''

_LZ4_SCRIPT = r'''
import os

import numpy as np

from dopamine_per.native import extension
from tests.native import lz4_cases

module = extension.load()
with open('/proc/self/maps') as f:
  maps = f.read()
assert os.environ['SANITIZED_LIBRARIES'] in maps, 'not the sanitized one'
assert 'libasan' in maps, 'no libasan'
for name, data in lz4_cases.datasets(np.random.default_rng(7)).items():
  for level in (0, 9):
    block = extension.lz4_compress(data, level)
    assert extension.lz4_decompress(block, len(data)) == data, name
  for mode in ('default', 'hc9'):
    block = lz4_cases.reference_compress(data, mode)
    assert extension.lz4_decompress(block, len(data)) == data, name
counts = lz4_cases.fuzz(extension.lz4_decompress, extension.lz4_compress)
assert counts['accepted'] > 0 and counts['refused'] > 0, counts
print('sanitized lz4: OK', counts)
'''


_JAX_SCRIPT = r'''
import os

import numpy as np

from dopamine_per.jax.replay_memory import accumulator
from dopamine_per.jax.replay_memory import elements
from dopamine_per.jax.replay_memory import replay_buffer
from dopamine_per.jax.replay_memory import samplers
from dopamine_per.native import extension

module = extension.load()
with open('/proc/self/maps') as f:
  maps = f.read()
assert os.environ['SANITIZED_LIBRARIES'] in maps, 'not the sanitized one'
rng = np.random.default_rng(3)
# Small frames; then frames whose batches are split between two threads
# (helper_thread.h) and whose blocks compress (block_compressor.h).
for compress, shape, size in ((False, (9, 7), 16), (True, (9, 7), 16),
                              (False, (48, 48), 64), (True, (48, 48), 64)):
  # Short episodes: stacks with zeroed frames, the ring growing, wrapping.
  memory = replay_buffer.ReplayBuffer(
      accumulator.TransitionAccumulator(4, 3, 0.9),
      samplers.PrioritizedSamplingDistribution(0, max_capacity=64),
      batch_size=size, max_capacity=64, compress=compress)
  for t in range(600):
    terminal = bool(rng.random() < 0.3)
    memory.add(elements.TransitionElement(
        (rng.integers(0, 4, shape) * 60).astype(np.uint8), t % 4, 1.0,
        terminal, terminal), priority=float(rng.random()) + 0.1)
    if t % 7 == 0 and memory.add_count:
      batch, metadata = memory.sample(with_sample_metadata=True)
      memory.update(metadata.keys, priorities=rng.random(size) + 0.1)
  memory.to_state_dict()  # Waits for the blocks being compressed.
# Arguments out of bounds are refused before anything is read or written.
nodes = np.zeros(15)
for leaves in (np.array([8]), np.array([-1])):
  try:
    module.binary_tree_set(nodes, 7, leaves, np.ones(1))
  except ValueError:
    pass
  else:
    raise AssertionError('leaf {} written'.format(leaves))
frames = np.zeros((8, 10), np.uint8)
states = np.zeros((2, 10, 4), np.uint8)
for ends in (np.array([0, 7]), np.array([0, -1])):
  try:
    module.fill_stacks(frames, 8, 1, None, None, -1, None, 4, ends, ends,
                       ends, ends, states, states[:1])
  except ValueError:
    pass
  else:
    raise AssertionError('outputs that do not fit were filled')
print('sanitized jax: OK')
'''


def _compiler_file(name):
  """The path of the compiler's runtime library `name`."""
  compiler = os.environ.get('CXX', 'g++')
  path = subprocess.run([compiler, '-print-file-name=' + name],
                        capture_output=True, text=True, check=True,
                        timeout=60).stdout.strip()
  if not os.path.isabs(path):
    raise AssertionError('{} has no {} (it answered {!r})'.format(
        compiler, name, path))
  return path


class SanitizerTest(absltest.TestCase):

  def _run_sanitized(self, script, libraries, done):
    """Runs `script` with libasan preloaded and the sanitized `libraries`.

    It must print `done`, exit 0 and draw no sanitizer report.
    """
    env = fixtures.subprocess_env(
        LD_PRELOAD=' '.join([_compiler_file('libasan.so'),
                             _compiler_file('libstdc++.so')]),
        ASAN_OPTIONS='detect_leaks=0',
        UBSAN_OPTIONS='halt_on_error=1:print_stacktrace=1',
        SANITIZED_LIBRARIES=os.pathsep.join(libraries),
        **{build.SANITIZE_ENV: '1'})
    result = subprocess.run([sys.executable, '-c', script], env=env,
                            capture_output=True, text=True, timeout=600,
                            cwd=fixtures.REPO_ROOT, check=False)
    self.assertNotIn('ERROR: AddressSanitizer', result.stderr)
    self.assertNotIn('runtime error:', result.stderr)  # UBSan.
    self.assertEqual(result.returncode, 0, result.stderr[-5000:])
    self.assertIn(done, result.stdout)

  def test_ops_under_address_sanitizer(self):
    self._run_sanitized(_SCRIPT, [build.core_library(sanitize=True),
                                  build.ops_library(sanitize=True)],
                        'sanitized ops: OK')

  def test_jax_memory_under_address_sanitizer(self):
    self._run_sanitized(_JAX_SCRIPT, [build.python_extension(sanitize=True)],
                        'sanitized jax: OK')

  def test_lz4_codec_under_address_sanitizer(self):
    self._run_sanitized(_LZ4_SCRIPT, [build.python_extension(sanitize=True)],
                        'sanitized lz4: OK')


if __name__ == '__main__':
  absltest.main()
