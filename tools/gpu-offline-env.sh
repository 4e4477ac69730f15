#!/usr/bin/env bash
# tools/gpu-offline-env.sh (--pieces DIR | --payload DIR) --out DIR [options]
#
# On a Linux machine with an NVIDIA GPU and NO network: from local files only (what tools/gpu-offline-pack.sh
# assembled), set up a Python 3.11 environment holding only stock torch X.Y.Z+cpu, the torch_fl cuda wheel
# and that wheel's requirements, then prove it, in this order, and write every step's result into
# OUT/results.json (logs beside it):
#
#   reassemble          the pieces, every sha256 checked first (skipped with --payload)
#   python              the carried relocatable Python 3.11, unpacked; ssl/ctypes/zlib import
#   rebuild             only when the pack left out wheels the machine has (--target-has): rebuilds them from
#                       the --machine-nvidia site-packages, every file checked against the wheel's RECORD sha256
#   install             venv + pip install --no-index --find-links wheelhouse <torch_fl wheel> (torch CPU from
#                       the wheelhouse); the machine's own torch is never touched nor on the path
#   native              only when the pack carried --native-torch: env-native, a venv of that CUDA build of the same
#                       torch and the suite's tools, from the payload alone; the native side of the GPU check
#                       (--reference-python, when given, still names the native side instead)
#   stand-in-sdk        only for a CUDA-compatible vendor's wheel (the pack's --sdk-runtime-from): the carried
#                       nvidia-*/cuda-toolkit wheels laid out as the vendor SDK at --stand-in-sdk (tools/standin_sdk.py)
#   preflight           torch-fl-preflight --wheel <wheel> --python <env python> --check-installed --json,
#                       before anything has imported torch_fl (preflight itself lives in a separate tools venv)
#   gpu-check           tools/gpu-check.sh --only demo,gpu-suite,bench with that environment's python (pytest from the
#                       wheelhouse, on PYTHONPATH only for the suite, so the environment holds only what the wheel
#                       needs) and env-native or the machine's own CUDA torch as reference interpreter; its results.json is
#                       OUT/gpu-check/results.json, included in this step's record
#   machine-nvidia-*    with --machine-nvidia: a second environment, the same torch CPU and torch_fl, whose
#                       nvidia packages are the machine's own (linked in from the given site-packages) instead
#                       of the ones the wheel requires: preflight against it, then an import attempt; both are
#                       recorded, neither decides the exit code
#
# Options:
#   --pieces DIR          the pieces and manifest.json (reassembled into WORK/payload first)
#   --payload DIR         an already reassembled payload folder (payload.json inside)
#   --out DIR             results.json and logs (required)
#   --work DIR            where the payload, Python and environments go (default ${TMPDIR:-/tmp}/torch-fl-gpu-offline)
#   --machine-nvidia DIR  the machine's own site-packages holding nvidia/ (or that nvidia/ folder itself)
#   --reference-python R  with a GPU, required unless the payload carries a native torch: the machine's own Python
#                         with a CUDA build of torch, for the native results the GPU suite and the benchmarks compare
#                         with (tools/gpu-check.sh --reference-python)
#   --stand-in-sdk DIR    where a CUDA-compatible vendor's SDK is laid out: the prefix the wheel's RPATH names
#                         (bundlers/ppu.toml: /usr/local/PPU_SDK); the payload says whether its wheel needs one
#   --stop-after STEP     stop after install, tools or preflight (a quick check of the carried files)
#   --rehearsal           on a machine without a GPU: the GPU check runs with --expect-no-gpu (the demo must not
#                         crash, the suite must skip, the benchmarks must refuse), and preflight is also run with a synthetic driver
#                         stub (libcuda.so.1 exporting the cu* entry points the wheel references) on
#                         LD_LIBRARY_PATH, where it must pass -- the stub stands for the driver, nothing more
#   PYTHON                (environment) the interpreter that runs tools/gpu_offline and the recorder here
#                         (default python3, >= 3.8)
#
# Exit codes: 0 the main path passed (with --rehearsal: behaved as it must without a GPU), 1 a step did not,
# 2 unusable input (one line: the problem, then the fix).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HELPER="$ROOT/tools/gpu_offline" RECORD="$ROOT/tools/gpu_check_results.py"
HOSTPY=${PYTHON:-python3}
PIECES="" PAYLOAD="" OUT="" WORK="${TMPDIR:-/tmp}/torch-fl-gpu-offline" MACHINE_NV="" REHEARSAL=0 STOP="" REFERENCE=""
STANDIN_SDK=""
die() { echo "tools/gpu-offline-env.sh: $1" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pieces) PIECES=${2:?}; shift 2 ;;
    --payload) PAYLOAD=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --work) WORK=${2:?}; shift 2 ;;
    --machine-nvidia) MACHINE_NV=${2:?}; shift 2 ;;
    --rehearsal) REHEARSAL=1; shift ;;
    --reference-python) REFERENCE=${2:?}; shift 2 ;;
    --stand-in-sdk) STANDIN_SDK=${2:?}; shift 2 ;;
    --stop-after) STOP=${2:?}; shift 2
      [[ $STOP == install || $STOP == tools || $STOP == preflight ]] ||
        die "unknown step for --stop-after ($STOP) — give install, tools or preflight" ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument ($1) — see --help" ;;
  esac
done
[[ -n "$OUT" ]] || die "no --out folder given — pass --out DIR for results.json and the logs"
[[ -n "$PIECES" || -n "$PAYLOAD" ]] || die "neither --pieces nor --payload given — pass the folder tools/gpu-offline-pack.sh made"
[[ -z "$PIECES" || -f "$PIECES/manifest.json" ]] || die "no manifest.json in $PIECES — carry it with the pieces"
[[ -z "$PAYLOAD" || -f "$PAYLOAD/payload.json" ]] || die "no payload.json in $PAYLOAD — pass the folder that holds it"
if [[ -n "$MACHINE_NV" ]]; then
  [[ "$(basename "$MACHINE_NV")" == nvidia ]] && MACHINE_NV=$(dirname "$MACHINE_NV")
  [[ -d "$MACHINE_NV/nvidia" ]] || die "no nvidia/ folder in $MACHINE_NV — pass the site-packages of the machine's CUDA torch"
fi
command -v "$HOSTPY" >/dev/null || die "no $HOSTPY here — set PYTHON to any Python >= 3.8"
mkdir -p "$OUT" "$WORK" || die "cannot create $OUT or $WORK — pass writable folders"
OUT=$(cd "$OUT" && pwd) WORK=$(cd "$WORK" && pwd)
RESULTS="$OUT/results.json"
# Only the carried files: no pip configuration of this machine (PIP_* variables, pip.conf: index URLs,
# find-links, constraints) applies.
while read -r var; do unset "$var"; done < <(compgen -e | grep '^PIP_')
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
rm -f "$RESULTS"
GPU=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1 && GPU=1
if [[ $GPU == 0 && $REHEARSAL == 0 ]]; then
  die "no NVIDIA GPU answers here (nvidia-smi) — run on the GPU machine, or pass --rehearsal to check the procedure"
fi

RECORD_PY="$HOSTPY"
# shellcheck source=tools/_step.sh
source "$ROOT/tools/_step.sh"
finish() {
  local extra=()
  [[ $REHEARSAL == 1 ]] && extra=(--no-gpu)
  "$HOSTPY" "$RECORD" finish --results "$RESULTS" "${extra[@]}"
  exit $?
}
abort() { echo "tools/gpu-offline-env.sh: $1 — see $OUT/$2.log" >&2; finish; }

# --- payload and Python -----------------------------------------------------------------------------
if [[ -n "$PIECES" ]]; then
  PAYLOAD="$WORK/payload"
  rm -rf "$PAYLOAD"
  step reassemble ok -- "$HOSTPY" "$HELPER" reassemble --pieces "$PIECES" --dest "$PAYLOAD" \
    || abort "reassembly failed" reassemble
fi
PAYLOAD=$(cd "$PAYLOAD" && pwd)
meta() { "$HOSTPY" -c 'import functools, json, sys; print(functools.reduce(lambda d, k: d[k], sys.argv[2:], json.load(open(sys.argv[1]))))' "$PAYLOAD/payload.json" "$@"; }
WH="$PAYLOAD/wheelhouse"
TORCH_FL_WHEEL="$PAYLOAD/$(meta torch_fl_wheel)"
PIPWHL="$PAYLOAD/$(meta pip_wheel)"
PREFLIGHT_WHEEL="$PAYLOAD/$(meta preflight_wheel)"
PYROOT="$WORK/python/$(meta python root)"
NATIVE_TORCH=$(meta native_torch_wheel 2>/dev/null || true)  # only where the pack carried --native-torch
if [[ $GPU == 1 && -z "$REFERENCE" && -z "$NATIVE_TORCH" ]]; then
  die "no --reference-python given and the payload carries no native torch — pass the machine's own Python with a CUDA build of torch (native results), or pack with --native-torch"
fi
floor=$(meta python glibc_floor)
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
"$HOSTPY" -c 'import sys; h, f = (tuple(map(int, v.split("."))) for v in sys.argv[1:]); sys.exit(h < f)' "${have:-0.0}" "$floor" \
  || { echo "glibc ${have:-unknown} < $floor" >"$OUT/glibc.log"; "$HOSTPY" "$RECORD" record --results "$RESULTS" --step glibc --rc 1 --log "$OUT/glibc.log"
       abort "this machine's glibc (${have:-unknown}) is older than the carried Python needs ($floor); pack on an older distribution" glibc; }

rm -rf "$WORK/python" && mkdir -p "$WORK/python"
step python ok --note "version=$(meta python version)" -- bash -c \
  "'$HOSTPY' '$HELPER' unpack --tarball '$PAYLOAD/$(meta python tarball)' --dest '$WORK/python' && env -i PATH=/usr/bin:/bin '$PYROOT/bin/python3' -c 'import sys, ssl, ctypes, zlib, lzma, sqlite3; print(sys.version); print(sys.prefix)'" \
  || abort "the carried Python does not run" python

# new_env DIR: a venv of the carried Python with pip from the wheelhouse (nothing from any index).
new_env() {
  rm -rf "$1" && "$PYROOT/bin/python3" -m venv --without-pip "$1" \
    && "$1/bin/python" "$PIPWHL/pip" install --quiet --no-index --find-links "$WH" pip
}
# Every command of the environments runs with a clean environment: no PYTHONPATH/LD_LIBRARY_PATH of the
# machine's own torch can leak in, and from WORK, so no source checkout's torch_fl shadows the installed one.
clean() { env -i PATH="$1/bin:/usr/bin:/bin" HOME="$HOME" ${TMPDIR:+TMPDIR=$TMPDIR} \
  ${LD_LIBRARY_PATH_KEEP:+LD_LIBRARY_PATH=$LD_LIBRARY_PATH_KEEP} "${@:2}"; }
# The driver (libcuda.so.1) is found where the machine's image puts it: of LD_LIBRARY_PATH keep only the
# folders that hold it, so no CUDA toolkit or torch library folder of the machine's can shadow the carried ones.
LD_LIBRARY_PATH_KEEP=""
IFS=: read -ra _dirs <<<"${LD_LIBRARY_PATH:-}"
for d in "${_dirs[@]}"; do
  [[ -n "$d" && -e "$d/libcuda.so.1" ]] && LD_LIBRARY_PATH_KEEP="${LD_LIBRARY_PATH_KEEP:+$LD_LIBRARY_PATH_KEEP:}$d"
done
echo "LD_LIBRARY_PATH kept: ${LD_LIBRARY_PATH_KEEP:-(none)} of ${LD_LIBRARY_PATH:-(unset)}" >>"$OUT/gpu.txt"
cd "$WORK" || die "cannot enter $WORK — pass a writable --work"

if compgen -G "$PAYLOAD/records/*.dist-info.zip" >/dev/null; then
  if [[ -z "$MACHINE_NV" ]]; then
    echo "the payload leaves out wheels this machine has installed; pass --machine-nvidia SITE_PACKAGES" >"$OUT/rebuild.log"
    "$HOSTPY" "$RECORD" record --results "$RESULTS" --step rebuild --rc 2 --log "$OUT/rebuild.log"
    abort "no --machine-nvidia to rebuild the left-out wheels from" rebuild
  fi
  step rebuild ok --note "site=$MACHINE_NV" -- "$HOSTPY" "$HELPER" rebuild --records "$PAYLOAD/records" \
    --site "$MACHINE_NV" --out "$WH" || abort "the machine's installed packages differ from the left-out wheels" rebuild
fi

MAIN="$WORK/env-main" TOOLS="$WORK/env-tools" PYTEST_SITE="$WORK/pytest-site"
# pytest and whatever else the pack carried for the suite (payloads older than that list carry pytest only)
SUITE_TOOLS=$("$HOSTPY" -c 'import json, shlex, sys; d = json.load(open(sys.argv[1]))
print(" ".join(shlex.quote(t) for t in d.get("suite_tools", ["pytest"])))' "$PAYLOAD/payload.json")
step install ok --note "wheel=$(basename "$TORCH_FL_WHEEL")" -- bash -c "
  $(declare -f new_env); PYROOT='$PYROOT' PIPWHL='$PIPWHL' WH='$WH'
  new_env '$MAIN' && '$MAIN/bin/python' -m pip install --no-index --find-links '$WH' '$TORCH_FL_WHEEL' \
  && '$MAIN/bin/python' -m pip list --format=freeze" || abort "installing from the wheelhouse failed" install
[[ $STOP == install ]] && finish
step tools ok -- bash -c "
  $(declare -f new_env); PYROOT='$PYROOT' PIPWHL='$PIPWHL' WH='$WH'
  new_env '$TOOLS' && '$TOOLS/bin/python' -m pip install --quiet --no-index --find-links '$WH' '$PREFLIGHT_WHEEL' \
  && '$MAIN/bin/python' -m pip install --quiet --no-index --find-links '$WH' --target '$PYTEST_SITE' $SUITE_TOOLS" \
  || abort "installing preflight and the suite's tools ($SUITE_TOOLS) from the wheelhouse failed" tools
if [[ -n "$NATIVE_TORCH" ]]; then
  NATIVE="$WORK/env-native"
  step native ok --note "torch=$(basename "$NATIVE_TORCH")" -- bash -c "
    $(declare -f new_env); PYROOT='$PYROOT' PIPWHL='$PIPWHL' WH='$WH'
    new_env '$NATIVE' && '$NATIVE/bin/python' -m pip install --quiet --no-index --find-links '$WH' \
      --find-links '$PAYLOAD/native' '$PAYLOAD/$NATIVE_TORCH' $SUITE_TOOLS && '$NATIVE/bin/python' -m pip list --format=freeze" \
    || abort "installing the native torch from the payload failed" native
  REFERENCE=${REFERENCE:-$NATIVE/bin/python}
fi
[[ $STOP == tools ]] && finish

# --- a CUDA-compatible vendor's SDK, laid out from the carried runtime wheels ----------------------------
mapfile -t SDK_REQS < <("$HOSTPY" -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1])).get("stand_in_sdk", {}).get("requirements", [])))' "$PAYLOAD/payload.json" | sed '/^$/d')
if [[ ${#SDK_REQS[@]} -gt 0 ]]; then
  if [[ -z "$STANDIN_SDK" ]]; then
    echo "the payload's wheel takes its runtime from a vendor SDK; pass --stand-in-sdk DIR (the prefix its RPATH names)" >"$OUT/stand-in-sdk.log"
    "$HOSTPY" "$RECORD" record --results "$RESULTS" --step stand-in-sdk --rc 2 --log "$OUT/stand-in-sdk.log"
    abort "no --stand-in-sdk for the vendor wheel's runtime" stand-in-sdk
  fi
  sdk_args=()
  for r in "${SDK_REQS[@]}"; do sdk_args+=(--requirement "$r"); done
  step stand-in-sdk ok --note "root=$STANDIN_SDK" -- "$MAIN/bin/python" "$ROOT/tools/standin_sdk.py" --out "$STANDIN_SDK" \
    --no-toolkit --pip "$MAIN/bin/python" --find-links "$WH" "${sdk_args[@]}" || abort "laying out the stand-in SDK failed" stand-in-sdk
fi

# --- preflight, before anything imports torch_fl -----------------------------------------------------
preflight() {  # preflight NAME EXPECT ENV_PYTHON [LD_LIBRARY_PATH]
  local keep=$LD_LIBRARY_PATH_KEEP
  [[ -n "${4:-}" ]] && LD_LIBRARY_PATH_KEEP="$4${keep:+:$keep}"
  step "$1" "$2" --json-file "$OUT/$1.json" -- bash -c "$(declare -f clean); LD_LIBRARY_PATH_KEEP='$LD_LIBRARY_PATH_KEEP'
    clean '$TOOLS' torch-fl-preflight --wheel '$TORCH_FL_WHEEL' --python '$3' --check-installed --json >'$OUT/$1.json'"
  local rc=$?
  LD_LIBRARY_PATH_KEEP=$keep
  return $rc
}
if [[ $GPU == 1 ]]; then
  preflight preflight ok "$MAIN/bin/python"
else
  # Without a driver only libcuda.so.1 (needed by the NVRTC glue) and its cu* symbols may be missing;
  # with a synthetic stub standing for the driver every gate must pass.
  preflight preflight-no-driver fail "$MAIN/bin/python"
  step driver-stub ok -- "$HOSTPY" "$HELPER" driver-stub --preflight-json "$OUT/preflight-no-driver.json" --out "$WORK/driver-stub"
  preflight preflight ok "$MAIN/bin/python" "$WORK/driver-stub"
fi

[[ $STOP == preflight ]] && finish

# --- the demo, the GPU suite, the benchmarks: tools/gpu-check.sh, with the machine's CUDA torch as reference ---
DEMO="import torch; x = torch.randn(1024, 1024, device='flagos'); print((x @ x).device)"
check=(--only demo,gpu-suite,bench --python "$MAIN/bin/python" --pytest-path "$PYTEST_SITE" --out "$OUT/gpu-check")
if [[ $GPU == 1 ]]; then
  check+=(--reference-python "$REFERENCE")
else
  check+=(--expect-no-gpu)
fi
step gpu-check ok --json-file "$OUT/gpu-check/results.json" -- clean "$MAIN" "$ROOT/tools/gpu-check.sh" "${check[@]}"

# --- the second environment: the machine's own nvidia packages ---------------------------------------
# (not for a vendor SDK's wheel: its runtime is the SDK's, never the nvidia packages beside torch)
if [[ -n "$MACHINE_NV" && ${#SDK_REQS[@]} -eq 0 ]]; then
  OTHER="$WORK/env-machine-nvidia"
  step machine-nvidia-install record --note "nvidia_from=$MACHINE_NV" -- bash -c "
    $(declare -f new_env); PYROOT='$PYROOT' PIPWHL='$PIPWHL' WH='$WH'
    new_env '$OTHER' && '$OTHER/bin/python' -m pip install --quiet --no-index --find-links '$WH' '$WH/$(basename "$(meta torch_wheel)")' \
    && '$OTHER/bin/python' -m pip install --quiet --no-index --no-deps '$TORCH_FL_WHEEL' \
    && site=\$('$OTHER/bin/python' -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])') \
    && for p in '$MACHINE_NV'/nvidia '$MACHINE_NV'/nvidia_*.dist-info '$MACHINE_NV'/cuda_toolkit-*.dist-info; do
         [[ -e \$p ]] && ln -s \"\$p\" \"\$site/\"; done; ls -l \"\$site\" | grep -i -e nvidia -e cuda_toolkit"
  stub=""
  [[ $GPU == 0 ]] && stub="$WORK/driver-stub"
  preflight machine-nvidia-preflight record "$OTHER/bin/python" "$stub"
  step machine-nvidia-import record --predicted-by "$OUT/machine-nvidia-preflight.json" -- clean "$OTHER" python -c "$DEMO"
fi
finish
