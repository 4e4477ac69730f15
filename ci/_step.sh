# The step runner of ci/gpu-check.sh and tools/gpu-offline-env.sh (sourced, not run).
# Needs: OUT (logs), RESULTS (results.json), RECORD (ci/gpu_check_results.py), RECORD_PY (the Python that runs it).
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
  "$RECORD_PY" "$RECORD" record --results "$RESULTS" --step "$name" --rc "$rc" --seconds $((SECONDS - t)) \
    --expect "$expect" --log "$OUT/$name.log" "${opts[@]}"
  return $rc
}
