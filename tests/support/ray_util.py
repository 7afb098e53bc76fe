"""A local Ray for the distributed tests: loopback only, two CPUs."""

import gc

import ray


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
