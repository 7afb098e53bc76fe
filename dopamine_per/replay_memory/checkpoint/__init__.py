"""A memory's checkpoint files: writing them, and reading them back."""
