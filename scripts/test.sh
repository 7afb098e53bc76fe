#!/usr/bin/env bash
# Sets up the environment (see scripts/_venv.sh) and runs the test suite.
#
#   bash scripts/test.sh                 # all tests
#   bash scripts/test.sh -k sum_tree -x  # extra arguments go to pytest
#   bash scripts/test.sh -m "not slow"   # skips the tests BUILD tags slow
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/_venv.sh
source "$repo_root/scripts/_venv.sh"
dopamine_per_venv test --with-dopamine

cd "$repo_root"
# The native ops' libraries, compiled once per source and TensorFlow version
# (cached); the tests of the native ops need them, so a machine without a
# C++ compiler stops here, saying so.
"$PYTHON" -m dopamine_per.native.build
status=0
"$PYTHON" -m pytest tests -q "$@" || status=$?
if [[ "$status" -eq 5 ]]; then
  # pytest's exit code 5: it collected no tests. That is a failure here.
  echo "scripts/test.sh: pytest collected no tests (exit code 5)" >&2
fi
exit "$status"
