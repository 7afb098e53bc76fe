"""Test helper: a tiny Rainbow agent on CartPole, for tests that run a Runner.

`BINDINGS` shrink ``configs/rainbow_cartpole.gin`` (`GIN_FILE`) so that an
iteration takes well under a second: enough for the tests of checkpoints,
resuming and logs, not for learning (tests/learning_test.py checks that).
"""

import os

__all__ = ['GIN_FILE', 'BINDINGS']

GIN_FILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'configs',
    'rainbow_cartpole.gin')

BINDINGS = (
    'gym_lib.CartpoleRainbowNetwork.hidden_units = (8,)',
    'RainbowAgent.min_replay_history = 20',
    'WrappedPrioritizedReplayBuffer.replay_capacity = 500',
    'WrappedPrioritizedReplayBuffer.batch_size = 8',
    'Runner.training_steps = 100',
    'Runner.evaluation_steps = 10',
    'Runner.max_steps_per_episode = 50',
    'Runner.fine_grained_print_to_console = False',
)
