#!/usr/bin/env bash
# Assemble Apache Beam's Flink job server (FlinkJobServerDriver, Flink 1.19, embedded local
# cluster) into a cache directory and print the path of its jar on stdout (and only that;
# progress goes to stderr). Idempotent: nothing is fetched or built when the cache already holds
# the jar built from the current deploy/flink/pom.xml.
#
# Beam's shaded job-server jars are not on the reachable Maven mirror, so the jars of
# deploy/flink/pom.xml (Beam's Flink 1.19 runner 2.70.0, what it needs, Flink's RocksDB state
# backend: 165 jars, 200 MB) go to CACHE_DIR/libs (`mvn dependency:copy-dependencies`), and the
# job server jar holds only a manifest: Main-Class FlinkJobServerDriver, Class-Path the libs.
# Use it as `--flink_job_server_jar JAR --flink_version 1.19`, or run it yourself:
# `java -jar JAR --job-port 8099 --flink-master [local]` (see deploy/flink/job_server.py).
#
# Usage: deploy/flink/build_job_server.sh [--dir CACHE_DIR] [--force]
# Env:   UNITLESS_FLINK_CACHE_DIR (default
#        ${UNITLESS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/unitless}/flink/beam-2.70.0-flink-1.19)
#        MVN (maven executable), FLINK_FETCH_TIMEOUT seconds (default 1800)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pom="$here/pom.xml"
name="beam-2.70.0-flink-1.19"
dir="${UNITLESS_FLINK_CACHE_DIR:-}"
force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "build_job_server.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$dir" ]; then
  dir="${UNITLESS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/unitless}/flink/$name"
fi
jar="$dir/beam-flink-job-server.jar"
marker="$dir/.complete"
want="$(sha256sum "$pom" | cut -c1-16)"

complete() { [ -f "$jar" ] && [ -f "$marker" ] && [ "$(head -n1 "$marker")" = "$want" ]; }

if [ "$force" = 0 ] && complete; then
  echo "$jar"
  exit 0
fi

mkdir -p "$dir"
# One builder at a time (pytest sessions started at once, test.sh and a user).
exec 9>"$dir/.build.lock"
flock 9
if [ "$force" = 0 ] && complete; then
  echo "$jar"
  exit 0
fi

for tool in java python3; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "build_job_server.sh: '$tool' not found on PATH" >&2; exit 1; }
done
mvn="${MVN:-$(command -v mvn || true)}"
if [ -z "$mvn" ]; then
  echo "build_job_server.sh: Maven ('mvn') is needed to fetch the Flink job server's jars" >&2
  exit 1
fi

start=$(date +%s)
echo "build_job_server.sh: fetching Beam's Flink job server jars into $dir/libs" >&2
tmp="$(mktemp -d "$dir/.libs.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
( cd "$dir" && timeout "${FLINK_FETCH_TIMEOUT:-1800}" "$mvn" -B -q -f "$pom" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DoutputDirectory="$tmp/libs" -DincludeScope=runtime ) >&2 || {
  echo "build_job_server.sh: mvn dependency:copy-dependencies failed" >&2; exit 1; }
ls "$tmp"/libs/beam-runners-flink-1.19-*.jar >/dev/null 2>&1 || {
  echo "build_job_server.sh: mvn fetched no beam-runners-flink-1.19 jar" >&2; exit 1; }

# The manifest-only jar (zipfile writes the manifest with its 72-byte lines wrapped).
python3 - "$tmp" <<'EOF' >&2
import os, sys, zipfile
tmp = sys.argv[1]
libs = sorted(n for n in os.listdir(os.path.join(tmp, "libs")) if n.endswith(".jar"))
def header(name, value):
    line, out = f"{name}: {value}".encode(), []
    out.append(line[:72])
    line = line[72:]
    while line:
        out.append(b" " + line[:71])
        line = line[71:]
    return b"\r\n".join(out) + b"\r\n"
manifest = (header("Manifest-Version", "1.0")
            + header("Created-By", "unitless deploy/flink/build_job_server.sh")
            + header("Main-Class", "org.apache.beam.runners.flink.FlinkJobServerDriver")
            + header("Class-Path", " ".join("libs/" + n for n in libs)) + b"\r\n")
with zipfile.ZipFile(os.path.join(tmp, "job-server.jar"), "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("META-INF/MANIFEST.MF", manifest)
print(f"build_job_server.sh: {len(libs)} jars on the job server's Class-Path")
EOF

rm -rf "$dir/libs" "$marker"
mv "$tmp/libs" "$dir/libs"
mv -f "$tmp/job-server.jar" "$jar"
printf '%s\n%s\n' "$want" "$(date -u +%FT%TZ)" > "$marker"
echo "build_job_server.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$jar"
