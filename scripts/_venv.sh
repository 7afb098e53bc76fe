# Sourced by scripts/test.sh and scripts/demo.sh; not meant to be run alone.
#
# Usage: dopamine_per_venv EXTRAS [--with-dopamine]
#
# Makes sure a Python environment with dopamine_per installed (editable, with
# the given extras, e.g. "test" or "" for none) is ready, and sets PYTHON to
# its interpreter. If a virtualenv is active ($VIRTUAL_ENV set) it is used;
# otherwise .venv in the repository root is created if missing and used.
# With --with-dopamine, dopamine-rl 4.1.2 (the reference implementation the
# compatibility tests compare against) is installed with --no-deps: its own
# requirements pull in JAX, Flax and gym, none of which its TF replay memory
# needs.
#
# Installing is skipped when nothing it depends on changed since the last
# successful install into the same environment (a stamp file in the
# environment records that); set DOPAMINE_PER_REINSTALL=1 to force it.

DOPAMINE_RL_VERSION=4.1.2

dopamine_per_venv() {
  local extras="$1" with_dopamine="${2:-}"
  local repo_root venv
  repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

  if [[ -n "${VIRTUAL_ENV:-}" ]]; then
    venv="$VIRTUAL_ENV"
    echo "Using the active virtualenv $venv" >&2
  else
    venv="$repo_root/.venv"
    if [[ ! -x "$venv/bin/python" ]]; then
      echo "Creating a virtualenv in $venv" >&2
      python3 -m venv "$venv"
    fi
  fi
  PYTHON="$venv/bin/python"

  local spec="."
  [[ -n "$extras" ]] && spec=".[$extras]"
  local key
  key="$(
    {
      echo "$repo_root" "$spec" "$with_dopamine" "$DOPAMINE_RL_VERSION"
      cat "$repo_root/setup.py"
    } | sha256sum | cut -d' ' -f1
  )"
  local stamp="$venv/.dopamine_per_install.${extras:-base}"
  if [[ "${DOPAMINE_PER_REINSTALL:-0}" != 1 && -f "$stamp" \
        && "$(cat "$stamp")" == "$key" ]]; then
    return 0
  fi

  echo "Installing dopamine_per${extras:+[$extras]} (editable) into $venv" >&2
  local pip=("$PYTHON" -m pip --disable-pip-version-check --quiet)
  (cd "$repo_root" && "${pip[@]}" install -e "$spec")
  if [[ "$with_dopamine" == --with-dopamine ]]; then
    "${pip[@]}" install --no-deps "dopamine-rl==$DOPAMINE_RL_VERSION"
  fi
  echo "$key" > "$stamp"
}
