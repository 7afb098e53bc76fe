"""A local Ray for the distributed tests: loopback only, two CPUs."""

import gc
import time
from typing import Callable

import ray

# The longest a test waits for a background thread or actor to reach a
# state.
DEADLINE_S = 30.0


def start_local_ray() -> None:
  """Starts a local Ray cluster on 127.0.0.1 with 2 CPUs.

  Collects garbage first: Ray starts its processes by forking this one, and
  earlier tests in the same pytest process may have left large memories in
  reference cycles (a TF graph holds its py_funcs' memories), whose mapped
  storage would count against the fork under the kernel's overcommit
  heuristic (a CI run failed with ENOMEM).
  """
  gc.collect()
  ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
           _node_ip_address='127.0.0.1')


def wait_until(condition: Callable[[], bool]) -> None:
  """Polls `condition` until it holds; fails after DEADLINE_S seconds."""
  deadline = time.monotonic() + DEADLINE_S
  while not condition():
    if time.monotonic() > deadline:
      raise AssertionError('condition not met within {} s'.format(
          DEADLINE_S))
    time.sleep(0.01)
