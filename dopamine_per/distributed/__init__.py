# coding=utf-8
"""Distributed prioritized replay on Ray (Horgan et al., 2018, Ape-X).

`replay.ShardedPrioritizedReplayBuffer` shards a prioritized memory over Ray
actors (`shard`), fed by writers (`writer`), placed only where the cluster
can hold them (`placement`), checkpointed all or nothing with a record of
their shape (`sharded_checkpoint`). Needs the `distributed` extra (Ray);
importing this package alone imports nothing. See docs/distributed.md.
"""
