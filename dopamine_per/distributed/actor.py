# coding=utf-8
"""Ape-X actors: environments stepped by a copy of the learner's network.

An `Actor` (Horgan et al., 2018, "Distributed Prioritized Experience
Replay") runs one environment and the agent the learner's gin configuration
describes, in eval mode (acting only) with its own exploration rate as
``epsilon_eval``. Each transition goes to the sharded memory through the
actor's writer (stream = actor index) with priority None, the shard's
largest so far. Every ``weight_pull_period`` steps the actor asks a
`weights.WeightStore` for weights newer than its own.

`create_actors` starts them as Ray actors, restartable by Ray: a restarted
actor drops what its shard holds of the interrupted episode and starts a
fresh one with the newest published weights. See docs/distributed.md#actors.
"""

import functools
import os
import random
import time
import uuid
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import gin
import numpy as np
import ray
import tensorflow as tf

from dopamine_per.agents import dqn_agent
from dopamine_per.agents import network_variables
from dopamine_per.discrete_domains import atari_lib
from dopamine_per.discrete_domains import run_experiment
from dopamine_per.distributed import weights as weights_lib
from dopamine_per.replay_memory.memory import validation

__all__ = ['apex_epsilon', 'online_network_variables', 'read_weights',
           'WeightAssigner', 'Actor', 'create_actors',
           'DEFAULT_WEIGHT_PULL_PERIOD']

# Agent steps between an actor's asks for new weights: Ape-X's 400 frames
# (Horgan et al., 2018) at Atari's frame skip of 4.
DEFAULT_WEIGHT_PULL_PERIOD = 100


@gin.configurable
def apex_epsilon(actor_index: int, num_actors: int, base: float = 0.4,
                 exponent: float = 7.0) -> float:
  """Returns actor i's exploration rate, ``base ** (1 + exponent i / (N-1))``.

  Ape-X's schedule (Horgan et al., 2018: epsilon 0.4, alpha 7); a single
  actor gets `base`.

  Args:
    actor_index: int in [0, num_actors), the actor's number.
    num_actors: int >= 1, the number of actors.
    base: float in [0, 1], the largest rate.
    exponent: float >= 0, how far the rates spread (alpha in the paper).

  Returns:
    float, the exploration rate.

  Raises:
    ValueError: If an argument is out of range.
  """
  num_actors = validation.check_int('num_actors', num_actors, 1)
  actor_index = validation.check_int('actor_index', actor_index, 0)
  if actor_index >= num_actors:
    raise ValueError('actor_index must be < num_actors ({}), got {}'.format(
        num_actors, actor_index))
  if not 0.0 <= base <= 1.0 or not exponent >= 0.0:
    raise ValueError('Need 0 <= base <= 1 and exponent >= 0, got base {} and '
                     'exponent {}'.format(base, exponent))
  if num_actors == 1:
    return float(base)
  return float(base ** (1.0 + exponent * actor_index / (num_actors - 1)))


def online_network_variables(agent: Any, graph: tf.Graph
                            ) -> List[tf.Variable]:
  """Returns the `tf.Variable`s of an agent's online network, in order.

  Keras 3 variables are replaced by the `tf.Variable`s they wrap, which a
  session can fetch and assign.

  Args:
    agent: a DQNAgent or subclass (its ``online_convnet``, named 'Online').
    graph: tf.Graph, the agent's graph.
  """
  with graph.as_default():
    return network_variables.trainable_tf_variables(agent.online_convnet,
                                                    'Online')


def read_weights(sess: tf.compat.v1.Session,
                 variables: Sequence[tf.Variable]) -> List[np.ndarray]:
  """Returns the values (np.ndarrays) of `variables` in `sess`, in order."""
  return list(sess.run(list(variables)))


class WeightAssigner(object):
  """Assigns a list of arrays to a list of variables in one session call."""

  def __init__(self, sess: tf.compat.v1.Session,
               variables: Sequence[tf.Variable]):
    """Builds one placeholder and assign op per variable in sess's graph."""
    self._specs = [(v.name, tuple(v.shape.as_list()),
                    v.dtype.base_dtype.as_numpy_dtype) for v in variables]
    with sess.graph.as_default(), tf.name_scope('assign_weights'):
      placeholders = [
          tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape)
          for v in variables]
      assigns = [v.assign(p) for v, p in zip(variables, placeholders)]
    self._run = dqn_agent.fast_callable(sess, [], feeds=placeholders,
                                        targets=assigns)

  def assign(self, weights: Sequence[np.ndarray]) -> None:
    """Assigns `weights`, arrays in the variables' order and shapes.

    Raises:
      ValueError: If the count or a shape differs (the message names the
        variable); nothing is assigned then.
    """
    if len(weights) != len(self._specs):
      raise ValueError('Expected {} weight arrays, got {}'.format(
          len(self._specs), len(weights)))
    values = []
    for (name, shape, dtype), value in zip(self._specs, weights):
      value = np.asarray(value, dtype=dtype)
      if value.shape != shape:
        raise ValueError('Weights for {} have shape {}, expected {}'.format(
            name, value.shape, shape))
      values.append(value)
    self._run(*values)


def _drop_sharded_memory_binding() -> None:
  """Unbinds ``WrappedPrioritizedReplayBuffer.wrapped_memory`` if bound.

  The learner's configuration gives its agent the sharded memory; an
  actor's agent, built from the same configuration, stores nothing and must
  not start shards of its own, so it gets the wrapper's default memory.
  """
  selector = 'WrappedPrioritizedReplayBuffer.wrapped_memory'
  try:
    if gin.query_parameter(selector) is not None:
      gin.bind_parameter(selector, None)
  except ValueError:  # Not bound, or the wrapper's module is not loaded.
    pass


class Actor(object):
  """Steps an environment with the agent's network; writes its transitions.

  Plain Python; `create_actors` runs it as a Ray actor. Episodes continue
  across `run` calls.
  """

  def __init__(self,
               actor_index: int,
               epsilon: float,
               writer: Any,
               weight_store: Any,
               gin_config: str = '',
               create_environment_fn: Callable[[], Any] = (
                   atari_lib.create_atari_environment),
               create_agent_fn: Callable[..., Any] = (
                   run_experiment.create_agent),
               weight_pull_period: int = DEFAULT_WEIGHT_PULL_PERIOD,
               max_steps_per_episode: Optional[int] = 27000,
               clip_rewards: bool = True,
               seed: Optional[int] = None):
    """Parses the gin config, creates the environment and the agent.

    Args:
      actor_index: int, the actor's number (its writer's stream).
      epsilon: float, the exploration rate (e.g. `apex_epsilon`).
      writer: the sharded memory's writer (`writer.ShardWriter`), or any
        object with the single memory's `add`, a `flush` and (called when
        Ray restarted the actor) `discard_unfinished`.
      weight_store: a `weights.WeightStore` actor handle.
      gin_config: str, the learner's gin configuration (e.g.
        ``gin.config_str()``), parsed in this process (a Ray actor has its
        own gin); empty: use this process's configuration as it is.
      create_environment_fn: callable() returning an environment (as the
        Runner's: ``step`` returns (observation, reward, terminal, info),
        ``game_over`` says the episode is over).
      create_agent_fn: callable(sess, environment) returning a DQNAgent or
        subclass, as `run_experiment.create_agent`.
      weight_pull_period: int >= 1, agent steps between asks for new
        weights (the first before the first step).
      max_steps_per_episode: int or None, the episode length limit (agent
        steps); its last transition is stored as an episode end, not a
        terminal.
      clip_rewards: bool, store rewards clipped to [-1, 1] (as the Runner
        gives them to the agent; returns are not clipped).
      seed: int or None, seeds Python's and NumPy's generators (actions),
        the graph and the environment.
    """
    self._index = validation.check_int('actor_index', actor_index, 0)
    self._epsilon = float(epsilon)
    self._writer = writer
    self._store = weight_store
    self._pull_period = validation.check_int('weight_pull_period',
                                             weight_pull_period, 1)
    self._max_steps_per_episode = max_steps_per_episode
    self._clip_rewards = clip_rewards
    if gin_config:
      gin.parse_config(gin_config)
    _drop_sharded_memory_binding()
    if seed is not None:
      random.seed(seed)
      np.random.seed(seed)
    graph = tf.Graph()
    with graph.as_default():
      if seed is not None:
        tf.compat.v1.set_random_seed(seed)
      # One thread: an actor is given one CPU.
      self._sess = tf.compat.v1.Session(
          graph=graph, config=tf.compat.v1.ConfigProto(
              allow_soft_placement=True, intra_op_parallelism_threads=1,
              inter_op_parallelism_threads=1))
      self._environment = create_environment_fn()
      if seed is not None and hasattr(self._environment, 'seed'):
        self._environment.seed(seed)
      self._agent = create_agent_fn(self._sess, self._environment)
    # Acting only: eval mode neither stores nor trains.
    self._agent.eval_mode = True
    self._agent.epsilon_eval = self._epsilon
    self._variables = online_network_variables(self._agent, graph)
    self._assigner = WeightAssigner(self._sess, self._variables)
    self._weights_version = 0
    self._restarted = self._was_restarted()
    # Tells this process's results from those of an earlier (dead) one.
    self._incarnation = uuid.uuid4().hex
    if self._restarted:
      # The shard may hold the interrupted episode's first transitions.
      self._writer.discard_unfinished()
    self._total_steps = 0
    self._total_episodes = 0
    self._action = None  # None: the next step starts an episode.
    self._observation = None
    self._episode_steps = 0
    self._episode_return = 0.0

  @staticmethod
  def _was_restarted() -> bool:
    """Whether Ray restarted this actor (False outside a Ray actor)."""
    if not ray.is_initialized():
      return False
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:
      return False
    with warnings.catch_warnings():
      # Ray 2.60's property reads its own deprecated actor_id internally.
      warnings.simplefilter('ignore', DeprecationWarning)
      return bool(context.was_current_actor_reconstructed)

  def pull_weights(self) -> bool:
    """Assigns the store's weights if newer; returns whether it did."""
    version, weights = weights_lib.fetch_weights_if_newer(
        self._store, self._weights_version)
    if weights is None:
      return False
    self._assigner.assign(weights)
    self._weights_version = version
    return True

  def weights(self) -> List[np.ndarray]:
    """Returns the online network's current weights, in order."""
    return read_weights(self._sess, self._variables)

  def _write(self, reward: float, terminal: bool,
             episode_end: bool = False) -> None:
    """Writes (observation, action, reward, terminal) of the last step."""
    if self._clip_rewards:
      reward = np.clip(reward, -1, 1)
    self._writer.add(
        np.reshape(self._observation, self._agent.observation_shape),
        self._action, reward, bool(terminal), None, episode_end=episode_end)

  def _step(self) -> Optional[float]:
    """Plays one agent step; returns the episode's return if it ended."""
    if self._action is None:  # A new episode.
      self._observation = self._environment.reset()
      self._action = self._agent.begin_episode(self._observation)
      self._episode_steps = 0
      self._episode_return = 0.0
    observation, reward, is_terminal, _ = self._environment.step(self._action)
    self._episode_steps += 1
    self._episode_return += reward
    self._total_steps += 1
    if (self._environment.game_over or
        self._episode_steps == self._max_steps_per_episode):
      # A time limit (or a game cut without a terminal state) is an episode
      # end the memory does not bootstrap from.
      self._write(reward, is_terminal, episode_end=not is_terminal)
      self._action = None
      self._total_episodes += 1
      return self._episode_return
    self._write(reward, is_terminal)
    self._observation = observation
    if is_terminal:  # A lost life (terminal_on_life_loss): the game goes on.
      self._action = self._agent.begin_episode(observation)
    else:
      self._action = self._agent.step(reward, observation)
    return None

  def run(self, num_steps: int) -> Dict[str, Any]:
    """Plays `num_steps` agent steps (episodes continue across calls).

    Args:
      num_steps: int >= 0, agent steps to play.

    Returns:
      dict: ``actor_index``, ``epsilon``, ``steps`` and ``steps_per_second``
      (this call), ``episode_returns`` (undiscounted, of the episodes that
      ended in this call), ``total_steps`` and ``total_episodes`` (since
      this process started), ``weights_version`` (0: never pulled),
      ``restarted`` (by Ray), ``incarnation`` (new in every process Ray
      starts for the actor) and ``pid``.

    Raises:
      The writer's errors (e.g. `shard.ShardError` if its shard died).
    """
    num_steps = validation.check_int('num_steps', num_steps, 0)
    start = time.monotonic()
    returns = []
    for _ in range(num_steps):
      if self._total_steps % self._pull_period == 0:
        self.pull_weights()
      episode_return = self._step()
      if episode_return is not None:
        returns.append(float(episode_return))
    self._writer.flush()
    elapsed = max(time.monotonic() - start, 1e-9)
    return {
        'actor_index': self._index,
        'epsilon': self._epsilon,
        'steps': num_steps,
        'episode_returns': returns,
        'steps_per_second': num_steps / elapsed,
        'total_steps': self._total_steps,
        'total_episodes': self._total_episodes,
        'weights_version': self._weights_version,
        'restarted': self._restarted,
        'incarnation': self._incarnation,
        'pid': os.getpid(),
    }


@functools.lru_cache(maxsize=None)
def _actor_class() -> Any:
  """`Actor`'s Ray actor class, made on first use (not at import)."""
  return ray.remote(Actor)


@gin.configurable(denylist=['memory', 'weight_store', 'gin_config'])
def create_actors(memory: Any,
                  weight_store: Any,
                  gin_config: str,
                  num_actors: int = 2,
                  create_environment_fn: Callable[[], Any] = (
                      atari_lib.create_atari_environment),
                  create_agent_fn: Callable[..., Any] = (
                      run_experiment.create_agent),
                  weight_pull_period: int = DEFAULT_WEIGHT_PULL_PERIOD,
                  max_steps_per_episode: Optional[int] = 27000,
                  clip_rewards: bool = True,
                  epsilon_fn: Callable[[int, int], float] = apex_epsilon,
                  num_cpus_per_actor: float = 1.0,
                  max_restarts: int = 3,
                  seed: Optional[int] = None) -> List[Any]:
  """Starts `num_actors` Ray actors, actor i writing stream i of `memory`.

  Args:
    memory: the sharded memory (its ``writer(stream_id)``).
    weight_store: a `weights.WeightStore` actor handle.
    gin_config: str, the learner's gin configuration (``gin.config_str()``),
      parsed in each actor's process.
    num_actors: int >= 1.
    create_environment_fn: see `Actor`; the learner's (Runner's) factory.
    create_agent_fn: see `Actor`.
    weight_pull_period: int, agent steps between asks for new weights.
    max_steps_per_episode: see `Actor`.
    clip_rewards: see `Actor`.
    epsilon_fn: callable(actor_index, num_actors) giving actor i's
      exploration rate (Ape-X's `apex_epsilon`, evaluated here, in the
      learner's gin configuration).
    num_cpus_per_actor: float, the CPUs Ray reserves for each actor.
    max_restarts: int, how often Ray restarts an actor that died (-1: no
      limit) and plays its queued calls again; a restarted actor starts a
      fresh episode.
    seed: int or None; actor i gets seed + i.

  Returns:
    list of Ray actor handles, in actor order.
  """
  num_actors = validation.check_int('num_actors', num_actors, 1)
  # Ray plays the calls a dead actor had queued again in its new process.
  actor_class = _actor_class().options(num_cpus=num_cpus_per_actor,
                                       max_restarts=max_restarts,
                                       max_task_retries=max_restarts)
  return [
      actor_class.remote(
          i, epsilon_fn(i, num_actors), memory.writer(i), weight_store,
          gin_config, create_environment_fn=create_environment_fn,
          create_agent_fn=create_agent_fn,
          weight_pull_period=weight_pull_period,
          max_steps_per_episode=max_steps_per_episode,
          clip_rewards=clip_rewards,
          seed=None if seed is None else seed + i)
      for i in range(num_actors)]
