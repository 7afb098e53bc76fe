"""Packaging for dopamine_per, a prioritized replay memory for TensorFlow.

Install for use:         pip install .
Install for development: bash scripts/test.sh   (creates .venv, see README.md)
"""

import glob
import importlib.metadata
import os
import re
import subprocess
import sys

import setuptools
from setuptools.command import build_py

# The TensorFlow minor version tf-keras is pinned to when TensorFlow is not
# installed yet (pip then resolves both to this minor version).
_DEFAULT_TENSORFLOW_MINOR = '2.21'
_TENSORFLOW_VERSION = (
    'import importlib.metadata as m; print(m.version("tensorflow"))')


def _installed_tensorflow_version():
  """Returns the target environment's TensorFlow version, or None.

  pip builds a package without pyproject.toml in an isolated environment
  that hides the target's site-packages (through PYTHONPATH); the same
  interpreter without that PYTHONPATH sees them.
  """
  try:
    return importlib.metadata.version('tensorflow')
  except importlib.metadata.PackageNotFoundError:
    pass
  env = {k: v for k, v in os.environ.items()
         if k not in ('PYTHONPATH', 'PYTHONNOUSERSITE')}
  result = subprocess.run([sys.executable, '-c', _TENSORFLOW_VERSION],
                          env=env, capture_output=True, text=True,
                          check=False)
  if result.returncode != 0:
    return None
  return result.stdout.strip() or None


def _tf_keras_requirement():
  """Returns tf-keras pinned to the installed TensorFlow's minor version.

  tf-keras X.Y requires tensorflow X.Y exactly (tf-keras 2.21.0:
  tensorflow>=2.21,<2.22), so any other pin makes pip replace the installed
  TensorFlow wheel.
  """
  version = _installed_tensorflow_version() or _DEFAULT_TENSORFLOW_MINOR
  major, minor = (int(part) for part in version.split('.')[:2])
  return 'tf-keras>={0}.{1},<{0}.{2}'.format(major, minor, minor + 1)


def _version():
  """Returns dopamine_per.__version__, read without importing the package."""
  with open(os.path.join('dopamine_per', '__init__.py'),
            encoding='utf-8') as f:
    return re.search(r"^__version__ = '([^']+)'", f.read(), re.M).group(1)


class _BuildPyWithConfigs(build_py.build_py):
  """Also copies the top-level configs/*.gin into dopamine_per/configs/.

  configs/ stays the one source of the gin configs (the sdist carries it,
  MANIFEST.in); the wheel gets them inside the package, where
  `dopamine_per.configs` finds them by name. An editable install copies
  nothing: `dopamine_per.configs` reads the checkout's configs/ in place.
  """

  def run(self):
    super().run()
    if getattr(self, 'editable_mode', False):
      return
    target = os.path.join(self.build_lib, 'dopamine_per', 'configs')
    self.mkpath(target)
    for path in sorted(glob.glob(os.path.join('configs', '*.gin'))):
      self.copy_file(path, target)


# The 'compress' extra: compress_observations=True (issue 33) stores frames
# as LZ4 blocks (HC level 4; docs/compression.md): lz4's block format and
# its HC compressor, as a wheel with no system library; their checkpoints:
# zstd over the packed blocks, 4.8x smaller than the blocks (gzip: 3.3x, at
# a fifth of the speed).
_COMPRESS = ['lz4>=4.0', 'zstandard>=0.22']

# The 'jax' extra (issue 34): dopamine_per.jax.replay_memory, Dopamine
# JAX's replay API on our core. Its batches are flax PyTreeNodes (flax) that
# JAX agents map over (jax); Dopamine JAX's checkpoints are orbax
# directories of msgpack (orbax-checkpoint, msgpack), which the importer
# reads, and their compressed elements are snappy (python-snappy); its
# default, compress=True, stores frames as the 'compress' extra does.
_JAX = ['jax>=0.4.30', 'flax>=0.8', 'orbax-checkpoint>=0.5', 'msgpack>=1.0',
        'python-snappy>=0.7'] + _COMPRESS


setuptools.setup(
    name='dopamine_per',
    version=_version(),
    description=(
        'Prioritized experience replay for TensorFlow: a vectorized sum tree '
        "and drop-in replacements for Google Dopamine's replay memories."
    ),
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    packages=setuptools.find_packages(
        exclude=['tests', 'tests.*', 'benchmarks', 'benchmarks.*']),
    # The native ops' C++ sources: compiled on first use against the
    # installed TensorFlow (dopamine_per/native/build.py), not at install
    # time, since pip builds wheels in an environment with another
    # TensorFlow (or none).
    package_data={'dopamine_per.native': ['*.h', '*.cc']},
    python_requires='>=3.9',
    install_requires=[
        # The Wrapped* buffers build graph ops (the native ops, else
        # tf.numpy_function; TF 2.x under tf.compat.v1, as Dopamine's TF
        # agents run).
        'tensorflow>=2.12',
        # The sum tree and the OutOfGraph* buffers are NumPy code.
        'numpy>=1.22',
        # The buffers are gin-configurable, as Dopamine's are.
        'gin-config>=0.5.0',
        # Flags, logging and the absltest-based tests and demo.
        'absl-py>=1.0',
        # Draws every run's learning_curve.png and `python -m
        # dopamine_per.plot`'s comparisons across seeds and configs (labelled
        # axes, legends, bands): what a hand-written PNG encoder and pixel
        # font did before, worse. Imported on the first drawing only (Agg
        # canvas, no GUI backend), so importing the package stays cheap.
        'matplotlib>=3.5',
    ],
    extras_require={
        'test': [
            # The test runner used by scripts/test.sh.
            'pytest>=7.0',
            # Property-based tests: random operation sequences on the sum
            # tree and the buffers, checked against their invariants.
            'hypothesis>=6.0',
            # The agent and runner tests train on CartPole (gymnasium) and
            # run a Rainbow smoke test on Pong (ale-py ships the ROMs).
            'gymnasium>=1.0',
            'ale-py>=0.9',
            # gym_lib's tests step LunarLander (Box2D), as the 'box2d' extra.
            'gymnasium[box2d]>=1.0',
            # The agent tests also run Dopamine-style Keras networks under
            # tf-keras (TF_USE_LEGACY_KERAS=1), besides Keras 3; pinned to the
            # installed TensorFlow's minor version (_tf_keras_requirement).
            _tf_keras_requirement(),
            # The benchmark smoke tests drive cpprb, a peer of the benchmarks
            # (tests must not skip when it is missing).
            'cpprb>=10.0',
            # The compression benchmark's smoke test round-trips frames
            # through zstd (tests must not skip when it is missing).
            'zstandard>=0.19',
            # ... and through lz4's block format, the fast codec it compares.
            'lz4>=4.0',
            # The sharded memory's tests start a local Ray (tests must not
            # skip when it is missing), as the 'distributed' extra.
            'ray>=2.9',
            # tests/suites/packaging_test.py builds the sdist and the wheel with
            # the environment's own setuptools (python -m build
            # --no-isolation: no network), which venvs of Python 3.12+ lack;
            # before 70.1 (Python 3.11's venv brings 65.5) setuptools needs
            # the wheel package for wheels. .ci/run uses build as well.
            'build>=1.0',
            'setuptools>=64',
            'wheel>=0.37',
            # Not listed: dopamine-rl==4.1.2, the reference implementation
            # the compatibility tests compare against. Its own requirements
            # pull in JAX, Flax, gym and more that it does not need for
            # dopamine.tf.replay_memory, so scripts/test.sh installs it with
            # `pip install --no-deps`.
            # The JAX replay memory's tests (the 'jax' extra) compare it with
            # Dopamine JAX's, which needs the same packages.
        ] + _JAX,
        'gym': [
            # Classic-control environments (CartPole, Acrobot, ...) for
            # dopamine_per.discrete_domains.gym_lib and the CartPole configs.
            'gymnasium>=1.0',
        ],
        'box2d': [
            # LunarLander (Dopamine's lunarlander configs) is a Box2D
            # environment. gymnasium's own extra pins box2d==2.3.10 on Python
            # < 3.14, which has manylinux wheels for 3.10-3.13 (3.11
            # included), so no SWIG or C++ compiler is needed (3.14 builds
            # box2d-py with SWIG); it also brings pygame-ce, for rendering.
            'gymnasium[box2d]>=1.0',
        ],
        'atari': [
            # Atari 2600 games for dopamine_per.discrete_domains.atari_lib;
            # ale-py ships the ROMs. Frames are resized in NumPy, so OpenCV
            # is not needed.
            'gymnasium>=1.0',
            'ale-py>=0.9',
            # The Atari configs compress their frames (0.5 GiB instead of
            # 6.9 at 1M transitions): the 'compress' extra's packages.
        ] + _COMPRESS,
        'compress': _COMPRESS,
        'jax': _JAX,
        'distributed': [
            # dopamine_per.distributed shards the prioritized memory over Ray
            # actors (Ape-X, Horgan et al., 2018): Ray starts and places the
            # processes and carries the calls, locally or on a cluster, so
            # the package has no RPC or process pool of its own. Tested with
            # Ray 2.60.
            'ray>=2.9',
        ],
        'bench': [
            # cpprb's PrioritizedReplayBuffer is a C++ reference point for
            # the replay benchmarks. (dopamine-rl, the other reference, is
            # installed with --no-deps as for 'test'.)
            'cpprb>=10.0',
            # The distributed section starts a local Ray and steps
            # CartPole actors against the single-process runner.
            'ray>=2.9',
            'gymnasium>=1.0',
            # The compression section (issue 33) measures zstd, at fast and
            # normal levels and with trained dictionaries, on Atari frames.
            'zstandard>=0.19',
            # ... and lz4 (default and HC), the fastest block decoder.
            'lz4>=4.0',
            # ... on frames it plays Atari for (ale-py ships the ROMs).
            'ale-py>=0.9',
        ],
    },
    # The gin configs ship inside the package (_BuildPyWithConfigs).
    cmdclass={'build_py': _BuildPyWithConfigs},
    entry_points={
        'console_scripts': [
            'dopamine-per-train = dopamine_per.discrete_domains.train:run',
            'dopamine-per-train-distributed = '
            'dopamine_per.distributed.train:run',
            'dopamine-per-plot = dopamine_per.plot:run',
            'dopamine-per-port-gin = dopamine_per.port_gin:main',
        ],
    },
    classifiers=[
        'Programming Language :: Python :: 3',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
    ],
)
