#!/usr/bin/env bash
# tools/gpu-offline-pack.sh --wheel TORCH_FL_CUDA_WHEEL [options]
#
# On the CPU machine that built the cuda wheel (torch-fl-build --platform cuda), assemble everything a GPU
# machine with NO network needs for tools/gpu-offline-env.sh, and cut it into pieces small enough to carry:
#
#   OUT/payload/payload.json          what is what (roles of the files below, Python version, glibc floor)
#   OUT/payload/python/cpython-*.tar.xz   a relocatable Python 3.11 (tools/gpu_offline pack-python)
#   OUT/payload/wheelhouse/*.whl      stock torch X.Y.Z+cpu, the torch_fl cuda wheel, every wheel they require
#                                     (nvidia-*, cuda-toolkit, ...), pip, pytest and its deps, the
#                                     torch-fl-preflight wheel and its deps
#   OUT/payload/native/*.whl          with --native-torch: that CUDA build of torch and what it requires beyond
#                                     the wheelhouse (tools/gpu-offline-env.sh makes it the native side)
#   OUT/pieces/payload.part-NNN       consecutive slices of the payload, each <= --piece-mib MiB
#   OUT/pieces/manifest.json          sha256 and size of every piece and every payload file
#
# Options:
#   --wheel WHL        the torch_fl cuda wheel (required)
#   --out DIR          default ${FLAGOS_CI_WORK:-build/ci}/gpu-offline: inside the repository's ignored build/
#                      folder, from which a transfer call can carry the pieces
#   --python PY        the Python 3.11 to pack (default python3.11); its pip downloads the wheels
#   --torch-wheel WHL  the stock torch CPU wheel (default: pip download torch==X.Y.Z+cpu, X.Y.Z from the wheel)
#   --native-torch WHL the CUDA build of the same torch X.Y.Z (torch-X.Y.Z-*.whl from PyPI, whose torch/lib the
#                      wheel's CUDA libraries come from): carried as the native side, so that the benchmarks and
#                      the GPU suite compare flagos with native CUDA of one release on the same nvidia wheels
#   --find-links DIR   extra local wheel folders for pip (repeatable), e.g. the nvidia wheels torch-fl-build cached
#   --preflight-wheel WHL  a torch-fl-preflight wheel to carry (default: built from preflight/ here)
#   --tool REQ         a tool the GPU run needs besides the environment (repeatable; default: pip pytest)
#   --sdk-runtime-from WHL  for a CUDA-compatible vendor's forked-libtorch wheel (ppu) built with the CUDA torch
#                      wheel WHL as its "fork": WHL's nvidia-*/cuda-toolkit requirements travel too, and
#                      tools/gpu-offline-env.sh lays them out as the vendor SDK (tools/standin_sdk.py) on the target
#   --no-index         take every wheel from --find-links folders, none from an index
#   --target-has FREEZE  `python3 -m pip list --format=freeze` of the GPU machine: wheels tagged py3-none-* /
#                      py2.py3-none-* (nvidia-*, cuda-toolkit) it has installed at the same version are not
#                      carried, only their .dist-info; tools/gpu-offline-env.sh rebuilds them there from the
#                      installed files, each checked against the wheel's RECORD sha256 (needs --machine-nvidia)
#   --xz-preset N      xz level of the Python tarball (default 6)
#   --piece-mib N      piece size (default: the largest that fits a transfer call of at most 64 MiB
#                      beside this checkout's working tree, which every call copies too)
#
# Carrying the pieces (see tools/README.md): the target has no network; a runner copies the repository plus
# ignored paths inside it, at most 64 MiB a call, and runs one command there.
#   0. (saves most of the carrying) one call that saves the target's `python3 -m pip list --format=freeze`,
#      then pack here with --target-has <that file>: the nvidia-*/cuda-toolkit wheels the target already has
#      at the same version stay here.
#   python3 tools/gpu_offline carry-calls --pieces build/ci/gpu-offline/pieces
# prints the calls, one JSON object ({carry, command, timeout_s}) a line, to make in order:
#   * one call per piece: it copies the piece OUTSIDE the working tree (/tmp/flagos-pieces: the next call's
#     tree replaces the repository copy) and prints how many pieces the target holds; when the count drops
#     (a fresh machine), carry from piece 000 again.
#   * the last call carries the last piece and manifest.json and runs tools/gpu-offline-env.sh, which
#     reassembles first (every sha256 checked; a bad or missing piece is named: carry that one again) and
#     then runs tools/gpu-check.sh; results.json and an archive of every log come back.
# The pieces may stay outside the repository behind an ignored link (ln -s /elsewhere build/ci/gpu-offline).
# Exit codes: 0 ok, 1 a step failed, 2 unusable input (one line: the problem, then the fix).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HELPER="$ROOT/tools/gpu_offline"
WHEEL="" OUT="" PY=python3.11 TORCH_WHEEL="" NATIVE_TORCH="" PREFLIGHT_WHEEL="" PIECE_MIB="" XZ=6 TARGET_HAS="" SDK_FROM=""
FIND_LINKS=() TOOLS=()
die() { echo "tools/gpu-offline-pack.sh: $1" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --wheel) WHEEL=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --python) PY=${2:?}; shift 2 ;;
    --torch-wheel) TORCH_WHEEL=${2:?}; shift 2 ;;
    --native-torch) NATIVE_TORCH=${2:?}; shift 2 ;;
    --find-links) FIND_LINKS+=(--find-links "${2:?}"); shift 2 ;;
    --no-index) FIND_LINKS+=(--no-index); shift ;;
    --preflight-wheel) PREFLIGHT_WHEEL=${2:?}; shift 2 ;;
    --tool) TOOLS+=("${2:?}"); shift 2 ;;
    --piece-mib) PIECE_MIB=${2:?}; shift 2 ;;
    --xz-preset) XZ=${2:?}; shift 2 ;;
    --target-has) TARGET_HAS=${2:?}; shift 2 ;;
    --sdk-runtime-from) SDK_FROM=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument ($1) — see --help" ;;
  esac
done
[[ -n "$WHEEL" ]] || die "no torch_fl wheel given — pass --wheel dist/torch_fl-*+cuda*.whl (torch-fl-build --platform cuda)"
[[ -f "$WHEEL" && "$WHEEL" == *.whl ]] || die "no wheel file at $WHEEL — pass the path torch-fl-build printed"
[[ -z "$SDK_FROM" || -f "$SDK_FROM" ]] || die "no CUDA torch wheel at $SDK_FROM — pass the wheel the forked-libtorch wheel was built with"
[[ "$(basename "$WHEEL")" == torch_fl-*+cuda* || ( -n "$SDK_FROM" && "$(basename "$WHEEL")" == torch_fl-*.whl ) ]] \
  || die "$(basename "$WHEEL") is not a torch_fl cuda wheel — build one with torch-fl-build --platform cuda, or pass --sdk-runtime-from for a CUDA-compatible vendor's wheel"
command -v "$PY" >/dev/null || die "no Python at $PY — pass --python with a Python 3.11"
# An absolute path: pip runs build backends with its own sys.executable from other folders, where a
# relative one (a relative PATH entry) would not be found.
PY=$(realpath -s "$(command -v "$PY")")
[[ "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" == 3.11 ]] || die "$PY is not Python 3.11 — pass --python with one"
[[ -n "$TORCH_WHEEL" && ! -f "$TORCH_WHEEL" ]] && die "no torch wheel at $TORCH_WHEEL — pass --torch-wheel torch-X.Y.Z+cpu-*.whl or leave it out"
[[ -n "$NATIVE_TORCH" && ! -f "$NATIVE_TORCH" ]] && die "no torch wheel at $NATIVE_TORCH — pass --native-torch torch-X.Y.Z-*.whl (a CUDA build) or leave it out"
[[ -n "$PREFLIGHT_WHEEL" && ! -f "$PREFLIGHT_WHEEL" ]] && die "no preflight wheel at $PREFLIGHT_WHEEL — pass a torch_fl_preflight-*.whl or leave it out"
[[ ${#TOOLS[@]} -gt 0 ]] || TOOLS=(pip pytest)
[[ -z "$TARGET_HAS" || -f "$TARGET_HAS" ]] || die "no freeze file at $TARGET_HAS — save the GPU machine's python3 -m pip list --format=freeze there"
[[ -z "$TORCH_WHEEL" || "$(basename "$TORCH_WHEEL")" == torch-*+cpu-* ]] || die "$(basename "$TORCH_WHEEL") is not a torch CPU wheel — pass torch-X.Y.Z+cpu-*.whl"
OUT=${OUT:-${FLAGOS_CI_WORK:-$ROOT/build/ci}/gpu-offline}
WHEEL=$(cd "$(dirname "$WHEEL")" && pwd)/$(basename "$WHEEL")
PAYLOAD="$OUT/payload" WH="$OUT/payload/wheelhouse"
say() { printf '== %s\n' "$*" >&2; }
t0=$SECONDS

rm -rf "$PAYLOAD" && mkdir -p "$WH" "$PAYLOAD/python"
torch_req=$("$PY" - "$WHEEL" <<'EOF'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        m = re.match(r"Requires-Dist: torch\s*==\s*([\w.]+)", line)
        if m:
            print(m.group(1))
EOF
)
[[ -n "$torch_req" ]] || die "$(basename "$WHEEL") has no exact torch requirement — build it with torch-fl-build --platform cuda"
case "$(basename "${NATIVE_TORCH:-torch-$torch_req-}")" in
  torch-"$torch_req"-*|torch-"$torch_req"+cu*) ;;
  *) die "$(basename "$NATIVE_TORCH") is not a CUDA build of torch $torch_req, which the wheel requires — pass that release's, or leave --native-torch out" ;;
esac

say "Python: a relocatable copy of $PY"
"$PY" "$HELPER" pack-python --python "$PY" --xz-preset "$XZ" \
  --out "$PAYLOAD/python/cpython-$("$PY" -c 'import platform; print(platform.python_version())')-x86_64-linux.tar.xz" >"$OUT/python.json"

if [[ -z "$TORCH_WHEEL" ]]; then
  say "torch $torch_req+cpu"
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: "${FIND_LINKS[@]}" -d "$OUT/torch-cpu" "torch==$torch_req+cpu"
  TORCH_WHEEL=$(ls "$OUT"/torch-cpu/torch-"$torch_req"+cpu-*.whl | head -1)
fi

if [[ -z "$PREFLIGHT_WHEEL" ]]; then
  say "preflight wheel"
  "$PY" -m pip wheel --quiet --no-deps -w "$OUT/preflight" "$ROOT/preflight" >/dev/null
  PREFLIGHT_WHEEL=$(ls "$OUT"/preflight/torch_fl_preflight-*.whl | head -1)
fi

# A CUDA-compatible vendor's wheel takes its runtime from the vendor SDK on the target: the CUDA torch wheel's
# runtime requirements travel for tools/standin_sdk.py to lay out there.
SDK_REQS=()
if [[ -n "$SDK_FROM" ]]; then
  mapfile -t SDK_REQS < <("$PY" "$ROOT/tools/standin_sdk.py" --requirements-from "$SDK_FROM" --list-requirements)
  [[ ${#SDK_REQS[@]} -gt 0 ]] || die "$(basename "$SDK_FROM") names no CUDA runtime requirements — pass the CUDA torch wheel"
fi

# Every requirement, resolved once, with the CPU torch given as a file so that torch==X.Y.Z cannot pick the
# CUDA build of the same version from an index.  pip copies local files into -d.
say "wheelhouse: the torch_fl wheel, torch CPU, their requirements, pip, pytest, preflight's requirements"
"$PY" -m pip download --quiet --only-binary=:all: "${FIND_LINKS[@]}" --find-links "$WH" -d "$WH" \
  "$WHEEL" "$TORCH_WHEEL" "$PREFLIGHT_WHEEL" "${TOOLS[@]}" ${SDK_REQS[@]+"${SDK_REQS[@]}"}

say "checking the wheelhouse resolves offline"
"$PY" -m pip install --quiet --dry-run --ignore-installed --no-index --find-links "$WH" \
  "$WH/$(basename "$WHEEL")" "$WH/$(basename "$TORCH_WHEEL")" "$WH/$(basename "$PREFLIGHT_WHEEL")" "${TOOLS[@]}" \
  ${SDK_REQS[@]+"${SDK_REQS[@]}"} || { echo "tools/gpu-offline-pack.sh: the wheelhouse does not resolve without an index" >&2; exit 1; }
n_torch=$(ls "$WH"/torch-*.whl | wc -l)
[[ "$n_torch" == 1 ]] || { echo "tools/gpu-offline-pack.sh: $n_torch torch wheels in the wheelhouse; expected only the CPU one" >&2; exit 1; }

# The native side: its own requirements resolve against the wheelhouse first (the nvidia wheels are the same
# files), and only what the wheelhouse lacks (triton, cuda-bindings, ...) travels beside it.
if [[ -n "$NATIVE_TORCH" ]]; then
  say "native side: $(basename "$NATIVE_TORCH"), and what it needs beyond the wheelhouse"
  rm -rf "$OUT/native-all" && mkdir -p "$PAYLOAD/native"
  "$PY" -m pip download --quiet --only-binary=:all: "${FIND_LINKS[@]}" --find-links "$WH" -d "$OUT/native-all" \
    "$NATIVE_TORCH"
  for f in "$OUT"/native-all/*.whl; do [[ -e "$WH/$(basename "$f")" ]] || mv "$f" "$PAYLOAD/native/"; done
  "$PY" -m pip install --quiet --dry-run --ignore-installed --no-index --find-links "$WH" --find-links "$PAYLOAD/native" \
    "$PAYLOAD/native/$(basename "$NATIVE_TORCH")" "${TOOLS[@]}" \
    || { echo "tools/gpu-offline-pack.sh: the native side does not resolve without an index" >&2; exit 1; }
fi

rm -rf "$OUT/omitted"
if [[ -n "$TARGET_HAS" ]]; then
  say "leaving out the wheels the GPU machine has installed ($TARGET_HAS)"
  "$PY" "$HELPER" omit-installed --wheelhouse "$WH" --freeze "$TARGET_HAS" \
    --records "$PAYLOAD/records" --omitted "$OUT/omitted" >"$OUT/omitted.txt"
  sed 's/^/   /' "$OUT/omitted.txt" >&2
fi
NATIVE_TORCH_NAME=${NATIVE_TORCH:+$(basename "$NATIVE_TORCH")} \
SDK_REQS_JSON=$("$PY" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' ${SDK_REQS[@]+"${SDK_REQS[@]}"}) \
"$PY" - "$OUT/python.json" "$PAYLOAD/payload.json" "$(basename "$WHEEL")" "$(basename "$TORCH_WHEEL")" "$WH" \
  "$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" "${TOOLS[@]}" <<'EOF'
import json, os, sys, time
from pathlib import Path
py = json.loads(Path(sys.argv[1]).read_text())
wh = Path(sys.argv[5])
one = lambda pat: next(p.name for p in wh.glob(pat))
doc = {"version": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "source_revision": sys.argv[6],
       "python": {"tarball": "python/" + Path(py["tarball"]).name, "root": py["root"], "version": py["python"],
                  "glibc_floor": py["glibc_floor"], "grafted": py["grafted"]},
       "torch_fl_wheel": "wheelhouse/" + sys.argv[3], "torch_wheel": "wheelhouse/" + sys.argv[4],
       "preflight_wheel": "wheelhouse/" + one("torch_fl_preflight-*.whl"),
       "pip_wheel": "wheelhouse/" + one("pip-*.whl"),
       "wheels": sorted(p.name for p in wh.glob("*.whl")),
       # What the GPU suite runs with besides the environment (pytest, and e.g. expecttest and transformers for
       # the OpInfo and model tiers): installed on the target beside the environment, on the suite's path only.
       "suite_tools": [t for t in sys.argv[7:] if t != "pip"],
       "rebuilt_on_target": sorted(p.name[: -len(".dist-info.zip")] for p in wh.parent.glob("records/*.dist-info.zip"))}
if os.environ["NATIVE_TORCH_NAME"]:
    # The native side the GPU run compares with: a CUDA build of the same torch (tools/gpu-offline-env.sh).
    doc["native_torch_wheel"] = "native/" + os.environ["NATIVE_TORCH_NAME"]
sdk = json.loads(os.environ["SDK_REQS_JSON"])
if sdk:
    # The runtime of a CUDA-compatible vendor's wheel: laid out as its SDK on the target (tools/standin_sdk.py).
    doc["stand_in_sdk"] = {"requirements": sdk}
Path(sys.argv[2]).write_text(json.dumps(doc, indent=2) + "\n")
EOF
t_assemble=$((SECONDS - t0))

say "pieces of ${PIECE_MIB:+at most $PIECE_MIB MiB}${PIECE_MIB:-the largest size a transfer call fits}"
"$PY" "$HELPER" split --payload "$PAYLOAD" --out "$OUT/pieces" ${PIECE_MIB:+--piece-mib "$PIECE_MIB"}
size=$(du -sb "$PAYLOAD" | cut -f1)
n=$(ls "$OUT"/pieces/payload.part-* | wc -l)
echo "payload $((size / 1048576)) MiB in $n pieces under $OUT/pieces (assembled in ${t_assemble}s, total $((SECONDS - t0))s)" >&2
