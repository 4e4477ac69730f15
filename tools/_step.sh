# The step runner of tools/gpu-check.sh and tools/gpu-offline-env.sh (sourced, not run).
# Needs: OUT (logs), RESULTS (results.json), RECORD (tools/gpu_check_results.py), RECORD_PY (the Python that runs it).
#
# step NAME EXPECT [record options...] -- COMMAND...: runs COMMAND with its output in OUT/NAME.log and
# records it in RESULTS; returns COMMAND's exit code.
step() {
  local name=$1 expect=$2; shift 2
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  local t=$SECONDS rc
  echo "== $name" >&2
  "$@" >"$OUT/$name.log" 2>&1; rc=$?
  record_step "$name" "$expect" "$rc" $((SECONDS - t)) "${opts[@]}"
  return $rc
}

# record_step NAME EXPECT RC SECONDS [record options...]: records a step whose COMMAND ran elsewhere (one of
# several run side by side, which must not write RESULTS at the same time) with its output in OUT/NAME.log.
record_step() {
  local name=$1 expect=$2 rc=$3 seconds=$4; shift 4
  "$RECORD_PY" "$RECORD" record --results "$RESULTS" --step "$name" --rc "$rc" --seconds "$seconds" \
    --expect "$expect" --log "$OUT/$name.log" "$@"
}
