#!/usr/bin/env bash
# Sets up the environment (see scripts/_venv.sh) and runs the demonstration of
# the prioritized replay memory (dopamine_per/demo.py).
#
#   bash scripts/demo.sh                          # checkpoint in runs/demo
#   bash scripts/demo.sh --base_dir=/tmp/my_demo  # flags go to the demo
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/_venv.sh
source "$repo_root/scripts/_venv.sh"
dopamine_per_venv fast

exec "$PYTHON" -m dopamine_per.demo "$@"
