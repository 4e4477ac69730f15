# Shared settings of ci/build-wheel and ci/test (sourced, not run).
#   TORCH_SPEC        the stock torch to build and test against (default torch==2.13.0: the CPU build here)
#   TORCH_INDEX_URL   an index to take it from instead of pip's configured ones
#   PYTHON            the interpreter that creates the environments (default python3)
#   FLAGOS_CI_WORK    where the environments live (default build/ci in the repo; git-ignored)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
PYTHON=${PYTHON:-python3}
WORK=${FLAGOS_CI_WORK:-$ROOT/build/ci}
TORCH_PIP_ARGS=()
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then TORCH_PIP_ARGS=(--index-url "$TORCH_INDEX_URL"); fi

say() { printf '\n== %s\n' "$*" >&2; }

# fresh_env DIR: a new virtual environment holding only stock torch.
fresh_env() {
  rm -rf "$1"
  "$PYTHON" -m venv "$1"
  "$1/bin/python" -m pip install --quiet --upgrade pip
  "$1/bin/python" -m pip install --quiet "${TORCH_PIP_ARGS[@]}" "$TORCH_SPEC"
}
