#!/usr/bin/env bash
# Runs the unitless command, installing everything it needs first (see scripts/bootstrap.sh).
# With no arguments it trains on the bundled example data: ./unitless.sh train
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$root/scripts/bootstrap.sh"
exec "$root/.venv/bin/unitless" "${@:-train}"
