#!/usr/bin/env bash
# Runs Dopamine JAX's own replay-memory tests against dopamine_per's, through
# dopamine_per.jax.redirect (issue 34). They are in Dopamine's repository,
# not in its wheel or sdist, so give a checkout of google/dopamine (v4.1.2):
#
#   bash scripts/dopamine_jax_tests.sh ~/src/dopamine
#
# Each test file runs in a fresh interpreter whose dopamine.jax.replay_memory
# is ours; the exit status is non-zero if any fails.
set -euo pipefail

if [[ $# -ne 1 || ! -d "$1/tests/dopamine/jax/replay_memory" ]]; then
  echo "usage: bash scripts/dopamine_jax_tests.sh DOPAMINE_CHECKOUT" \
    "(a folder holding tests/dopamine/jax/replay_memory)" >&2
  exit 2
fi
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/_venv.sh
source "$repo_root/scripts/_venv.sh"
dopamine_per_venv test --with-dopamine

status=0
for test_file in "$1"/tests/dopamine/jax/replay_memory/*_test.py; do
  echo "== $(basename "$test_file")"
  "$PYTHON" -c '
import runpy
import sys
from dopamine_per.jax import redirect
redirect.install()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")' "$test_file" || status=1
done
exit "$status"
