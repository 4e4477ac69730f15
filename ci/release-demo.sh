#!/usr/bin/env bash
# Install the built wheel into a fresh stock torch+cpu environment and run the
# demonstration on the platform's device, outside the checkout so that the
# installed torch_fl is what gets imported.
# usage: ci/release-demo.sh PYTHON_VERSION
set -euo pipefail
# shellcheck source=ci/release-env.sh
. "$(dirname "$0")/release-env.sh"
python_version=${1:?usage: ci/release-demo.sh PYTHON_VERSION}
cd "$repo"
[ -n "$torch_version" ] || die "no torch version (not on a v* tag) — set TORCH_VERSION=X.Y.Z"
shopt -s nullglob
wheels=("$repo"/dist/*.whl)
[ "${#wheels[@]}" -eq 1 ] || die "expected one wheel in dist/, found ${#wheels[@]} — run ci/release-build.sh first"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"python$python_version" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --index-url "$torch_cpu_index" "torch==$torch_version"
# The wheel's other requirements (the CUDA runtime packages, ...) come from the default index.
"$work/venv/bin/python" -m pip install "${wheels[0]}"
cd "$work"
"$work/venv/bin/python" "$repo/ci/release_demo.py"
