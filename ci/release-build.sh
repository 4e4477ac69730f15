#!/usr/bin/env bash
# Build one platform's release wheel into dist/ with torch-fl-build, in a fresh
# virtual environment of the platform's Python (the recipe's wheel.python).
# usage: ci/release-build.sh PLATFORM PYTHON_VERSION
set -euo pipefail
# shellcheck source=ci/release-env.sh
. "$(dirname "$0")/release-env.sh"
platform=${1:?usage: ci/release-build.sh PLATFORM PYTHON_VERSION}
python_version=${2:?usage: ci/release-build.sh PLATFORM PYTHON_VERSION}
cd "$repo"
[ -n "$torch_version" ] || die "no torch version (not on a v* tag) — set TORCH_VERSION=X.Y.Z"
python=$(command -v "python$python_version" || true)
[ -n "$python" ] || die "python$python_version is not on this runner (bundlers/$platform.toml wheel.python) — add it to the platform's image"

rm -rf "$venv"
mkdir -p "$dist"
rm -f "$dist"/*.whl "$dist"/publish.json
# A vendor image carries the torch its SDK goes with; use it when it is the tag's
# version, otherwise build against stock torch+cpu of that version.
if "$python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != sys.argv[1])" "$torch_version" 2>/dev/null; then
  "$python" -m venv --system-site-packages "$venv"
else
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install "${torch_pip_args[@]}" "torch==$torch_version"
fi
"$venv/bin/python" -m pip install ./packaging ./preflight ./ci/publish scikit-build-core pybind11 ninja
# Later steps find torch-fl-preflight and torch-fl-publish on PATH.
if [ -n "${GITHUB_PATH:-}" ]; then echo "$venv/bin" >> "$GITHUB_PATH"; fi

# Reproducible: the wheel's timestamps are the tagged commit's.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null) \
    || die "cannot read the commit time for SOURCE_DATE_EPOCH (no git checkout) — install git in the image or set SOURCE_DATE_EPOCH"
fi
export SOURCE_DATE_EPOCH
"$venv/bin/torch-fl-build" --platform "$platform" --out "$dist"
