#!/usr/bin/env bash
# Runs the whole test suite (unit, pipeline and broker integration tests), installing what it
# needs first. Extra arguments go to pytest. Fails if pytest collects no test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$root/scripts/bootstrap.sh"
cd "$root"
# The streaming tests run on Beam's Prism runner, built from its Go module (cached).
UNITLESS_PRISM="$("$root/deploy/prism/build_prism.sh")"
export UNITLESS_PRISM
set +e
"$root/.venv/bin/python" -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$status"
