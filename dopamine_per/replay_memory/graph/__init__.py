"""The TensorFlow edge of the memories: the Wrapped* classes and their ops."""
