"""Replay memories: the sum tree, the circular and the prioritized buffers.

Dopamine's three modules (`sum_tree`, `circular_replay_buffer`,
`prioritized_replay_buffer`) stay here; what they are built from lies in
one subpackage per layer: `graph` (the TensorFlow edge), `memory` (a
memory's storage, batches, sampling and checks), `checkpoint` (its files)
and `kernels` (the per-batch loops and the choice between them).
"""
