#!/usr/bin/env bash
# Install the built wheel into a fresh stock torch+cpu environment and run the
# demonstration on the platform's device, outside the checkout so that the
# installed torch_fl is what gets imported.
# usage: ci/release-demo.sh PYTHON_VERSION
set -euo pipefail
# shellcheck source=ci/release-env.sh
. "$(dirname "$0")/release-env.sh"
python_version=${1:?usage: ci/release-demo.sh PYTHON_VERSION}
[ -n "$torch_version" ] || die "no torch version (not on a v* tag) — set TORCH_VERSION=X.Y.Z"
wheel=$(one_wheel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"python$python_version" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install ${torch_pip_args[@]+"${torch_pip_args[@]}"} "torch==$torch_version"
# The wheel's other requirements (the CUDA runtime packages, ...) come from the default index.
"$work/venv/bin/python" -m pip install "$wheel"
cd "$work"
# ci/demo.py (shared with ci/build-wheel): import torch alone, then train on flagos:0 against CPU.
"$work/venv/bin/python" "$repo/ci/demo.py"
