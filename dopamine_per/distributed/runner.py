# coding=utf-8
"""The Ape-X runner: actors feed a sharded memory, the learner trains from it.

`ApexRunner` is `run_experiment.Runner` with its training phase spread over
processes (Horgan et al., 2018): Ray actors (`actor.Actor`) write into the
sharded memory while this process trains on batches sampled from all shards
and publishes its weights. Everything else (gin parameters, evaluation,
logs, checkpoints, resuming) is the Runner's. An actor that dies is
restarted by Ray; a shard that dies ends the run with `shard.ShardError`.
See docs/distributed.md#the-trainer.
"""

import time
from typing import Any, Callable, Dict, List, Optional

from absl import logging
import gin
import numpy as np
import ray

from dopamine_per.discrete_domains import atari_lib
from dopamine_per.discrete_domains import run_experiment
from dopamine_per.distributed import actor as actor_lib
from dopamine_per.distributed import replay
from dopamine_per.distributed import shard
from dopamine_per.distributed import weights as weights_lib
from dopamine_per.replay_memory.memory import validation

__all__ = ['ApexRunner', 'create_apex_runner', 'ActorFailedError']

# How long the learner waits for an actor's result when it cannot train
# (seconds): a bound, not a pace; a result ends the wait at once.
_WAIT_FOR_ACTORS_S = 1.0
# While it trains, how often the learner looks for actors' results (seconds).
_POLL_ACTORS_S = 0.005


class ActorFailedError(RuntimeError):
  """An actor died more often than Ray may restart it."""


@gin.configurable
class ApexRunner(run_experiment.Runner):
  """A Runner whose training phase is played by Ray actors (Ape-X).

  The agent must be built on a sharded memory, through gin:
  ``WrappedPrioritizedReplayBuffer.wrapped_memory =
  @ShardedPrioritizedReplayBuffer()`` (configs/apex_cartpole.gin).
  """

  def __init__(self,
               base_dir: str,
               create_agent_fn: Callable[..., Any],
               create_environment_fn: Callable[[], Any] = (
                   atari_lib.create_atari_environment),
               num_actors: int = 2,
               actor_steps_per_call: int = 100,
               learner_steps_per_actor_step: Optional[float] = None,
               weight_publish_period: int = 10,
               max_actor_restarts: int = 3):
    """Builds the learner (the Runner's set-up, resuming), then the actors.

    The other parameters are the Runner's, from gin (``Runner.*``).

    Args:
      base_dir: str, the experiment directory.
      create_agent_fn: callable(sess, environment, summary_writer=...)
        returning the agent (e.g. `run_experiment.create_agent`); the
        learner builds it here and every actor again from the same gin
        configuration.
      create_environment_fn: callable() returning an environment, for the
        learner's evaluation and for every actor.
      num_actors: int >= 1, the Ray actors that play the training phases.
      actor_steps_per_call: int >= 1, agent steps an actor plays per remote
        call (its transitions reach the memory by the call's end).
      learner_steps_per_actor_step: float > 0 or None; the learner makes
        this many training steps (agent `train_step` calls) per agent step
        the actors played, waiting for them when ahead and catching up at
        the phase's end (0.25 with update_period 1 trains as often as a
        single-machine agent with update_period 4). None: as many as it can
        while the actors play (Ape-X's free-running learner).
      weight_publish_period: int >= 1, training steps between weight
        publications to the actors.
      max_actor_restarts: int >= 0, how often Ray restarts each actor that
        died, playing its queued calls again; one more death fails the run
        (`ActorFailedError`).

    Raises:
      ValueError: If an argument is out of range, or the agent's memory is
        not a `ShardedPrioritizedReplayBuffer`.
    """
    self._num_actors = validation.check_int('num_actors', num_actors, 1)
    self._actor_steps_per_call = validation.check_int(
        'actor_steps_per_call', actor_steps_per_call, 1)
    if learner_steps_per_actor_step is not None and not (
        np.isfinite(learner_steps_per_actor_step) and
        learner_steps_per_actor_step > 0):
      raise ValueError('learner_steps_per_actor_step must be a positive '
                       'number or None, got {!r}'.format(
                           learner_steps_per_actor_step))
    self._learner_ratio = learner_steps_per_actor_step
    self._publish_period = validation.check_int(
        'weight_publish_period', weight_publish_period, 1)
    self._max_actor_restarts = validation.check_int(
        'max_actor_restarts', max_actor_restarts, 0)
    self._actors = []
    self._memory = None
    super().__init__(base_dir, create_agent_fn,
                     create_environment_fn=create_environment_fn)
    self._memory = getattr(self._agent, 'replay_memory', None)
    if not isinstance(self._memory, replay.ShardedPrioritizedReplayBuffer):
      raise ValueError(
          'ApexRunner needs an agent on a sharded memory: bind '
          'WrappedPrioritizedReplayBuffer.wrapped_memory = '
          '@ShardedPrioritizedReplayBuffer() (got {})'.format(
              type(self._memory).__name__))
    self._variables = actor_lib.online_network_variables(self._agent,
                                                         self._sess.graph)
    self._weight_store = weights_lib.create_weight_store()
    self._publish_weights()  # Actors start with the learner's weights.
    self._incarnations = [set() for _ in range(self._num_actors)]
    self._actor_restarts = 0
    self._actors = actor_lib.create_actors(
        self._memory, self._weight_store, gin.config_str(),
        num_actors=self._num_actors,
        create_environment_fn=create_environment_fn,
        create_agent_fn=create_agent_fn,
        max_steps_per_episode=self._max_steps_per_episode,
        clip_rewards=self._clip_rewards,
        max_restarts=self._max_actor_restarts,
        seed=None if self._seed is None else self._seed + 1)
    # Waits for the actors to start (TensorFlow, the agent, the environment:
    # seconds each), so that a failing start surfaces here and the first
    # iteration's rates do not include it.
    for index, ref in enumerate([a.run.remote(0) for a in self._actors]):
      self._collect(ref, index)

  @property
  def actor_handles(self) -> List[Any]:
    """The actors' Ray handles, in actor order (for monitoring and tests)."""
    return list(self._actors)

  @property
  def memory(self) -> replay.ShardedPrioritizedReplayBuffer:
    """The learner's sharded memory."""
    return self._memory

  def _publish_weights(self) -> None:
    weights_lib.publish_weights(
        self._weight_store, actor_lib.read_weights(self._sess,
                                                   self._variables))

  # ------------------------------------------------------------- learner

  def _learner_may_train(self, learner_steps: int, actor_steps: int) -> bool:
    """Whether the memory can be sampled and the learner is not ahead."""
    # The agent's own test, which asks the shards until it first holds.
    if not self._agent.holds_min_replay_history():
      return False
    return (self._learner_ratio is None or
            learner_steps < self._learner_ratio * actor_steps)

  def _learner_step(self, learner_steps: int) -> int:
    """One agent training step; publishes weights every few. Returns count."""
    # The agent's own step (its update_period, target syncs, summaries).
    self._agent.train_step()
    learner_steps += 1
    if learner_steps % self._publish_period == 0:
      self._publish_weights()
    return learner_steps

  # -------------------------------------------------------------- actors

  def _submit(self, index: int, pending: Dict[Any, int],
              submitted: int) -> int:
    """Gives actor `index` a call unless the phase's steps are all given.

    Returns:
      int, the agent steps given to the actors so far.
    """
    if submitted >= self._training_steps:
      return submitted
    pending[self._actors[index].run.remote(self._actor_steps_per_call)] = (
        index)
    return submitted + self._actor_steps_per_call

  def _collect(self, ref: Any, index: int) -> Optional[Dict[str, Any]]:
    """Returns an actor call's statistics, or None if the call was lost.

    Ray restarts a dead actor and plays the calls it had queued again, but
    a call in flight when the actor was killed through Ray (``ray.kill``),
    or whose retries ran out, fails: then the actor is asked for an empty
    call, which waits for the restarted process, and None says the call's
    steps must be played again. Each process reports its own
    ``incarnation``, which counts restarts.

    Raises:
      shard.ShardError: If the actor's shard died (it names the shard).
      ActorFailedError: If the actor died and Ray may not restart it again.
    """
    try:
      result = ray.get(ref)
    except ray.exceptions.RayTaskError as error:
      if isinstance(error.cause, shard.ShardError):
        # The actor met the dead shard first: its error, as the learner's.
        raise error.cause from None
      raise
    except ray.exceptions.RayActorError:
      try:
        self._note_incarnation(ray.get(self._actors[index].run.remote(0)),
                               index)
      except ray.exceptions.RayActorError as error:
        cause = str(error).strip() or type(error).__name__
        raise ActorFailedError(
            'actor {} died and cannot be restarted (at most '
            'ApexRunner.max_actor_restarts={} restarts): {}'.format(
                index, self._max_actor_restarts,
                cause.splitlines()[0])) from error
      logging.warning('Actor %d lost a call; it is played again.', index)
      return None
    self._note_incarnation(result, index)
    return result

  def _note_incarnation(self, result: Dict[str, Any], index: int) -> None:
    incarnations = self._incarnations[index]
    if result['incarnation'] not in incarnations:
      incarnations.add(result['incarnation'])
      if len(incarnations) > 1:
        self._actor_restarts += 1
        logging.warning('Actor %d was restarted by Ray.', index)

  def _run_train_phase(self, statistics):
    """Lets the actors play training_steps agent steps while learning.

    Each actor keeps two calls of actor_steps_per_call steps queued, so it
    never waits for the learner; the learner trains between results.

    Returns:
      (number of episodes, average return, actor agent steps per second).
    """
    self._agent.eval_mode = False
    start = time.time()
    restarts_before = self._actor_restarts
    actor_steps, learner_steps, submitted = 0, 0, 0
    returns = []
    pending = {}
    for _ in range(2):  # Calls queued per actor.
      for index in range(self._num_actors):
        submitted = self._submit(index, pending, submitted)
    self._progress = {'steps': 0, 'start': time.monotonic(), 'returns': returns,
                      'phase': 'train', 'target': self._training_steps,
                      'iteration': getattr(self, '_iteration', 0)}
    next_poll = 0.0
    while pending:
      may_train = self._learner_may_train(learner_steps, actor_steps)
      ready = []
      if not may_train or time.monotonic() >= next_poll:
        ready, _ = ray.wait(list(pending), num_returns=1,
                            timeout=0 if may_train else _WAIT_FOR_ACTORS_S)
        next_poll = time.monotonic() + _POLL_ACTORS_S
      for ref in ready:
        index = pending.pop(ref)
        result = self._collect(ref, index)
        if result is None:
          submitted -= self._actor_steps_per_call
        else:
          actor_steps += result['steps']
          for episode_return in result['episode_returns']:
            returns.append(episode_return)
            statistics.append({'train_episode_returns': episode_return})
        submitted = self._submit(index, pending, submitted)
        self._progress['steps'] = actor_steps
        self._show_progress()
      if may_train:
        learner_steps = self._learner_step(learner_steps)
    while (self._learner_ratio is not None and
           self._learner_may_train(learner_steps, actor_steps)):
      learner_steps = self._learner_step(learner_steps)
    self._progress = None
    elapsed = max(time.time() - start, 1e-9)
    average_return = float(np.mean(returns)) if returns else 0.0
    statistics.append({
        'train_average_return': average_return,
        'train_average_steps_per_second': actor_steps / elapsed,
        'learner_steps_per_second': learner_steps / elapsed,
        'learner_steps': learner_steps,
        'actor_steps': actor_steps,
        'actor_restarts': self._actor_restarts - restarts_before,
    })
    self._learner_steps_per_second = learner_steps / elapsed
    logging.info('Average training return %.2f, %.1f actor steps/s, %.1f '
                 'learner steps/s', average_return, actor_steps / elapsed,
                 learner_steps / elapsed)
    return len(returns), average_return, actor_steps / elapsed

  # ------------------------------------------------------ logs, shut down

  def _save_tensorboard_summaries(self, iteration, num_episodes_train,
                                  average_reward_train, num_episodes_eval,
                                  average_reward_eval,
                                  average_steps_per_second):
    super()._save_tensorboard_summaries(
        iteration, num_episodes_train, average_reward_train,
        num_episodes_eval, average_reward_eval, average_steps_per_second)
    self._write_summary(iteration, {
        'Train/LearnerStepsPerSecond': self._learner_steps_per_second})

  def _summary_text(self, record: Dict[str, Any]) -> str:
    text = super()._summary_text(record)
    if 'learner_steps_per_second' in record:
      text += ' | learner {:.0f} steps/s'.format(
          record['learner_steps_per_second'])
    return text

  def close(self) -> None:
    """Kills the actors and the shards (their data is lost). Idempotent."""
    for handle in self._actors:
      ray.kill(handle, no_restart=True)
    self._actors = []
    if self._memory is not None:
      self._memory.close()

  def run_experiment(self):
    """Runs the iterations, then kills the actors and the shards."""
    try:
      super().run_experiment()
    finally:
      self.close()


def create_apex_runner(base_dir: str) -> ApexRunner:
  """Returns `ApexRunner(base_dir, run_experiment.create_agent)`.

  The trainer's factory (`distributed.train`); the other arguments come
  from gin.
  """
  return ApexRunner(base_dir, run_experiment.create_agent)
