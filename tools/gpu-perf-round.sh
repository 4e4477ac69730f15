#!/usr/bin/env bash
# tools/gpu-perf-round.sh OUT BENCH[:ARGS] ...: on a GPU machine whose python3 has a CUDA build of torch, build
# torch_fl for the cuda platform against that torch (tools/gpu-check.sh --build --only build), then run each named
# benchmarks/device/<BENCH>.py (flagos against native, the machine's torch as reference) with its ARGS (commas become
# spaces: gpu_step_profile:--batch,1,--seq,16), one after the other, each bounded by BENCH_TIMEOUT seconds
# (default 300).  Every JSON and log goes to OUT/round/, packed into OUT/round.tar.gz (a transfer channel that
# returns few files takes one); OUT/summary.txt lists each run's exit code and time.
#
# Exit codes: 0 every benchmark ran, 1 one failed or timed out, 2 unusable input.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?"usage: tools/gpu-perf-round.sh OUT BENCH[:ARGS] ... — give an output folder and benchmark names"}
shift
mkdir -p "$OUT/round" || { echo "tools/gpu-perf-round.sh: cannot create $OUT — pass a writable folder" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
for spec in "$@"; do
  [[ -f "$ROOT/benchmarks/device/${spec%%:*}.py" ]] || {
    echo "tools/gpu-perf-round.sh: no benchmarks/device/${spec%%:*}.py — name scripts of benchmarks/device/" >&2; exit 2; }
done
status=0
t=$SECONDS
if ! "$ROOT/tools/gpu-check.sh" --build --only build --python python3 --out "$OUT/round/build" >"$OUT/round/build.log" 2>&1; then
  echo "build failed ($((SECONDS - t)) s): see round/build.log" | tee -a "$OUT/summary.txt"
  tar czf "$OUT/round.tar.gz" -C "$OUT" round
  exit 1
fi
echo "build ok ($((SECONDS - t)) s)" >>"$OUT/summary.txt"
# From outside the checkout: its unbuilt torch_fl/ must not shadow the installed one.
cd /tmp || exit 2
n=0
for spec in "$@"; do
  name=${spec%%:*} args=()
  [[ $spec == *:* ]] && IFS=, read -ra args <<<"${spec#*:}"
  n=$((n + 1)) tag="$n-$name"
  t=$SECONDS
  PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-300}" python3 "$ROOT/benchmarks/device/$name.py" --out "$OUT/round/$tag.json" \
    "${args[@]}" >"$OUT/round/$tag.log" 2>&1
  rc=$?
  [[ $rc == 0 ]] || status=1
  echo "$tag ${args[*]}: exit $rc ($((SECONDS - t)) s)" >>"$OUT/summary.txt"
done
tar czf "$OUT/round.tar.gz" -C "$OUT" round
cat "$OUT/summary.txt"
exit $status
