# coding=utf-8
"""Dopamine JAX's replay API on dopamine_per's native core (issue 34).

`dopamine_per.jax.replay_memory` holds Dopamine's `dopamine.jax.replay_memory`
modules under their names; `redirect.install()` makes Dopamine's own JAX
agents build their memories from it. Needs the 'jax' extra.
"""
