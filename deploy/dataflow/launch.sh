#!/usr/bin/env bash
# Build the flex template and launch (or update, or drain) `unitless train` on Dataflow.
#   deploy/dataflow/launch.sh build                      # push images, write the template spec
#   deploy/dataflow/launch.sh run   [unitless train options...]
#   deploy/dataflow/launch.sh update [unitless train options...]   # replace the running job
#   deploy/dataflow/launch.sh drain                      # finish in-flight work, then stop
# Settings (environment): PROJECT, REGION, BUCKET (gs://... for templates, temp and staging),
# REGISTRY (e.g. REGION-docker.pkg.dev/PROJECT/unitless), JOB (job name, default unitless),
# MAX_WORKERS (default 4), STREAMING (true for Kafka input; default true).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${PROJECT:?set PROJECT}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET}" "${REGISTRY:?set REGISTRY}"
JOB=${JOB:-unitless}
MAX_WORKERS=${MAX_WORKERS:-4}
STREAMING=${STREAMING:-true}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml")
SDK_IMAGE="$REGISTRY/unitless-sdk:$VERSION"
LAUNCHER_IMAGE="$REGISTRY/unitless-launcher:$VERSION"
SPEC="$BUCKET/templates/unitless-$VERSION.json"

params() {  # unitless train options -> --parameters name=value,... (a flag alone: empty value)
    local out=() name
    while [ $# -gt 0 ]; do
        name=${1#--}; shift
        if [ $# -gt 0 ] && [[ $1 != --* ]]; then out+=("$name=$1"); shift; else out+=("$name="); fi
    done
    (IFS=,; echo "${out[*]}")
}

case "${1:-}" in
build)
    docker build -f "$root/deploy/Dockerfile" --target sdk -t "$SDK_IMAGE" "$root"
    docker build -f "$root/deploy/Dockerfile" --target launcher -t "$LAUNCHER_IMAGE" "$root"
    docker push "$SDK_IMAGE" && docker push "$LAUNCHER_IMAGE"
    gcloud dataflow flex-template build "$SPEC" --project "$PROJECT" \
        --image "$LAUNCHER_IMAGE" --sdk-language PYTHON \
        --metadata-file "$root/deploy/dataflow/metadata.json"
    ;;
run|update)
    mode=$1; shift
    extra=()
    [ "$mode" = update ] && extra+=(--update)
    gcloud dataflow flex-template run "$JOB" --project "$PROJECT" --region "$REGION" \
        --template-file-gcs-location "$SPEC" \
        --temp-location "$BUCKET/temp" --staging-location "$BUCKET/staging" \
        --additional-experiments use_runner_v2 \
        --parameters "sdk_container_image=$SDK_IMAGE,streaming=$STREAMING,max_num_workers=$MAX_WORKERS" \
        --parameters "$(params "$@")" "${extra[@]}"
    ;;
drain)
    id=$(gcloud dataflow jobs list --project "$PROJECT" --region "$REGION" --status active \
         --filter "name=$JOB" --format "value(JOB_ID)" | head -1)
    gcloud dataflow jobs drain "$id" --project "$PROJECT" --region "$REGION"
    ;;
*)
    sed -n '2,10p' "$0"; exit 2 ;;
esac
