"""A local Ray for the distributed tests: loopback only, two CPUs."""

import gc

import ray


def start_local_ray() -> None:
  """Starts a local Ray cluster on 127.0.0.1 with 2 CPUs.

  Collects garbage first: Ray forks this process, and large memories that
  earlier tests left in reference cycles would count against the fork under
  the kernel's overcommit heuristic (ENOMEM).
  """
  gc.collect()
  ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
           _node_ip_address='127.0.0.1')
