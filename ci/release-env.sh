# Sourced by the ci/release-*.sh steps: where the release environment lives.
# shellcheck shell=bash disable=SC2034  # the variables are for the scripts that source this file
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${RELEASE_VENV:-$repo/.venv-release}
# The torch_fl version is the version of the torch it is built against, so a
# release tag vX.Y.Z names the torch X.Y.Z; TORCH_VERSION overrides it off a tag.
tag=${RELEASE_TAG:-}
torch_version=${TORCH_VERSION:-${tag#v}}
torch_cpu_index=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
die() { echo "$1" >&2; exit "${2:-2}"; }
