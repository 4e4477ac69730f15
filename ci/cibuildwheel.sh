#!/usr/bin/env bash
# Build one platform's wheel with cibuildwheel and ci/cibuildwheel.toml, taking the
# platform's Python (and SDK image, where the recipe names one) from its recipe.
# usage: ci/cibuildwheel.sh PLATFORM [--every-python] [cibuildwheel args...]
#   --every-python  every CPython the configuration's `build` lists, not only the recipe's
#                   (the release workflow's host-wheels job)
set -euo pipefail
usage="usage: ci/cibuildwheel.sh PLATFORM [--every-python] [cibuildwheel args...]"
platform=${1:?$usage}
shift
every_python=false
if [ "${1:-}" = --every-python ]; then every_python=true; shift; fi
repo=$(cd "$(dirname "$0")/.." && pwd)
row=$(python3 "$repo/ci/generate-matrix" --json | python3 -c '
import json, sys
rows = [r for r in json.load(sys.stdin)["include"] if r["platform"] == sys.argv[1]]
if not rows:
    sys.exit(f"unknown or stand-in platform ({sys.argv[1]}) — see bundlers/*.toml")
r = rows[0]
print(r["python"].replace(".", ""), r["image"])
' "$platform")
read -r py image <<< "$row"
export FLAGOS_PLATFORM=$platform
if [ "$every_python" = false ]; then export CIBW_BUILD="cp${py}-manylinux_x86_64"; fi
if [ -n "${image:-}" ]; then export CIBW_MANYLINUX_X86_64_IMAGE=$image; fi
exec cibuildwheel --platform linux --config-file "$repo/ci/cibuildwheel.toml" "$@" "$repo"
