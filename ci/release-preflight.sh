#!/usr/bin/env bash
# Prove the built wheel before anything else touches it: torch-fl-preflight --release.
set -euo pipefail
# shellcheck source=ci/release-env.sh
. "$(dirname "$0")/release-env.sh"
wheel=$(one_wheel)
"$venv/bin/torch-fl-preflight" --release --wheel "$wheel"
