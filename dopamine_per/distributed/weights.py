# coding=utf-8
"""Handing the learner's network weights to the actors, through Ray.

The learner publishes its online network's weights (a list of NumPy arrays)
with `publish_weights`: they go into Ray's object store once (`ray.put`),
and a small `WeightStore` actor keeps a reference to them and a version
number. Actors ask the store, every few steps, for weights newer than the
version they hold (`fetch_weights_if_newer`): an unchanged version costs
one small call. Nothing here imports TensorFlow; reading and assigning
weights in a TF graph is `actor`'s.
"""

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import ray

__all__ = ['WeightStore', 'create_weight_store', 'publish_weights',
           'fetch_weights_if_newer']


class WeightStore(object):
  """The newest published weights (as an object reference) and their version.

  Plain Python; `create_weight_store` runs it as a Ray actor. Version 0
  means nothing was published yet.
  """

  def __init__(self):
    self._version = 0
    # A one-element list holding the ObjectRef: Ray resolves references
    # passed or returned at the top level, not inside a list.
    self._weights_ref: Optional[List[Any]] = None

  def publish(self, weights_ref: List[Any]) -> int:
    """Keeps the reference `[ObjectRef]` as the newest weights.

    Args:
      weights_ref: a list holding one ObjectRef of the weights.

    Returns:
      int, the new version (1 for the first publication).
    """
    self._weights_ref = list(weights_ref)
    self._version += 1
    return self._version

  def fetch_if_newer(self, version: int) -> Tuple[int, Optional[List[Any]]]:
    """Returns (newest version, `[ObjectRef]` if newer than `version`)."""
    if self._version > version:
      return self._version, self._weights_ref
    return self._version, None


def create_weight_store() -> Any:
  """Starts a `WeightStore` actor (reserving no CPU) and returns its handle.

  Returns:
    The Ray actor handle.
  """
  return ray.remote(WeightStore).options(num_cpus=0).remote()


def publish_weights(store: Any, weights: Sequence[np.ndarray]) -> int:
  """Puts `weights` into the object store and makes them the newest.

  Args:
    store: a `WeightStore` actor handle.
    weights: the network's weights, arrays in its variables' order.

  Returns:
    int, their version.
  """
  reference = ray.put([np.asarray(w) for w in weights])
  return ray.get(store.publish.remote([reference]))


def fetch_weights_if_newer(store: Any, version: int
                          ) -> Tuple[int, Optional[List[np.ndarray]]]:
  """Returns (newest version, its weights, or None if not newer than version).

  Args:
    store: a `WeightStore` actor handle.
    version: int, the version the caller holds (0: none).

  Returns:
    (int, list of np.ndarray or None). The arrays may be read-only views of
    Ray's object store.
  """
  newest, reference = ray.get(store.fetch_if_newer.remote(version))
  if reference is None:
    return newest, None
  return newest, ray.get(reference[0])
