#!/usr/bin/env bash
# tools/gpu-check.sh --out DIR [options]: on a machine with an NVIDIA GPU, prove torch_fl's cuda platform in
# one Python environment and write OUT/results.json (one record per step; logs and reports beside it).
# Both ways of running the cuda platform go through it:
#
#   * the cuda-assets wheel installed beside stock torch+cpu:
#       tools/gpu-check.sh --python ENV/bin/python --wheel torch_fl-X+cuda*.whl --reference-python /usr/bin/python3 --out OUT
#     (stock torch+cpu has no CUDA backend of its own: the native references come from another
#     interpreter whose torch is a CUDA build, for example the machine's own)
#   * torch_fl built against the machine's CUDA build of torch (nothing bundled):
#       tools/gpu-check.sh --build --python python3 --out OUT
#
# Steps, in order (each recorded; a failed step does not stop the later ones):
#   build       with --build: pip install this checkout into PY, FLAGOS_PLATFORM=cuda (no index, no isolation);
#               with --pgo first build-instrumented (FLAGOS_PGO=generate) and pgo-workload (tools/pgo_workload.py
#               on that plugin, its profile in OUT/pgo-profile), then the build from that profile (FLAGOS_PGO=use)
#   preflight   where torch_fl was installed from a wheel: torch-fl-preflight --check-installed --json against PY,
#               with --wheel that wheel file, else --installed (the installed wheel's manifest)
#   demo        PY -c "import torch; x = torch.randn(1024, 1024, device='flagos'); print((x @ x).device)"
#               -- no `import torch_fl`: the torch.backends entry point must register the device
#   gpu-suite   pytest tests/gpu and tests/distributed/test_nccl_gpu.py with PY (native results from the
#               reference interpreter), without the OpInfo tier; then the OpInfo tier as steps gpu-opinfo-K,
#               --opinfo-shards processes side by side, each on its own part (pytest --shard K/N)
#   bench-*     benchmarks/<name>.py --out OUT/<name>.json for each name of --benchmarks (native side in the
#               reference interpreter, the two alternating)
#
# Options:
#   --python PY            the environment's interpreter (default: $PYTHON, else python3)
#   --reference-python R   an interpreter with a CUDA build of torch for the native side (default: PY when its torch
#                          is a CUDA build); flagos is never registered there
#   --wheel WHL            the torch_fl wheel installed in PY, for preflight
#   --preflight EXE        torch-fl-preflight to run (default: beside PY, else on PATH)
#   --pytest-path DIR      a folder holding pytest, put on PYTHONPATH for the suite only, so that PY's environment
#                          holds only what the wheel needs
#   --build                build torch_fl for the cuda platform against PY's torch first (it must be a CUDA build)
#   --pgo                  with --build: a profile-guided build, its profile from the layer's workloads run here
#   --only STEPS           comma-separated subset of: build,preflight,demo,gpu-suite,bench
#   --opinfo-shards N      processes for the OpInfo tier (default 4; 0 leaves the tier out): its reference step
#                          computes native results for every case, and one process takes far longer than a call
#   --benchmarks NAMES     comma-separated benchmarks/ scripts for the bench step (default: gpu_small_ops,
#                          gpu_matmul,gpu_transformer, and gpu_ddp_step where PY's torch has NCCL: stock torch+cpu
#                          has none, so flagos's process group has no engine there)
#   --expect-no-gpu        on a machine without a GPU: every step must behave as it must there (the demo must not
#                          crash, the suite must skip, the benchmarks must refuse with exit 2); for CI and dry runs
#
# Exit codes: 0 every step as expected, 1 a step was not, 2 unusable input (one line: the problem, then the fix).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RECORD="$ROOT/tools/gpu_check_results.py"
PY=${PYTHON:-python3} REF="" WHEEL="" PREFLIGHT="" PYTEST_PATH="" OUT="" BUILD=0 PGO=0 NO_GPU=0
ONLY="build,preflight,demo,gpu-suite,bench" BENCHMARKS="" OPINFO_SHARDS=4
die() { echo "tools/gpu-check.sh: $1" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) PY=${2:?}; shift 2 ;;
    --reference-python) REF=${2:?}; shift 2 ;;
    --wheel) WHEEL=${2:?}; shift 2 ;;
    --preflight) PREFLIGHT=${2:?}; shift 2 ;;
    --pytest-path) PYTEST_PATH=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --build) BUILD=1; shift ;;
    --pgo) PGO=1; shift ;;
    --only) ONLY=${2:?}; shift 2 ;;
    --benchmarks) BENCHMARKS=${2:?}; shift 2 ;;
    --opinfo-shards) OPINFO_SHARDS=${2:?}; shift 2 ;;
    --expect-no-gpu) NO_GPU=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument ($1) — see --help" ;;
  esac
done
[[ -n "$OUT" ]] || die "no --out folder given — pass --out DIR for results.json and the logs"
[[ $PGO == 0 || $BUILD == 1 ]] || die "--pgo shapes the build — pass --build with it"
[[ $OPINFO_SHARDS =~ ^[0-9]+$ ]] || die "--opinfo-shards $OPINFO_SHARDS is not a count — give 0 or more processes"
IFS=, read -ra _steps <<<"$ONLY"
if [[ -z "$BENCHMARKS" ]]; then
  BENCHMARKS="gpu_small_ops,gpu_matmul,gpu_transformer"
  if "$PY" -c "import sys, torch.distributed as d; sys.exit(not d.is_nccl_available())" 2>/dev/null; then
    BENCHMARKS+=",gpu_ddp_step"
  fi
fi
IFS=, read -ra _benchmarks <<<"$BENCHMARKS"
for b in "${_benchmarks[@]}"; do
  [[ -f "$ROOT/benchmarks/device/$b.py" ]] || die "no benchmark benchmarks/device/$b.py — name scripts of benchmarks/device/ in --benchmarks"
done
for s in "${_steps[@]}"; do
  [[ ",build,preflight,demo,gpu-suite,bench," == *",$s,"* ]] || die "unknown step in --only ($s) — give build,preflight,demo,gpu-suite,bench"
done
wants() { [[ ",$ONLY," == *",$1,"* ]]; }
# An absolute path, links kept (a venv's python is a link whose location names the venv).
absolute() { local p; p=$(command -v "$1") || return 1; [[ $p == /* ]] || p="$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"; echo "$p"; }
_py=$(absolute "$PY") || die "no Python at $PY — pass --python with the environment's interpreter"
PY=$_py
[[ -z "$WHEEL" || -f "$WHEEL" ]] || die "no wheel at $WHEEL — pass the torch_fl wheel installed in $PY, or leave --wheel out"
[[ -z "$PYTEST_PATH" || -d "$PYTEST_PATH" ]] || die "no folder at $PYTEST_PATH — pass the folder pytest was installed into (--target)"
[[ -z "$PYTEST_PATH" ]] || PYTEST_PATH=$(cd "$PYTEST_PATH" && pwd)
[[ -z "$PREFLIGHT" ]] || { _pf=$(absolute "$PREFLIGHT") && PREFLIGHT=$_pf; } || die "no torch-fl-preflight at $PREFLIGHT — pass its path or leave --preflight out"
if [[ -n "$REF" ]]; then _ref=$(absolute "$REF") && REF=$_ref || die "no reference interpreter at $REF — pass a Python with a CUDA build of torch"; fi
mkdir -p "$OUT" || die "cannot create $OUT — pass a writable folder"
OUT=$(cd "$OUT" && pwd) RESULTS="$OUT/results.json"
[[ -n "$WHEEL" ]] && WHEEL=$(cd "$(dirname "$WHEEL")" && pwd)/$(basename "$WHEEL")
rm -f "$RESULTS"

GPU=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1 && GPU=1
[[ $GPU == 0 && $NO_GPU == 0 ]] && die "no NVIDIA GPU answers here (nvidia-smi) — run on the GPU machine, or pass --expect-no-gpu"
[[ $GPU == 1 && $NO_GPU == 1 ]] && die "a GPU answers here but --expect-no-gpu was given — leave it out"

# Probes of PY's torch without the backend autoload, which would import torch_fl (maybe not built yet).
probe() { TORCH_DEVICE_BACKEND_AUTOLOAD=0 FLAGOS_NO_STARTUP_HOOK=1 "$1" -c "import torch; print($2)" 2>/dev/null; }
torch_version=$(probe "$PY" torch.__version__) || die "$PY cannot import torch — pass --python with an environment that has it"
cuda=$(probe "$PY" 'torch.version.cuda or ""')
if [[ -z "$REF" && -n "$cuda" ]]; then REF=$PY; fi
if [[ -z "$REF" && $NO_GPU == 0 ]] && { wants gpu-suite || wants bench; }; then
  die "$PY has torch $torch_version, not a CUDA build — pass --reference-python with a Python whose torch is one (for example the machine's own)"
fi
if [[ -n "$REF" && $NO_GPU == 0 ]]; then
  ref_cuda=$(probe "$REF" 'torch.version.cuda or ""') || die "$REF cannot import torch — pass a Python with a CUDA build of torch"
  [[ -n "$ref_cuda" ]] || die "$REF's torch is not a CUDA build — pass --reference-python with one"
fi
{ echo "python: $PY (torch $torch_version${cuda:+, CUDA $cuda})"; echo "reference: ${REF:-none}"; } >>"$OUT/gpu.txt"

RECORD_PY="$PY"
# shellcheck source=tools/_step.sh
source "$ROOT/tools/_step.sh"
# Every step runs from OUT: no source checkout's unbuilt torch_fl on sys.path.
cd "$OUT" || die "cannot enter $OUT"

if [[ $BUILD == 1 ]] && wants build; then
  [[ -n "$cuda" ]] || die "--build needs a CUDA build of torch in $PY (it has $torch_version) — install the wheel instead"
  build=(env -C "$ROOT" FLAGOS_PLATFORM=cuda FLAGOS_WHEEL_LOCAL_VERSION="cuda$cuda")
  install=("$PY" -m pip install --no-build-isolation --no-deps --no-index -v .)
  if [[ $PGO == 1 ]]; then
    profile="$OUT/pgo-profile"
    rm -rf "$profile"
    step build-instrumented ok -- "${build[@]}" FLAGOS_PGO=generate FLAGOS_PGO_DIR="$profile" "${install[@]}"
    step pgo-workload ok -- "$PY" "$ROOT/tools/pgo_workload.py" --profile-dir "$profile"
    build+=(FLAGOS_PGO=use FLAGOS_PGO_DIR="$profile")
  fi
  step build ok -- "${build[@]}" "${install[@]}"
fi

if wants preflight; then
  manifest=$("$PY" -c 'import importlib.util, pathlib; s = importlib.util.find_spec("torch_fl")
print(pathlib.Path(s.origin).parent / "compatibility.json" if s and s.origin else "")' 2>/dev/null)
  if [[ -n "$WHEEL" || -f "$manifest" ]]; then
    if [[ -z "$PREFLIGHT" ]]; then
      PREFLIGHT=$(dirname "$PY")/torch-fl-preflight
      [[ -x "$PREFLIGHT" ]] || PREFLIGHT=$(command -v torch-fl-preflight) \
        || die "torch-fl-preflight is neither beside $PY nor on PATH — pip install preflight/ or pass --preflight"
    fi
    subject=(--installed)
    [[ -n "$WHEEL" ]] && subject=(--wheel "$WHEEL")
    expect=ok
    [[ $NO_GPU == 1 ]] && expect=record  # without a driver the cuda wheel's libcuda.so.1 is missing
    step preflight "$expect" --json-file "$OUT/preflight.json" -- \
      bash -c '"$@" >"'"$OUT"'/preflight.json"' _ "$PREFLIGHT" "${subject[@]}" --python "$PY" --check-installed --json
  fi
fi

if wants demo; then
  DEMO="import torch; x = torch.randn(1024, 1024, device='flagos'); print((x @ x).device)"
  if [[ $NO_GPU == 1 ]]; then step demo clean -- "$PY" -c "$DEMO"
  else step demo ok --last-line flagos:0 -- "$PY" -c "$DEMO"; fi
fi

if wants gpu-suite; then
  expect=ok
  [[ $NO_GPU == 1 ]] && expect=skip
  suite=(env ${PYTEST_PATH:+PYTHONPATH=$PYTEST_PATH} ${REF:+FLAGOS_TEST_REFERENCE_PYTHON=$REF}
         "$PY" -m pytest -c "$ROOT/pyproject.toml" --rootdir "$ROOT" -p no:cacheprovider -q)
  step gpu-suite "$expect" --junit "$OUT/gpu-suite.xml" -- \
    "${suite[@]}" "$ROOT/tests/gpu" "$ROOT/tests/distributed/test_nccl_gpu.py" -m "gpu and not opinfo" \
    --junitxml="$OUT/gpu-suite.xml"
  # The OpInfo tier: its processes run side by side and are recorded one after the other once all are done.
  for ((k = 0; k < OPINFO_SHARDS; k++)); do
    echo "== gpu-opinfo-$k" >&2
    ( t=$SECONDS
      "${suite[@]}" "$ROOT/tests/gpu/test_opinfo_cuda.py" -m gpu --shard "$k/$OPINFO_SHARDS" \
        --junitxml="$OUT/gpu-opinfo-$k.xml" >"$OUT/gpu-opinfo-$k.log" 2>&1
      echo "$? $((SECONDS - t))" >"$OUT/gpu-opinfo-$k.rc" ) &
  done
  wait
  for ((k = 0; k < OPINFO_SHARDS; k++)); do
    read -r rc seconds <"$OUT/gpu-opinfo-$k.rc"
    record_step "gpu-opinfo-$k" "$expect" "$rc" "$seconds" --junit "$OUT/gpu-opinfo-$k.xml"
  done
fi

if wants bench; then
  expect=ok
  [[ $NO_GPU == 1 ]] && expect=refuse
  for bench in "${_benchmarks[@]}"; do
    step "bench-$bench" "$expect" --json-file "$OUT/$bench.json" -- \
      "$PY" "$ROOT/benchmarks/device/$bench.py" --out "$OUT/$bench.json" ${REF:+--reference-python "$REF"}
  done
fi

finish=()
[[ $NO_GPU == 1 ]] && finish=(--no-gpu)
"$PY" "$RECORD" finish --results "$RESULTS" "${finish[@]}"
