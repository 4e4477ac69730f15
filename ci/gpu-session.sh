#!/usr/bin/env bash
# ci/gpu-session.sh OUT_DIR: on a machine with an NVIDIA GPU and a CUDA build of
# torch, build torch_fl for the cuda platform against that torch (nothing
# bundled: the torch already has the CUDA kernels), run the GPU test suite and
# the GPU benchmarks, and write their results under OUT_DIR.  No network needed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: ci/gpu-session.sh OUT_DIR}
PY=${PYTHON:-python3}
mkdir -p "$OUT"

# Probes of the installed torch: without the backend autoload, which in the
# source tree would import the unbuilt ./torch_fl for an installed torch_fl.
probe() { TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PY" -c "import torch; print($1)"; }
cuda=$(probe 'torch.version.cuda or ""')
if [[ -z "$cuda" ]]; then echo "ci/gpu-session.sh: $PY has no CUDA build of torch; install one" >&2; exit 2; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" || true

echo "== building torch_fl (cuda platform) against torch $(probe torch.__version__)" >&2
(cd "$ROOT" && FLAGOS_PLATFORM=cuda FLAGOS_WHEEL_LOCAL_VERSION="cuda$cuda" \
  "$PY" -m pip install --no-build-isolation --no-deps --no-index -v . >"$OUT/build.log" 2>&1) \
  || { tail -40 "$OUT/build.log" >&2; exit 1; }

# Outside the source tree, so that the installed torch_fl is the one imported.
cd "$OUT"
rc=0
"$PY" -m pytest "$ROOT/tests/gpu" -c "$ROOT/pyproject.toml" --rootdir "$ROOT" -p no:cacheprovider -q \
  --junitxml="$OUT/gpu-tests.xml" 2>&1 | tail -60 | tee "$OUT/gpu-tests.log" || rc=1
for bench in gpu_small_ops gpu_matmul gpu_transformer; do
  "$PY" "$ROOT/benchmarks/$bench.py" --out "$OUT/$bench.json" >/dev/null 2>"$OUT/$bench.err" || rc=1
done
exit $rc
