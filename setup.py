"""Packaging for dopamine_per, a prioritized replay memory for TensorFlow.

Install for use:         pip install .
Install for development: bash scripts/test.sh   (creates .venv, see README.md)
"""

import setuptools

setuptools.setup(
    name='dopamine_per',
    version='0.1.0',
    description=(
        'Prioritized experience replay for TensorFlow: a vectorized sum tree '
        "and drop-in replacements for Google Dopamine's replay memories."
    ),
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    packages=setuptools.find_packages(
        exclude=['tests', 'tests.*', 'benchmarks', 'benchmarks.*']),
    python_requires='>=3.9',
    install_requires=[
        # The Wrapped* buffers build graph ops with tf.numpy_function (TF 2.x
        # under tf.compat.v1, as Dopamine's TF agents run).
        'tensorflow>=2.12',
        # The sum tree and the OutOfGraph* buffers are NumPy code.
        'numpy>=1.22',
        # The buffers are gin-configurable, as Dopamine's are.
        'gin-config>=0.5.0',
        # Flags, logging and the absltest-based tests and demo.
        'absl-py>=1.0',
    ],
    extras_require={
        'test': [
            # The test runner used by scripts/test.sh.
            'pytest>=7.0',
            # Property-based tests: random operation sequences on the sum
            # tree and the buffers, checked against their invariants.
            'hypothesis>=6.0',
            # The tests run the sum tree with both kernels, NumPy and Numba,
            # and check that they agree bit for bit.
            'numba>=0.59',
            # The agent and runner tests train on CartPole (gymnasium) and
            # run a Rainbow smoke test on Pong (ale-py ships the ROMs).
            'gymnasium>=1.0',
            'ale-py>=0.9',
            # The benchmark smoke tests drive cpprb, a peer of the benchmarks
            # (tests must not skip when it is missing).
            'cpprb>=10.0',
            # Not listed: dopamine-rl==4.1.2, the reference implementation
            # the compatibility tests compare against. Its own requirements
            # pull in JAX, Flax, gym and more that it does not need for
            # dopamine.tf.replay_memory, so scripts/test.sh installs it with
            # `pip install --no-deps`.
        ],
        'gym': [
            # Classic-control environments (CartPole, Acrobot, ...) for
            # dopamine_per.discrete_domains.gym_lib and the CartPole configs.
            'gymnasium>=1.0',
        ],
        'atari': [
            # Atari 2600 games for dopamine_per.discrete_domains.atari_lib;
            # ale-py ships the ROMs. Frames are resized in NumPy, so OpenCV
            # is not needed.
            'gymnasium>=1.0',
            'ale-py>=0.9',
        ],
        'fast': [
            # Compiles the sum tree's two hot loops (dopamine_per/
            # replay_memory/sum_tree_kernels.py), with results bit-identical
            # to the NumPy path: several times faster on batches of 32-256.
            'numba>=0.59',
        ],
        'bench': [
            # cpprb's PrioritizedReplayBuffer is a C++ reference point for
            # the replay benchmarks. (dopamine-rl, the other reference, is
            # installed with --no-deps as for 'test'.)
            'cpprb>=10.0',
            # Both sum tree kernels are measured.
            'numba>=0.59',
        ],
    },
    classifiers=[
        'Programming Language :: Python :: 3',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
    ],
)
