# coding=utf-8
"""Distributed prioritized replay on Ray (Horgan et al., 2018, Ape-X).

`replay.ShardedPrioritizedReplayBuffer` shards a prioritized memory over Ray
actors (`shard`), fed by writers (`writer`). Needs the `distributed` extra
(Ray); importing this package alone imports nothing. See
docs/distributed.md.
"""
