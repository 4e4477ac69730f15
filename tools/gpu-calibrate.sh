#!/usr/bin/env bash
# tools/gpu-calibrate.sh WORK STAGE [CALIBRATE ARGS...]: FlagGems' calibration (python -m torch_fl.flaggems calibrate)
# on a GPU machine with many cores, in stages that each fit a bounded call, with torch_fl and flag_gems installed.
#
# A full pass is dominated by Triton's compiles and FlagGems' autotuning, which use the CPU, while a timing must
# not share the GPU with another process.  So the operators are screened side by side, and only what the
# screening cannot settle is timed alone:
#   screen N    starts N shards side by side in the background (setsid: they outlive the call), shard K with its
#               own Triton and FlagGems caches (WORK/cache-K), its state in WORK/screen-K.jsonl and its log in
#               WORK/screen-K.log: every case's correctness, and timings that shared the GPU
#   wait S      waits up to S seconds for the screening shards, then prints each one's progress; with RESULTS=DIR
#               their state files are copied there; exit 0 when all are done, 1 when some still run
#   time        one process over the shards' caches (joined in WORK/cache-all) times alone the cases the
#               screening found correct and not clearly slower (--screened, --screen-slack) and takes every other
#               result from it (WORK/time.jsonl); a run stopped by TIME_LIMIT (default 900 s) is resumed, and the
#               case it hung on is recorded as failed.  With RESULTS=DIR the state file is copied there after each
#               attempt, for a channel that returns files only when a call ends well
#   merge OUT   writes the route table OUT (and OUT's evidence beside it) from WORK/time.jsonl
# CALIBRATE ARGS (screen and time alike): for example --dtypes float32,bfloat16,float16 --samples 4 --op-budget 240.
#
# On an H200 (16 cores), 15 screening shards over the 332 operators flag_gems 5.0.2 offers, in float32, bfloat16
# and float16 with 4 OpInfo samples and --op-budget 60, all finished within 315 s; the timing then took about a
# minute, and the whole pass's evidence records 369 s.
#
# Exit codes: 0 done, 1 a shard failed or still runs, 2 unusable input.
set -uo pipefail
WORK=${1:?"usage: tools/gpu-calibrate.sh WORK screen N|wait S|time|merge OUT [CALIBRATE ARGS...] — see the header"}
STAGE=${2:?"give a stage: screen N, wait S, time or merge OUT"}
shift 2
PY=${PYTHON:-python3}
mkdir -p "$WORK" || { echo "tools/gpu-calibrate.sh: cannot create $WORK — pass a writable folder" >&2; exit 2; }
WORK=$(cd "$WORK" && pwd)
cd /tmp || exit 2  # a checkout's unbuilt torch_fl/ must not shadow the installed one

cases() {  # the cases state file $1 holds (grep -c prints 0 and fails where there are none)
  local n
  n=$(grep -c '"kind": "case"' "$1" 2>/dev/null)
  echo "${n:-0}"
}

shards() {  # the number of screening shards started in WORK
  cat "$WORK/shards" 2>/dev/null || { echo "tools/gpu-calibrate.sh: no screening shards in $WORK — run screen first" >&2; return 2; }
}

caches() {  # CACHES: the environment of shard $1
  CACHES=("TRITON_CACHE_DIR=$WORK/cache-$1/triton" "FLAGGEMS_CACHE_DIR=$WORK/cache-$1/gems")
}

case "$STAGE" in
  screen)
    N=${1:?"screen N: give the number of shards"}; shift
    [[ $N =~ ^[1-9][0-9]*$ ]] || { echo "tools/gpu-calibrate.sh: screen $N — give a count of shards" >&2; exit 2; }
    echo "$N" >"$WORK/shards"
    for K in $(seq 1 "$N"); do
      caches "$K"
      env "${CACHES[@]}" PYTHONUNBUFFERED=1 setsid "$PY" -m torch_fl.flaggems calibrate --shard "$K/$N" \
        --state "$WORK/screen-$K.jsonl" --out "$WORK/screen.conf" "$@" >"$WORK/screen-$K.log" 2>&1 &
      echo $! >"$WORK/screen-$K.pid"
    done
    echo "started $N screening shards in $WORK" ;;
  wait)
    S=${1:?"wait S: give seconds"}
    N=$(shards) || exit 2
    end=$((SECONDS + S)) running=0
    while :; do
      running=0
      for K in $(seq 1 "$N"); do kill -0 "$(cat "$WORK/screen-$K.pid")" 2>/dev/null && running=$((running + 1)); done
      [[ $running == 0 || $SECONDS -ge $end ]] && break
      sleep 5
    done
    for K in $(seq 1 "$N"); do
      echo "shard $K: $(cases "$WORK/screen-$K.jsonl") cases;" \
        "$(tail -c 300 "$WORK/screen-$K.log" | tr -cd '[:print:]\n' | grep -v '^\s*$' | tail -n 1)"
      [[ -n ${RESULTS:-} ]] && mkdir -p "$RESULTS" && cp "$WORK/screen-$K.jsonl" "$RESULTS/" 2>/dev/null
    done
    echo "$running of $N screening shards still running"
    [[ $running == 0 ]] ;;
  time)
    N=$(shards) || exit 2
    screened=()
    for K in $(seq 1 "$N"); do
      kill -0 "$(cat "$WORK/screen-$K.pid" 2>/dev/null)" 2>/dev/null && {
        echo "tools/gpu-calibrate.sh: screening shard $K still runs — wait for it, or kill it to time what it left" >&2; exit 2; }
      [[ -s $WORK/screen-$K.jsonl ]] && screened+=("$WORK/screen-$K.jsonl")
      # Triton's and FlagGems' caches are keyed by content: the shards' caches join without conflict.
      mkdir -p "$WORK/cache-all" && cp -a -n "$WORK/cache-$K/." "$WORK/cache-all/" 2>/dev/null
    done
    (( ${#screened[@]} )) || { echo "tools/gpu-calibrate.sh: the screening left no state file in $WORK — run screen again" >&2; exit 2; }
    caches all
    for attempt in 1 2 3; do
      env "${CACHES[@]}" timeout "${TIME_LIMIT:-900}" "$PY" -m torch_fl.flaggems calibrate --screened "${screened[@]}" \
        --state "$WORK/time.jsonl" --out "$WORK/time.conf" "$@" >>"$WORK/time.log" 2>&1
      rc=$?
      [[ -n ${RESULTS:-} ]] && mkdir -p "$RESULTS" && cp "$WORK/time.jsonl" "$RESULTS/"
      [[ $rc != 124 ]] && break
      echo "stopped after ${TIME_LIMIT:-900} s (attempt $attempt); resuming" >>"$WORK/time.log"
    done
    echo "timing: exit $rc ($(cases "$WORK/time.jsonl") cases)"
    exit $(( rc == 0 ? 0 : 1 )) ;;
  merge)
    OUT=${1:?"merge OUT: give the route table to write"}
    [[ -s $WORK/time.jsonl ]] || { echo "tools/gpu-calibrate.sh: no timing in $WORK — run time first" >&2; exit 2; }
    "$PY" -m torch_fl.flaggems merge "$WORK/time.jsonl" --out "$OUT" ;;
  *)
    echo "tools/gpu-calibrate.sh: unknown stage $STAGE — give screen N, wait S, time or merge OUT" >&2; exit 2 ;;
esac
