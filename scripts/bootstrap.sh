#!/usr/bin/env bash
# Creates .venv beside this repo's pyproject.toml and installs unitless with its test and
# benchmark extras; re-installs only when pyproject.toml changed. Prints nothing on a no-op.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
stamp="$venv/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ ! -x "$venv/bin/python" ]; then
    echo "bootstrap: creating $venv" >&2
    "$python" -m venv "$venv"
fi
if [ ! -f "$stamp" ]; then
    echo "bootstrap: installing unitless and its dependencies into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
    "$venv/bin/python" -m pip install --quiet -e "$root[test,bench]" >&2
    # the learners and readers compiled now, not in the first run (numba's on-disk cache)
    "$venv/bin/python" -m unitless.compile >&2
    rm -f "$venv"/.installed-*
    touch "$stamp"
fi
