#!/usr/bin/env bash
# Prove the built wheel before anything else touches it: torch-fl-preflight --release.
set -euo pipefail
# shellcheck source=ci/release-env.sh
. "$(dirname "$0")/release-env.sh"
cd "$repo"
shopt -s nullglob
wheels=(dist/*.whl)
[ "${#wheels[@]}" -eq 1 ] || die "expected one wheel in dist/, found ${#wheels[@]} — run ci/release-build.sh first"
"$venv/bin/torch-fl-preflight" --release --wheel "${wheels[0]}"
