# Sourced by the ci/release-*.sh steps: where the release environment and its wheel live.
# shellcheck shell=bash disable=SC2034  # the variables are for the scripts that source this file
#   RELEASE_VENV     the build environment (default .venv-release in the checkout)
#   RELEASE_DIST     where the wheel goes (default dist/ in the checkout)
#   TORCH_VERSION    the torch to build against (default: the tag's version, vX.Y.Z -> X.Y.Z)
#   TORCH_INDEX_URL  where stock torch+cpu comes from (default the PyTorch CPU index;
#                    set it empty to use pip's configured indexes)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${RELEASE_VENV:-$repo/.venv-release}
dist=${RELEASE_DIST:-$repo/dist}
# The torch_fl version is the version of the torch it is built against, so a
# release tag vX.Y.Z names the torch X.Y.Z.
tag=${RELEASE_TAG:-}
torch_version=${TORCH_VERSION:-${tag#v}}
torch_index=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
torch_pip_args=()
if [ -n "$torch_index" ]; then torch_pip_args=(--index-url "$torch_index"); fi
die() { echo "$1" >&2; exit "${2:-2}"; }
# one_wheel: the single wheel in $dist, or a one-line error.
one_wheel() {
  local found=("$dist"/*.whl)
  if [ ! -e "${found[0]}" ] || [ "${#found[@]}" -ne 1 ]; then
    die "expected one wheel in $dist, found: ${found[*]} — run ci/release-build.sh first"
  fi
  printf '%s\n' "${found[0]}"
}
