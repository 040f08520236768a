#!/usr/bin/env bash
# Build Apache Beam's Prism runner binary from the Go module
# github.com/apache/beam/sdks/v2/go/cmd/prism at the version matching the
# installed apache-beam Python SDK, into a cache directory. Idempotent: if the
# binary is already there it is not rebuilt. Prints the binary path on stdout
# (and only that; progress goes to stderr).
#
# Usage: deploy/prism/build_prism.sh [--version X.Y.Z] [--dir CACHE_DIR] [--force]
# Env:   PRISM_VERSION (default 2.77.0), PRISM_CACHE_DIR
#        (default ${XDG_CACHE_HOME:-$HOME/.cache}/unitless/prism/$PRISM_VERSION)
#        PRISM_BUILD_TIMEOUT seconds (default 1800)
set -euo pipefail

version="${PRISM_VERSION:-2.77.0}"
dir="${PRISM_CACHE_DIR:-}"
force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --version) version="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "build_prism.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
version="${version#v}"
if [ -z "$dir" ]; then
  dir="${XDG_CACHE_HOME:-$HOME/.cache}/unitless/prism/$version"
fi
bin="$dir/prism"

if [ "$force" = 0 ] && [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "build_prism.sh: 'go' not found on PATH (Go >= 1.21 needed)" >&2
  exit 1
fi

mkdir -p "$dir"
tmpbin="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmpbin"' EXIT

echo "build_prism.sh: building prism v$version into $dir (this can take several minutes)" >&2
start=$(date +%s)
# `go install pkg@version` ignores any go.mod in the cwd; we build from $dir
# anyway.
( cd "$dir" && GOBIN="$tmpbin" \
    timeout "${PRISM_BUILD_TIMEOUT:-1800}" \
    go install "github.com/apache/beam/sdks/v2/go/cmd/prism@v$version" ) >&2
mv -f "$tmpbin/prism" "$bin"
echo "build_prism.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
