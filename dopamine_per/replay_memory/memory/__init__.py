"""A memory's internals: storage, batch layout, sampling, argument checks."""
