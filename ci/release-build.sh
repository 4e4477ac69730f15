#!/usr/bin/env bash
# Build one platform's release wheel into dist/ with torch-fl-build, in a fresh
# virtual environment of the platform's Python (the recipe's wheel.python) that
# holds stock torch+cpu of the release's version: the wheel installs next to
# stock torch+cpu, so that is what it is compiled against.
# usage: ci/release-build.sh PLATFORM PYTHON_VERSION [KIND]
#   KIND forked-libtorch: the vendor's libtorch fork is taken from the torch of
#   the platform image's Python (or VENDOR_TORCH: a torch-*.whl or torch/lib).
#   KIND cuda-assets (a CPU runner): torch-fl-build downloads the CUDA torch wheel
#   and, for its verify stage, the wheel's nvidia-* requirements into
#   ${XDG_CACHE_HOME:-~/.cache}/torch_fl once; no GPU and no driver are needed.
set -euo pipefail
# shellcheck source=ci/release-env.sh
. "$(dirname "$0")/release-env.sh"
platform=${1:?usage: ci/release-build.sh PLATFORM PYTHON_VERSION [KIND]}
python_version=${2:?usage: ci/release-build.sh PLATFORM PYTHON_VERSION [KIND]}
kind=${3:-}
cd "$repo"
[ -n "$torch_version" ] || die "no torch version (not on a v* tag) — set TORCH_VERSION=X.Y.Z"
python=$(command -v "python$python_version" || true)
[ -n "$python" ] || die "python$python_version is not on this runner (bundlers/$platform.toml wheel.python) — add it to the platform's image"

# Reproducible: the wheel's timestamps are the tagged commit's.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null) \
    || die "cannot read the commit time for SOURCE_DATE_EPOCH (no git checkout) — install git in the image or set SOURCE_DATE_EPOCH"
fi
export SOURCE_DATE_EPOCH

rm -rf "$venv"
mkdir -p "$dist"
rm -f "$dist"/*.whl "$dist"/publish.json
build_args=()
vendor_torch=${VENDOR_TORCH:-}
if [ "$kind" = forked-libtorch ] && [ -z "$vendor_torch" ]; then
  vendor_torch=$("$python" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))" 2>/dev/null || true)
fi
if [ -n "$vendor_torch" ]; then build_args+=(--vendor-torch "$vendor_torch"); fi

"$python" -m venv "$venv"
# ${a[@]+"${a[@]}"}: an empty array under set -u on the bash 4.2 of older images.
"$venv/bin/python" -m pip install ${torch_pip_args[@]+"${torch_pip_args[@]}"} "torch==$torch_version"
"$venv/bin/python" -m pip install ./packaging ./preflight ./publish scikit-build-core ninja
# Later steps find torch-fl-preflight and torch-fl-publish on PATH.
if [ -n "${GITHUB_PATH:-}" ]; then echo "$venv/bin" >> "$GITHUB_PATH"; fi

"$venv/bin/torch-fl-build" --platform "$platform" --out "$dist" ${build_args[@]+"${build_args[@]}"}
