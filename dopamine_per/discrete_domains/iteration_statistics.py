# coding=utf-8
"""Per-iteration metrics, as Dopamine's ``iteration_statistics``."""

from typing import Any, Dict, List

__all__ = ['IterationStatistics']


class IterationStatistics(object):
  """Collects the values of each metric over one iteration.

  Attributes:
    data_lists: dict mapping a metric name to the list of its values, in the
      order they were appended (e.g. ``'train_episode_returns'``).
  """

  def __init__(self):
    self.data_lists: Dict[str, List[Any]] = {}

  def append(self, data_pairs: Dict[str, Any]) -> None:
    """Appends each value to its metric's list.

    Args:
      data_pairs: dict of metric name -> value.
    """
    for key, value in data_pairs.items():
      self.data_lists.setdefault(key, []).append(value)
