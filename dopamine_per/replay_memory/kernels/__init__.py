"""The per-batch loops: NumPy's, the native ones, and `choice.choose`."""
