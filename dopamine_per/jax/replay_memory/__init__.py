# coding=utf-8
"""Dopamine's `dopamine.jax.replay_memory`, stored and sampled natively."""
