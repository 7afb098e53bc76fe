"""Dopamine-style gin files, ported with port_gin, train with our trainer.

For each of Dopamine's TF agents and each domain Dopamine configures, the
test writes a small gin file as Dopamine's configs are written, ports it
with `python -m dopamine_per.port_gin`, and runs one short iteration of
`python -m dopamine_per.discrete_domains.train` on it, which must train and
write its statistics.
"""

import concurrent.futures
import json
import os
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized

from tests.support import fixtures

# Per agent: Dopamine's import lines, the agent's gin name, its replay
# memory's gin name, the create_agent name, and agent-specific bindings.
_AGENTS = {
    'dqn': dict(
        imports=['dopamine.tf.agents.dqn.dqn_agent',
                 'dopamine.tf.replay_memory.circular_replay_buffer'],
        agent='DQNAgent', replay='WrappedReplayBuffer', name='dqn',
        bindings=[]),
    'c51': dict(
        imports=['dopamine.tf.agents.dqn.dqn_agent',
                 'dopamine.tf.agents.rainbow.rainbow_agent',
                 'dopamine.tf.replay_memory.prioritized_replay_buffer'],
        agent='RainbowAgent', replay='WrappedPrioritizedReplayBuffer',
        name='rainbow',
        bindings=['RainbowAgent.num_atoms = 51', 'RainbowAgent.vmax = 10.',
                  "RainbowAgent.replay_scheme = 'uniform'"]),
    'rainbow': dict(
        imports=['dopamine.tf.agents.dqn.dqn_agent',
                 'dopamine.tf.agents.rainbow.rainbow_agent',
                 'dopamine.tf.replay_memory.prioritized_replay_buffer'],
        agent='RainbowAgent', replay='WrappedPrioritizedReplayBuffer',
        name='rainbow',
        bindings=['RainbowAgent.num_atoms = 51', 'RainbowAgent.vmax = 10.',
                  'RainbowAgent.update_horizon = 3',
                  "RainbowAgent.replay_scheme = 'prioritized'"]),
    # Dopamine's IQN configs bind the shared arguments on RainbowAgent.
    'implicit_quantile': dict(
        imports=['dopamine.tf.agents.implicit_quantile.'
                 'implicit_quantile_agent',
                 'dopamine.tf.agents.rainbow.rainbow_agent',
                 'dopamine.tf.replay_memory.prioritized_replay_buffer'],
        agent='RainbowAgent', replay='WrappedPrioritizedReplayBuffer',
        name='implicit_quantile',
        bindings=['ImplicitQuantileAgent.kappa = 1.0',
                  'ImplicitQuantileAgent.num_tau_samples = 8',
                  'ImplicitQuantileAgent.num_tau_prime_samples = 8',
                  'ImplicitQuantileAgent.num_quantile_samples = 4',
                  'RainbowAgent.update_horizon = 3',
                  "RainbowAgent.replay_scheme = 'uniform'"]),
}

# Per domain: Dopamine's environment bindings and, per agent kind, the
# network Dopamine's configs (or, where Dopamine has none, ours) bind.
_DOMAINS = {
    'cartpole': dict(
        gym=('CartPole', 'v0', 'CARTPOLE'),
        networks={'dqn': '@gym_lib.CartpoleDQNNetwork',
                  'rainbow': '@gym_lib.CartpoleRainbowNetwork',
                  'implicit_quantile':
                      '@gym_lib.CartpoleImplicitQuantileNetwork'}),
    'acrobot': dict(
        gym=('Acrobot', 'v1', 'ACROBOT'),
        networks={'dqn': '@legacy_networks.AcrobotDQNNetwork',
                  'rainbow': '@legacy_networks.AcrobotRainbowNetwork',
                  'implicit_quantile':
                      '@gym_lib.AcrobotImplicitQuantileNetwork'}),
    'mountaincar': dict(
        gym=('MountainCar', 'v0', 'MOUNTAINCAR'),
        networks={'dqn': '@legacy_networks.MountainCarDQNNetwork',
                  'rainbow': '@gym_lib.MountainCarRainbowNetwork',
                  'implicit_quantile':
                      '@gym_lib.MountainCarImplicitQuantileNetwork'}),
    'lunarlander': dict(
        gym=('LunarLander', 'v2', 'LUNAR'),  # gymnasium has only v3 now.
        networks={'dqn': '@gym_lib.LunarLanderDQNNetwork',
                  'rainbow': '@gym_lib.LunarLanderRainbowNetwork',
                  'implicit_quantile':
                      '@gym_lib.LunarLanderImplicitQuantileNetwork'}),
    'atari': dict(gym=None, networks={}),  # Dopamine's Atari defaults.
}

# One short iteration: enough steps to pass min_replay_history and train.
_RUN_BINDINGS = [
    'Runner.num_iterations = 1',
    'Runner.training_steps = 120',  # agent steps
    'Runner.evaluation_steps = 30',  # agent steps
    'Runner.max_steps_per_episode = 60',  # agent steps
]


def dopamine_style_config(agent_kind, domain):
  """Returns the text of a gin file as Dopamine's configs are written."""
  agent, env = _AGENTS[agent_kind], _DOMAINS[domain]
  network_kind = 'rainbow' if agent_kind == 'c51' else agent_kind
  imports = list(agent['imports'])
  lines = []
  cls = agent['agent']
  if env['gym'] is not None:
    gym_name, version, constants = env['gym']
    imports = ['dopamine.discrete_domains.gym_lib'] + imports
    network = env['networks'][network_kind]
    if network.startswith('@legacy_networks.'):
      imports.insert(1, 'dopamine.discrete_domains.legacy_networks')
    network_owner = ('ImplicitQuantileAgent'
                     if agent_kind == 'implicit_quantile' else cls)
    lines += [
        '{}.observation_shape = %gym_lib.{}_OBSERVATION_SHAPE'.format(
            cls, constants),
        '{}.observation_dtype = %gym_lib.{}_OBSERVATION_DTYPE'.format(
            cls, constants),
        '{}.stack_size = %gym_lib.{}_STACK_SIZE'.format(cls, constants),
        '{}.network = {}'.format(network_owner, network),
        "create_gym_environment.environment_name = '{}'".format(gym_name),
        "create_gym_environment.version = '{}'".format(version),
        'Runner.create_environment_fn = @gym_lib.create_gym_environment',
    ]
    min_history, replay_capacity = 40, 5000
  else:
    imports = ['dopamine.discrete_domains.atari_lib'] + imports
    lines += [
        "atari_lib.create_atari_environment.game_name = 'Pong'",
        'atari_lib.create_atari_environment.sticky_actions = True',
    ]
    min_history, replay_capacity = 40, 1000
  imports += ['dopamine.discrete_domains.run_experiment',
              'gin.tf.external_configurables']
  lines += agent['bindings'] + [
      '{}.gamma = 0.99'.format(cls),
      '{}.min_replay_history = {}  # agent steps'.format(cls, min_history),
      '{}.update_period = 4'.format(cls),
      '{}.target_update_period = 50  # agent steps'.format(cls),
      '{}.epsilon_fn = @dqn_agent.identity_epsilon'.format(cls)
      if agent_kind != 'implicit_quantile' else
      '{}.epsilon_train = 0.01'.format(cls),
      "{}.tf_device = '/cpu:*'".format(cls),
      '{}.optimizer = @tf.train.AdamOptimizer()'.format(cls),
      'tf.train.AdamOptimizer.learning_rate = 0.001',
      'tf.train.AdamOptimizer.epsilon = 0.0003125',
      "create_agent.agent_name = '{}'".format(agent['name']),
      '{}.replay_capacity = {}'.format(agent['replay'], replay_capacity),
      '{}.batch_size = 32'.format(agent['replay']),
  ] + _RUN_BINDINGS
  header = ['# A Dopamine-style config for {} on {}.'.format(agent_kind,
                                                            domain)]
  return '\n'.join(header + ['import ' + module for module in imports] +
                   [''] + lines) + '\n'


def port_and_train(agent_kind, domain, directory):
  """Writes, ports and trains one config; returns (record, log)."""
  original = os.path.join(directory, 'dopamine.gin')
  with open(original, 'w') as f:
    f.write(dopamine_style_config(agent_kind, domain))
  ported = subprocess.run(
      [sys.executable, '-m', 'dopamine_per.port_gin', original],
      capture_output=True, text=True, env=fixtures.subprocess_env(),
      cwd=directory, timeout=120)
  if ported.returncode:
    return None, 'port_gin failed:\n' + ported.stderr
  ported_path = os.path.join(directory, 'ported.gin')
  with open(ported_path, 'w') as f:
    f.write(ported.stdout)
  base_dir = os.path.join(directory, 'run')
  trained = subprocess.run(
      [sys.executable, '-m', 'dopamine_per.discrete_domains.train',
       '--base_dir=' + base_dir, '--gin_files=' + ported_path],
      capture_output=True, text=True, env=fixtures.subprocess_env(),
      cwd=directory, timeout=600)
  log = 'stdout:\n{}\nstderr:\n{}'.format(trained.stdout[-3000:],
                                         trained.stderr[-6000:])
  if trained.returncode:
    return None, 'train failed ({}):\n{}'.format(trained.returncode, log)
  with open(os.path.join(base_dir, 'logs', 'statistics.jsonl')) as f:
    records = [json.loads(line) for line in f if line.strip()]
  return records, log


class DopamineConfigsTest(parameterized.TestCase):

  def test_configs_are_written_as_dopamine_writes_them(self):
    text = dopamine_style_config('rainbow', 'acrobot')
    self.assertIn('import dopamine.tf.agents.rainbow.rainbow_agent\n', text)
    self.assertIn('import dopamine.discrete_domains.legacy_networks\n', text)
    self.assertIn('import gin.tf.external_configurables\n', text)
    self.assertIn(
        'RainbowAgent.network = @legacy_networks.AcrobotRainbowNetwork\n',
        text)
    self.assertNotIn('dopamine_per', text)

  def test_every_agent_on_every_domain(self):
    cases = [(agent, domain) for domain in _DOMAINS for agent in _AGENTS]
    root = fixtures.temp_dir(self)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
      futures = {}
      for agent, domain in cases:
        directory = os.path.join(root, '{}_{}'.format(agent, domain))
        os.makedirs(directory)
        futures[(agent, domain)] = pool.submit(port_and_train, agent, domain,
                                               directory)
      for (agent, domain), future in futures.items():
        with self.subTest(agent=agent, domain=domain):
          records, log = future.result()
          self.assertIsNotNone(records, log)
          self.assertLen(records, 1, log)
          record = records[0]
          self.assertGreater(record['train_episodes'], 0, log)
          self.assertGreater(record['eval_episodes'], 0, log)
          self.assertGreaterEqual(record['training_steps'], 120, log)


if __name__ == '__main__':
  absltest.main()
