# coding=utf-8
"""Whether a Ray cluster could ever place a sharded memory's shards.

Ray starts an actor only on a node with the resources it reserves free, and
an actor that no node could hold waits forever. A sharded memory checks,
before it starts any shard, that the cluster's nodes could hold its shards
at all (`check_placeable`), so that it fails at once, with the arithmetic,
instead of after `start_timeout_s`. See docs/distributed.md#use.
"""

from typing import List

import ray

__all__ = ['check_placeable', 'cluster_node_cpus']

# Ray counts fractional resources in units of 1/10,000
# (ray_constants.RESOURCE_UNIT_SCALING): a request of 0.1 CPU is 1,000 units.
_RAY_RESOURCE_UNITS = 10_000


def _cpus(count: float) -> str:
  return '{:g} CPU{}'.format(count, '' if count == 1 else 's')


def check_placeable(num_shards: int, num_cpus_per_shard: float,
                    node_cpus: List[float]) -> None:
  """Refuses shards that a cluster of these nodes could never place.

  A shard reserves `num_cpus_per_shard` CPUs on one node, so the nodes hold
  ``sum(floor(cpus / num_cpus_per_shard))`` shards at most (counted in
  Ray's units of 1/10,000 CPU, so 3 x 0.1 fits 0.3). Whether they are free
  now does not matter: CPUs other actors hold may be released.

  Args:
    num_shards: int, the number of shards.
    num_cpus_per_shard: float >= 0, the CPUs each reserves (0: any number
      fit).
    node_cpus: list of float, the CPUs of each node of the cluster.

  Raises:
    ValueError: If the nodes cannot hold `num_shards` such shards, with the
      arithmetic: the total the shards reserve and the cluster's CPUs.
  """
  need = round(num_cpus_per_shard * _RAY_RESOURCE_UNITS)
  if need == 0:
    return
  units = [round(cpus * _RAY_RESOURCE_UNITS) for cpus in node_cpus]
  holds = sum(count // need for count in units)
  if holds >= num_shards:
    return
  total = sum(units) / _RAY_RESOURCE_UNITS
  wanted = num_shards * need / _RAY_RESOURCE_UNITS
  arithmetic = '{} shards x {} = {} {} the Ray cluster\'s {}'.format(
      num_shards, _cpus(num_cpus_per_shard), _cpus(wanted),
      '>' if wanted > total else '<=', _cpus(total))
  if wanted <= total:
    arithmetic += (', but a shard must fit on one node, and its nodes '
                   '(CPUs: {}) hold only {}'.format(
                       ', '.join('{:g}'.format(cpus) for cpus in node_cpus),
                       holds))
  raise ValueError(
      'num_cpus_per_shard={:g}: the replay shards can never be placed: {}. '
      'Reserve less per shard (a fraction such as 0.5, or 0 to let the '
      'shards share the cores), use fewer shards, or add nodes.'.format(
          num_cpus_per_shard, arithmetic))


def cluster_node_cpus() -> List[float]:
  """Returns the CPUs of each node of the Ray cluster alive now.

  Ray must be initialized in this process. Nodes an autoscaler may add
  later are not counted.
  """
  return [float(node.get('Resources', {}).get('CPU', 0.0))
          for node in ray.nodes() if node.get('Alive')]
