"""Replay memories: the sum tree, the circular and the prioritized buffers."""
