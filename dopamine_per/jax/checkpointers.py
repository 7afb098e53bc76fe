# coding=utf-8
"""What Dopamine JAX's checkpointing asks of an object (`Checkpointable`)."""

import typing
from typing import Any, Dict, Protocol

__all__ = ['Checkpointable']


@typing.runtime_checkable
class Checkpointable(Protocol):
  """An object whose state is a dictionary, as Dopamine JAX's protocol."""

  def to_state_dict(self) -> Dict[str, Any]:
    """The object's state."""

  def from_state_dict(self, state_dict: Dict[str, Any]) -> None:
    """Takes the state `to_state_dict` gave."""
