#!/usr/bin/env bash
# Build the MinIO server (an S3-compatible object store) from its Go module into a cache
# directory and print the binary's path on stdout (and only that; progress goes to stderr).
# The tests run checkpoints, predictions, dead letters and inputs on s3:// paths against it,
# through Beam's S3 file system (deploy/s3/local_s3.py starts it). Idempotent: nothing is
# built when the cache holds the binary. The first build takes several minutes.
#
# Usage: deploy/s3/build_minio.sh [--dir CACHE_DIR] [--force]
# Env:   MINIO_VERSION (a Go module version), MINIO_CACHE_DIR (default
#        ${UNITLESS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/unitless}/minio/$MINIO_VERSION),
#        MINIO_BUILD_TIMEOUT seconds (default 1800)
set -euo pipefail

version="${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"
dir="${MINIO_CACHE_DIR:-}"
force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "build_minio.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$dir" ]; then
  dir="${UNITLESS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/unitless}/minio/$version"
fi
bin="$dir/minio"
if [ "$force" = 0 ] && [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "build_minio.sh: 'go' not found on PATH" >&2; exit 1; }
mkdir -p "$dir"
exec 9>"$dir/.build.lock"  # one builder at a time
flock 9
if [ "$force" = 0 ] && [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
tmpbin="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmpbin"' EXIT
echo "build_minio.sh: building minio $version into $dir (this can take several minutes)" >&2
start=$(date +%s)
( cd "$dir" && GOBIN="$tmpbin" timeout "${MINIO_BUILD_TIMEOUT:-1800}" \
    go install "github.com/minio/minio@$version" ) >&2
mv -f "$tmpbin/minio" "$bin"
echo "build_minio.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
