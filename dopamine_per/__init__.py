"""dopamine_per: prioritized experience replay for TensorFlow.

A drop-in replacement for Google Dopamine's TensorFlow replay memories
(``dopamine.tf.replay_memory``) with a vectorized, exact sum tree.
"""

# setup.py reads it; CHANGELOG.md lists what each version changed.
__version__ = '0.1.0'
