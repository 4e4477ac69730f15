#!/usr/bin/env bash
# Publish the built wheel to the platform's index lane, once, verified by sha256.
# The index URL and the credentials come from the lane's GitHub environment.
# usage: ci/release-publish.sh LANE
set -euo pipefail
# shellcheck source=ci/release-env.sh
. "$(dirname "$0")/release-env.sh"
lane=${1:?usage: ci/release-publish.sh LANE}
url=${TORCH_FL_INDEX_URL:-}
[ -n "$url" ] || die "TORCH_FL_INDEX_URL is not set — set it in the release-$lane environment (the upload URL; {lane} is replaced)"
wheel=$(one_wheel)
args=(--lane "$lane" --repository-url "$url" --bundlers "$repo/bundlers" --json)
if [ -n "${TORCH_FL_SIMPLE_URL:-}" ]; then args+=(--simple-url "$TORCH_FL_SIMPLE_URL"); fi
if [ -n "$tag" ]; then args+=(--tag "$tag"); fi
status=0
"$venv/bin/torch-fl-publish" "${args[@]}" "$wheel" > "$dist/publish.json" || status=$?
cat "$dist/publish.json"
exit "$status"
