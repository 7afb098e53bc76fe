# coding=utf-8
"""The experiment runner, as Dopamine's ``run_experiment``.

Same names and gin parameters as ``dopamine.discrete_domains.run_experiment``
(Dopamine 4.1.2): `load_gin_configs`, `create_agent`, `create_runner`,
`Runner` and `TrainRunner`. An iteration is a training phase of at least
``training_steps`` agent steps in whole episodes, then (`Runner`) an
evaluation phase, then logging and a checkpoint, switched into place as a
whole (`checkpointer.Checkpointer.commit_checkpoint`). The Runner resumes
after the newest complete checkpoint that loads (`experiment_resume`) and
never silently restarts. What differs from Dopamine:
docs/compat.md#run_experiment.
"""

import concurrent.futures
import copy
import inspect
import os
import random
import sys
import time
from typing import Any, Dict, Optional, Sequence

from absl import logging
import gin
import numpy as np
import tensorflow as tf

from dopamine_per.agents import dqn_agent
from dopamine_per.agents import implicit_quantile_agent
from dopamine_per.agents import rainbow_agent
from dopamine_per.discrete_domains import atari_lib
from dopamine_per.discrete_domains import checkpointer
from dopamine_per.discrete_domains import experiment_resume
from dopamine_per.discrete_domains import iteration_statistics
from dopamine_per.discrete_domains import learning_curve
from dopamine_per.discrete_domains import logger
from dopamine_per.file_io import atomic_files

__all__ = ['load_gin_configs', 'create_agent', 'create_runner', 'Runner',
           'TrainRunner', 'StatusLine']


def load_gin_configs(gin_files: Sequence[str],
                     gin_bindings: Sequence[str]) -> None:
  """Parses gin files, then bindings (later ones override earlier ones).

  Args:
    gin_files: list of str, paths of gin files.
    gin_bindings: list of str, bindings such as
      ``"Runner.num_iterations = 10"``.

  Raises:
    FileNotFoundError: If a gin file does not exist.
    ValueError: If a file or binding does not parse or names an unknown
      configurable or parameter; the message names the culprit.
  """
  gin_files = list(gin_files or [])
  gin_bindings = list(gin_bindings or [])
  missing = [path for path in gin_files if not tf.io.gfile.exists(path)]
  if missing:
    raise FileNotFoundError('gin file not found: {}'.format(
        ', '.join(missing)))
  for path in gin_files:
    try:
      gin.parse_config_file(path, skip_unknown=False)
    except (ValueError, ImportError, SyntaxError) as e:
      raise ValueError('Error in gin file {}: {}'.format(path, e)) from e
  for binding in gin_bindings:
    try:
      gin.parse_config(binding, skip_unknown=False)
    except (ValueError, ImportError, SyntaxError) as e:
      raise ValueError(
          'Invalid gin binding {!r}: {} (bindings name a configurable and '
          'one of its parameters, e.g. "Runner.num_iterations = 10").'.format(
              binding, e)) from e


@gin.configurable
def create_agent(sess, environment, agent_name=None, summary_writer=None,
                 debug_mode=False):
  """Creates the agent named `agent_name` for `environment`.

  Args:
    sess: tf.compat.v1.Session or None (the agent creates one).
    environment: the environment (its ``action_space.n`` is the number of
      actions).
    agent_name: str, 'dqn' (or any name starting with it), 'rainbow' or
      'implicit_quantile' (IQN). C51 is 'rainbow' with uniform replay and
      1-step returns (c51.gin).
    summary_writer: passed to the agent when debug_mode is True.
    debug_mode: bool, let the agent write training summaries (slower).

  Returns:
    The agent.

  Raises:
    ValueError: If agent_name is None or unknown.
  """
  if agent_name is None:
    raise ValueError('create_agent needs an agent_name, e.g. '
                     "create_agent.agent_name = 'rainbow'.")
  if not debug_mode:
    summary_writer = None
  num_actions = environment.action_space.n
  if agent_name.startswith('dqn'):
    return dqn_agent.DQNAgent(sess, num_actions=num_actions,
                              summary_writer=summary_writer)
  if agent_name == 'rainbow':
    return rainbow_agent.RainbowAgent(sess, num_actions=num_actions,
                                      summary_writer=summary_writer)
  if agent_name == 'implicit_quantile':
    return implicit_quantile_agent.ImplicitQuantileAgent(
        sess, num_actions=num_actions, summary_writer=summary_writer)
  raise ValueError('Unknown agent: {}'.format(agent_name))


@gin.configurable
def create_runner(base_dir, schedule='continuous_train_and_eval'):
  """Creates the runner for `schedule`.

  Args:
    base_dir: str, the experiment directory.
    schedule: str, 'continuous_train_and_eval' (`Runner`) or
      'continuous_train' (`TrainRunner`).

  Returns:
    The runner.

  Raises:
    ValueError: If base_dir is None or the schedule is unknown.
  """
  if base_dir is None:
    raise ValueError('create_runner needs a base_dir.')
  if schedule == 'continuous_train_and_eval':
    return Runner(base_dir, create_agent)
  if schedule == 'continuous_train':
    return TrainRunner(base_dir, create_agent)
  raise ValueError('Unknown schedule: {}'.format(schedule))


def _accepts(function: Any, name: str) -> bool:
  """Whether `function` has a parameter called `name`."""
  try:
    return name in inspect.signature(function).parameters
  except (TypeError, ValueError):
    return False


class StatusLine(object):
  """A single console line, rewritten in place, for the live progress.

  On a terminal the line is redrawn with a carriage return at most every
  `interval` seconds; elsewhere (a log file) only `finish` lines are printed.
  """

  def __init__(self, stream=None, interval: float = 0.5,
               enabled: bool = True):
    self._stream = stream or sys.stdout
    self._interval = interval
    self._enabled = enabled
    self._live = enabled and getattr(self._stream, 'isatty', lambda: False)()
    self._last = 0.0
    self._width = 0

  def update(self, text: str, force: bool = False) -> None:
    """Shows `text` as the current status (throttled unless force)."""
    if not self._live:
      return
    now = time.monotonic()
    if not force and now - self._last < self._interval:
      return
    self._last = now
    padding = max(0, self._width - len(text))
    self._stream.write('\r' + text + ' ' * padding)
    self._stream.flush()
    self._width = len(text)

  def finish(self, text: str) -> None:
    """Replaces the status with a permanent line."""
    if not self._enabled:
      return
    if self._live:
      self._stream.write('\r' + ' ' * self._width + '\r')
      self._width = 0
    self._stream.write(text + '\n')
    self._stream.flush()


@gin.configurable
class Runner(object):
  """Runs an experiment: iterations of training and evaluation.

  Directory layout under base_dir: ``checkpoints/`` (agent, replay memory,
  experiment data, completion markers; while a save runs, its staging
  directory and journal), ``logs/`` (``statistics.jsonl``, ``log_N``),
  TensorBoard event files, and ``learning_curve.png``.
  """

  def __init__(self,
               base_dir,
               create_agent_fn,
               create_environment_fn=atari_lib.create_atari_environment,
               checkpoint_file_prefix='ckpt',
               logging_file_prefix='log',
               log_every_n=1,
               num_iterations=200,
               training_steps=250000,
               evaluation_steps=125000,
               max_steps_per_episode=27000,
               clip_rewards=True,
               use_legacy_logger=True,
               fine_grained_print_to_console=True,
               seed=None,
               checkpoint_in_background=True):
    """Creates the environment and the agent, and resumes if possible.

    Args:
      base_dir: str, the experiment directory.
      create_agent_fn: callable(sess, environment, summary_writer=...)
        returning an agent.
      create_environment_fn: callable() returning an environment.
      checkpoint_file_prefix: str, prefix of the experiment data files.
      logging_file_prefix: str, prefix of the ``logs/`` JSON files.
      log_every_n: int, write ``logs/{prefix}_N`` every this many
        iterations.
      num_iterations: int, the iteration to stop before.
      training_steps: int, minimum agent steps per training phase.
      evaluation_steps: int, minimum agent steps per evaluation phase.
      max_steps_per_episode: int, the episode length limit (agent steps);
        None continues episodes across phases.
      clip_rewards: bool, clip the rewards the agent sees to [-1, 1] (the
        reported returns are not clipped).
      use_legacy_logger: bool, also write Dopamine's ``logs/log_N`` (as
        JSON).
      fine_grained_print_to_console: bool, show the live status line and the
        per-iteration summaries.
      seed: int or None, seeds Python's and NumPy's generators, the
        environment's first reset and the agent's TF graph.
      checkpoint_in_background: bool, let the agent write its replay memory
        in the background (`_checkpoint_experiment`), where it can.
    """
    if base_dir is None:
      raise ValueError('Runner needs a base_dir.')
    self._base_dir = base_dir
    self._logging_file_prefix = logging_file_prefix
    self._log_every_n = log_every_n
    self._num_iterations = num_iterations
    self._training_steps = training_steps
    self._evaluation_steps = evaluation_steps
    self._max_steps_per_episode = max_steps_per_episode
    self._clip_rewards = clip_rewards
    self._use_legacy_logger = use_legacy_logger
    self._seed = seed
    self._checkpoint_in_background = checkpoint_in_background
    # Commits the checkpoint whose replay memory is written in the
    # background, once it is (see `_checkpoint_experiment`).
    self._committer = None
    self._committing = None
    self._status = StatusLine(enabled=fine_grained_print_to_console)
    self._checkpoint_dir = os.path.join(base_dir,
                                        experiment_resume.CHECKPOINT_DIRNAME)
    self._logging_dir = os.path.join(base_dir,
                                     experiment_resume.LOGGING_DIRNAME)
    logging.info('Runner: base_dir %s, num_iterations %d, training_steps %d, '
                 'evaluation_steps %d, max_steps_per_episode %s, '
                 'clip_rewards %s, seed %s', base_dir, num_iterations,
                 training_steps, evaluation_steps, max_steps_per_episode,
                 clip_rewards, seed)

    sess = None
    if seed is not None:
      random.seed(seed)
      np.random.seed(seed)
      graph = tf.Graph()
      with graph.as_default():
        tf.compat.v1.set_random_seed(seed)
      sess = tf.compat.v1.Session(
          graph=graph,
          config=tf.compat.v1.ConfigProto(allow_soft_placement=True))
    self._environment = create_environment_fn()
    if seed is not None and hasattr(self._environment, 'seed'):
      self._environment.seed(seed)
    with tf.Graph().as_default():
      # FileWriter refuses to be created while executing eagerly.
      self._agent = create_agent_fn(sess, self._environment,
                                    summary_writer=self._base_dir)
    self._sess = getattr(self._agent, 'session', sess)
    self._agent_takes_terminal = _accepts(self._agent.end_episode, 'terminal')
    self._summary_writer = getattr(self._agent, 'summary_writer', None)
    if self._summary_writer is None:
      with tf.Graph().as_default():
        self._summary_writer = tf.compat.v1.summary.FileWriter(self._base_dir)
    self._initialize_checkpointer_and_maybe_resume(checkpoint_file_prefix)

  # ------------------------------------------------------------ set up

  def _create_directories(self) -> None:
    """Creates checkpoints/ and logs/ and reads the statistics so far."""
    atomic_files.make_directories(self._checkpoint_dir)
    atomic_files.make_directories(self._logging_dir)
    self._logger = logger.Logger(self._logging_dir)
    self._statistics_log = logger.StatisticsLog(
        os.path.join(self._logging_dir, experiment_resume.STATISTICS_FILENAME))

  def _initialize_checkpointer_and_maybe_resume(
      self, checkpoint_file_prefix: str) -> None:
    """Resumes after the newest checkpoint that loads, all parts of it.

    Sets _checkpointer and _start_iteration (0 without a checkpoint). A
    save killed after its commit point is finished first; checkpoints are
    tried newest first (a gin ``override_number`` first). Only once the
    start is decided are directories created, leftovers of killed saves
    deleted and the statistics of iterations that will be rerun dropped.

    Raises:
      experiment_resume.CannotResumeError: If checkpoints exist but none
        loads, the journal of an interrupted save is malformed, or the
        statistics file is not a regular file; no file was changed (but for
        finishing a committed save).
    """
    experiment_resume.check_statistics_file(
        self._base_dir,
        os.path.join(self._logging_dir, experiment_resume.STATISTICS_FILENAME))
    self._checkpointer = checkpointer.Checkpointer(self._checkpoint_dir,
                                                   checkpoint_file_prefix)
    experiment_resume.finish_interrupted_save(self._base_dir,
                                              self._checkpointer)
    version, data, refusals = experiment_resume.newest_loadable_checkpoint(
        self._checkpoint_dir, self._load_checkpoint)
    if data is None and refusals:
      raise experiment_resume.CannotResumeError(
          self._base_dir, 'none of its {} checkpoint{} loads'.format(
              len(refusals), 's' if len(refusals) > 1 else ''), refusals)
    self._create_directories()
    for path in self._checkpointer.remove_leftovers():
      logging.info('Deleted %s, left by an interrupted checkpoint save.', path)
    self._start_iteration = 0
    if data is not None:
      self._restore_experiment_data(data)
      self._start_iteration = version + 1
      if refusals:
        logging.warning(
            'Resuming from checkpoint %d; newer ones were refused: %s',
            version, '; '.join('{}: {}'.format(*r) for r in refusals))
      logging.info('Reloaded checkpoint %d; starting from iteration %d.',
                   version, self._start_iteration)
      self._status.finish('Resumed from the checkpoint of iteration {} in '
                          '{}'.format(version, self._checkpoint_dir))
    self._statistics_log.truncate(self._start_iteration)

  def _load_checkpoint(self, version: int) -> Dict[str, Any]:
    """Loads every part of checkpoint `version` or nothing; returns its data.

    The agent restores itself all or nothing (`DQNAgent.unbundle`); the
    caller applies the runner's part. Raises `CheckpointError` (or
    whatever reading a damaged file raises) if any part fails.
    """
    data = self._checkpointer.load_verified_checkpoint(version)
    experiment_resume.check_experiment_data(data, version)
    if not self._agent.unbundle(self._checkpoint_dir, version, data):
      raise atomic_files.CheckpointError(
          'the agent could not load it (its replay memory or bundle is '
          'missing)')
    return data

  def _restore_experiment_data(self, data: Dict[str, Any]) -> None:
    """Applies the runner's part of a checkpoint (checked beforehand)."""
    if self._use_legacy_logger and isinstance(data.get('logs'), dict):
      self._logger.data = data['logs']
    experiment_resume.restore_random_states(data)

  # ----------------------------------------------------------- episodes

  def _initialize_episode(self) -> int:
    return self._agent.begin_episode(self._environment.reset())

  def _run_one_step(self, action):
    observation, reward, is_terminal, _ = self._environment.step(action)
    return observation, reward, is_terminal

  def _end_episode(self, reward, terminal=True) -> None:
    if self._agent_takes_terminal:
      self._agent.end_episode(reward, terminal=bool(terminal))
    else:
      self._agent.end_episode(reward)

  def _run_one_episode(self, max_steps=None):
    """Plays one episode (up to max_steps_per_episode steps).

    With max_steps_per_episode None, plays until the episode ends or
    `max_steps` steps were taken: the next call continues the episode.

    Returns:
      (number of steps, undiscounted return of these steps).
    """
    step_number = 0
    total_reward = 0.0
    if getattr(self, '_episode_ended', True):
      self._action = self._initialize_episode()
      self._episode_ended = False
    while max_steps is None or step_number < max_steps:
      observation, reward, is_terminal = self._run_one_step(self._action)
      total_reward += reward
      step_number += 1
      if self._clip_rewards:
        reward = np.clip(reward, -1, 1)
      if (self._environment.game_over or
          step_number == self._max_steps_per_episode):
        self._end_episode(reward, is_terminal)
        self._episode_ended = True
        break
      if is_terminal:
        # A lost life (terminal_on_life_loss): the game goes on.
        self._end_episode(reward, True)
        self._action = self._agent.begin_episode(observation)
      else:
        self._action = self._agent.step(reward, observation)
      if step_number % 256 == 0:
        self._show_progress(step_number, total_reward)
    return step_number, total_reward

  # ------------------------------------------------------------- phases

  def _show_progress(self, episode_steps: int = 0,
                     episode_return: float = 0.0) -> None:
    progress = getattr(self, '_progress', None)
    if progress is None:
      return
    steps = progress['steps'] + episode_steps
    elapsed = max(time.monotonic() - progress['start'], 1e-9)
    recent = progress['returns'][-10:]
    running = ('{:.1f}'.format(np.mean(recent)) if recent else
               '{:.0f} (episode so far)'.format(episode_return))
    self._status.update(
        'iteration {}/{} {:5s} steps {}/{}  {:.0f} steps/s  return (last {} '
        'episodes) {}'.format(progress['iteration'], self._num_iterations,
                              progress['phase'], steps, progress['target'],
                              steps / elapsed, len(recent), running))

  def _run_one_phase(self, min_steps, statistics, run_mode_str):
    """Runs whole episodes until at least min_steps steps were taken.

    Returns (steps taken, sum of episode returns, number of episodes).
    """
    step_count = 0
    num_episodes = 0
    sum_returns = 0.0
    self._progress = {'steps': 0, 'start': time.monotonic(), 'returns': [],
                      'phase': run_mode_str, 'target': min_steps,
                      'iteration': getattr(self, '_iteration', 0)}
    while step_count < min_steps:
      if self._max_steps_per_episode is None:
        length, episode_return = self._run_one_episode(min_steps - step_count)
      else:  # Dopamine's call: a subclass's override takes no argument.
        length, episode_return = self._run_one_episode()
      statistics.append({
          '{}_episode_lengths'.format(run_mode_str): length,
          '{}_episode_returns'.format(run_mode_str): episode_return,
      })
      step_count += length
      sum_returns += episode_return
      num_episodes += 1
      self._progress['steps'] = step_count
      self._progress['returns'].append(episode_return)
      self._show_progress()
    self._progress = None
    return step_count, sum_returns, num_episodes

  def _run_train_phase(self, statistics):
    """Returns (episodes, average return, steps per second) of a training."""
    self._agent.eval_mode = False
    start = time.time()
    steps, sum_returns, num_episodes = self._run_one_phase(
        self._training_steps, statistics, 'train')
    average_return = sum_returns / num_episodes if num_episodes else 0.0
    steps_per_second = steps / max(time.time() - start, 1e-9)
    statistics.append({'train_average_return': average_return,
                       'train_average_steps_per_second': steps_per_second})
    logging.info('Average training return %.2f, %.1f steps/s',
                 average_return, steps_per_second)
    return num_episodes, average_return, steps_per_second

  def _run_eval_phase(self, statistics):
    """Returns (episodes, average return) of an evaluation (no learning)."""
    self._agent.eval_mode = True
    _, sum_returns, num_episodes = self._run_one_phase(
        self._evaluation_steps, statistics, 'eval')
    average_return = sum_returns / num_episodes if num_episodes else 0.0
    logging.info('Average evaluation return %.2f', average_return)
    statistics.append({'eval_average_return': average_return})
    return num_episodes, average_return

  def _run_one_iteration(self, iteration):
    """Runs a training and an evaluation phase; returns their statistics."""
    statistics = iteration_statistics.IterationStatistics()
    logging.info('Starting iteration %d', iteration)
    num_episodes_train, average_reward_train, steps_per_second = (
        self._run_train_phase(statistics))
    num_episodes_eval, average_reward_eval = self._run_eval_phase(statistics)
    self._save_tensorboard_summaries(iteration, num_episodes_train,
                                     average_reward_train, num_episodes_eval,
                                     average_reward_eval, steps_per_second)
    return statistics.data_lists

  def _save_tensorboard_summaries(self, iteration, num_episodes_train,
                                  average_reward_train, num_episodes_eval,
                                  average_reward_eval,
                                  average_steps_per_second):
    """Writes the iteration's summaries (Dopamine's tags)."""
    self._write_summary(iteration, {
        'Train/NumEpisodes': num_episodes_train,
        'Train/AverageReturns': average_reward_train,
        'Train/AverageStepsPerSecond': average_steps_per_second,
        'Eval/NumEpisodes': num_episodes_eval,
        'Eval/AverageReturns': average_reward_eval,
    })

  def _write_summary(self, iteration: int, values: Dict[str, float]) -> None:
    if self._summary_writer is None:
      return
    summary = tf.compat.v1.Summary(value=[
        tf.compat.v1.Summary.Value(tag=tag, simple_value=float(value))
        for tag, value in values.items()])
    self._summary_writer.add_summary(summary, iteration)
    self._summary_writer.flush()

  # ------------------------------------------------- logs, checkpoints

  def _log_experiment(self, iteration, statistics):
    """Records the iteration in the logs and redraws the learning curve."""
    record = {'iteration': iteration, 'wall_time': time.time(),
              'iteration_seconds': time.time() - self._iteration_start,
              'training_steps': getattr(self._agent, 'training_steps', None)}
    replay_bytes = self._replay_nbytes()
    if replay_bytes is not None:
      record['replay_nbytes'] = replay_bytes
      logging.info('Replay memory: %.1f MiB resident', replay_bytes / 2**20)
    for key, values in statistics.items():
      if key.endswith('_episode_returns'):
        record[key[:-len('_returns')] + 's'] = len(values)
      elif not key.endswith('_episode_lengths') and values:
        record[key] = values[-1]
    self._statistics_log.append(record)
    if self._use_legacy_logger:
      self._logger['iteration_{:d}'.format(iteration)] = statistics
      if iteration % self._log_every_n == 0:
        self._logger.log_to_file(self._logging_file_prefix, iteration)
    try:
      learning_curve.plot_learning_curve(self.learning_curve_path,
                                         self._statistics_log.records)
    except (ImportError, OSError, ValueError) as e:
      logging.warning('Could not draw the learning curve: %s', e)
    self._status.finish(self._summary_text(record))

  def _replay_nbytes(self) -> Optional[int]:
    """The agent's replay memory's resident bytes, or None where the agent
    does not say (an agent without `replay_memory`, or a memory without
    `nbytes`, such as Dopamine's)."""
    memory = getattr(self._agent, 'replay_memory', None)
    nbytes = getattr(memory, 'nbytes', None)
    return nbytes if isinstance(nbytes, int) else None

  def _summary_text(self, record: Dict[str, Any]) -> str:
    parts = ['iteration {}/{}'.format(record['iteration'],
                                      self._num_iterations)]
    if 'train_average_return' in record:
      parts.append('train return {:.1f} ({} episodes, {:.0f} steps/s)'.format(
          record['train_average_return'], record.get('train_episodes', 0),
          record.get('train_average_steps_per_second', 0.0)))
    if 'eval_average_return' in record:
      parts.append('eval return {:.1f} ({} episodes)'.format(
          record['eval_average_return'], record.get('eval_episodes', 0)))
    parts.append('{:.1f} s'.format(record['iteration_seconds']))
    return ' | '.join(parts)

  @property
  def learning_curve_path(self) -> str:
    return os.path.join(self._base_dir,
                        experiment_resume.LEARNING_CURVE_FILENAME)

  @property
  def statistics_path(self) -> str:
    return self._statistics_log.path

  def _checkpoint_experiment(self, iteration):
    """Checkpoints the iteration: the agent's files, data and marker at once.

    The agent writes into the checkpointer's staging directory, then
    `Checkpointer.commit_checkpoint` switches everything in; iterations the
    checkpointer does not save (checkpoint_frequency) are skipped. An agent
    that can (its `bundle_and_checkpoint` takes `background`, and it has
    `wait_for_checkpoint`) writes its replay memory in the background: the
    next iteration starts at once and a thread commits the checkpoint once
    the memory is written. The checkpoint before stays the newest until
    then; the next checkpoint, or the end of the run, waits for it first.
    """
    self._finish_checkpoint()
    staging_dir = self._checkpointer.begin_checkpoint(iteration)
    if staging_dir is None:
      return
    save = self._agent.bundle_and_checkpoint
    background = (self._checkpoint_in_background and
                  _accepts(save, 'background') and
                  hasattr(self._agent, 'wait_for_checkpoint'))
    bundle = (save(staging_dir, iteration, background=True) if background
              else save(staging_dir, iteration))
    if not bundle:
      if background:
        self._agent.wait_for_checkpoint()
      self._checkpointer.abort_checkpoint()
      return
    # Dopamine's layout: the agent's bundle plus the runner's keys.
    data = dict(bundle)
    data['current_iteration'] = iteration
    data.update(experiment_resume.random_states())
    if self._use_legacy_logger:
      data['logs'] = self._logger.data
    if not background:
      self._checkpointer.commit_checkpoint(iteration, data)
      return
    if self._committer is None:
      self._committer = concurrent.futures.ThreadPoolExecutor(
          max_workers=1, thread_name_prefix='dopamine_per-checkpoint')
    # A copy: the logs go on changing while the thread pickles them.
    self._committing = self._committer.submit(
        self._commit_when_written, iteration, copy.deepcopy(data))

  def _commit_when_written(self, iteration: int, data: Dict[str, Any]
                          ) -> None:
    """Commits checkpoint `iteration` once the agent's files are written;
    gives it up if writing them failed (and raises that error)."""
    try:
      self._agent.wait_for_checkpoint()
    except BaseException:
      self._checkpointer.abort_checkpoint()
      raise
    self._checkpointer.commit_checkpoint(iteration, data)

  def _finish_checkpoint(self) -> None:
    """Waits for the checkpoint committed in the background, if any.

    Raises:
      What writing or committing it raised; the checkpoint before it is
      then the newest.
    """
    committing, self._committing = self._committing, None
    if committing is not None:
      committing.result()

  def run_experiment(self):
    """Runs iterations from the resumed one to num_iterations."""
    logging.info('Beginning training...')
    if self._num_iterations <= self._start_iteration:
      logging.warning('num_iterations (%d) <= start_iteration (%d)',
                      self._num_iterations, self._start_iteration)
      return
    try:
      for iteration in range(self._start_iteration, self._num_iterations):
        self._iteration = iteration
        self._iteration_start = time.time()
        statistics = self._run_one_iteration(iteration)
        self._log_experiment(iteration, statistics)
        self._checkpoint_experiment(iteration)
    finally:
      self._finish_checkpoint()
    if self._summary_writer is not None:
      self._summary_writer.flush()


@gin.configurable
class TrainRunner(Runner):
  """A `Runner` without evaluation phases."""

  def __init__(self, base_dir, create_agent_fn, create_environment_fn=None):
    """See `Runner`; the other parameters come from gin (``Runner.*``).

    Args:
      base_dir: str, the experiment directory.
      create_agent_fn: callable(sess, environment, summary_writer=...).
      create_environment_fn: callable or None. None (the default) leaves it
        to `Runner`'s (so ``Runner.create_environment_fn`` in a gin file
        applies); Dopamine passes its Atari default, which overrides it.
    """
    logging.info('Creating TrainRunner ...')
    kwargs = {}
    if create_environment_fn is not None:
      kwargs['create_environment_fn'] = create_environment_fn
    super().__init__(base_dir, create_agent_fn, **kwargs)
    self._agent.eval_mode = False

  def _run_one_iteration(self, iteration):
    statistics = iteration_statistics.IterationStatistics()
    num_episodes, average_reward, steps_per_second = self._run_train_phase(
        statistics)
    self._save_tensorboard_summaries(iteration, num_episodes, average_reward,
                                     steps_per_second)
    return statistics.data_lists

  def _save_tensorboard_summaries(self, iteration, num_episodes,
                                  average_reward, average_steps_per_second):
    self._write_summary(iteration, {
        'Train/NumEpisodes': num_episodes,
        'Train/AverageReturns': average_reward,
        'Train/AverageStepsPerSecond': average_steps_per_second,
    })
