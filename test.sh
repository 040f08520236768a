#!/usr/bin/env bash
# Runs the whole test suite (unit, pipeline and broker integration tests), installing what it
# needs first. Extra arguments go to pytest. Fails if pytest collects no test.
# --quick: the quick tier only (no broker, runner binary, object store, kill campaign or stress
# run: the markers in tests/conftest.py), without building what those need.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
quick=()
if [ "${1:-}" = "--quick" ]; then
    shift
    quick=(-m "not (kafka or prism or flink or s3 or kill or stress)")
    # (a test that runs Prism unmarked fails: tests/helpers/runners.py)
    export UNITLESS_QUICK_TIER=1
fi
"$root/scripts/bootstrap.sh"
cd "$root"
if [ ${#quick[@]} -eq 0 ]; then
    # The streaming tests run on Beam's Prism runner, built from its Go module (cached).
    UNITLESS_PRISM="$("$root/deploy/prism/build_prism.sh")"
    export UNITLESS_PRISM
    # The Flink tests run on Beam's Flink job server, built from Maven Central jars (cached).
    UNITLESS_FLINK_JOB_SERVER_JAR="$("$root/deploy/flink/build_job_server.sh")"
    export UNITLESS_FLINK_JOB_SERVER_JAR
    # The object-store tests run s3:// paths against MinIO, built from its Go module (cached).
    UNITLESS_MINIO="$("$root/deploy/s3/build_minio.sh")"
    export UNITLESS_MINIO
fi
set +e
"$root/.venv/bin/python" -m pytest --durations=25 "${quick[@]}" "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$status"
