#!/usr/bin/env bash
# Build Apache Beam's Prism runner binary from the Go module
# github.com/apache/beam/sdks/v2/go/cmd/prism at the version matching the
# installed apache-beam Python SDK, with deploy/prism/patches/*.patch applied,
# into a cache directory. Idempotent: if the binary is already there, built with
# these patches, it is not rebuilt. Prints the binary path on stdout (and only
# that; progress goes to stderr).
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
patches="$(cd "$(dirname "$0")" && pwd)/patches"
# (what the binary was built with, kept beside it: a binary built without a patch is rebuilt)
built_with="$(cat "$patches"/*.patch | sha256sum | cut -d' ' -f1)"

if [ "$force" = 0 ] && [ -x "$bin" ] && [ "$(cat "$bin.patches" 2>/dev/null)" = "$built_with" ]; then
  echo "$bin"
  exit 0
fi

for tool in go git; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "build_prism.sh: '$tool' not found on PATH (Go >= 1.21 and git needed)" >&2
    exit 1
  fi
done

mkdir -p "$dir"
tmpbin="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmpbin"' EXIT

echo "build_prism.sh: building prism v$version into $dir (this can take several minutes)" >&2
start=$(date +%s)
# the module's source from the Go module proxy, copied (the module cache is read-only),
# patched, and built with the module's own go.mod and go.sum
module="github.com/apache/beam/sdks/v2@v$version"
# (-json: the download's result, its directory or its error, on stdout)
if ! json="$(cd "$tmpbin" \
             && timeout "${PRISM_BUILD_TIMEOUT:-1800}" go mod download -json "$module")"; then
  echo "build_prism.sh: go mod download $module failed: $json" >&2
  exit 1
fi
source="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [ ! -f "$source/go.mod" ]; then
  echo "build_prism.sh: go mod download gave no source directory for $module" >&2
  exit 1
fi
mkdir "$tmpbin/src"
cp -r "$source/go.mod" "$source/go.sum" "$source/go" "$tmpbin/src/"
chmod -R u+w "$tmpbin/src"
for p in "$patches"/*.patch; do
  # (not a repository: paths are the patch's own, whatever repository holds the cache)
  ( cd "$tmpbin/src" && GIT_CEILING_DIRECTORIES="$tmpbin" git apply -p1 "$p" ) >&2
done
( cd "$tmpbin/src" && GOWORK=off GOFLAGS=-mod=mod timeout "${PRISM_BUILD_TIMEOUT:-1800}" \
    go build -o "$tmpbin/prism" ./go/cmd/prism ) >&2
mv -f "$tmpbin/prism" "$bin"
echo "$built_with" > "$bin.patches"
echo "build_prism.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
