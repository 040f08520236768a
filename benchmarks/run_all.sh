#!/usr/bin/env bash
# Run every learner benchmark in full mode, one after the other, from the repository root.
# Results: benchmarks/results/<name>.md/.json (+ artificial.png). About 10-15 minutes on 2 cores.
# Run it on an otherwise idle machine: throughput.py's numbers depend on it (each result file
# records how busy other processes kept the machine).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
for name in artificial shuttle vs_vw throughput accuracy; do
    echo "=== benchmarks/$name.py"
    start=$(date +%s)
    "$PY" "benchmarks/$name.py" "$@"
    echo "=== $name: $(( $(date +%s) - start )) s"
done
