# coding=utf-8
"""Lists the shipped gin configs: ``python -m dopamine_per.configs``."""

import sys

from dopamine_per import configs


def main() -> int:
  """Prints `configs.listing()`; returns 1 when no config is installed."""
  print(configs.listing())
  return 0 if configs.names() else 1


if __name__ == '__main__':
  sys.exit(main())
