#!/usr/bin/env bash
# tools/gpu-calibrate.sh WORK STAGE [CALIBRATE ARGS...]: FlagGems' calibration (python -m torch_fl.flaggems calibrate)
# on a GPU machine with many cores, in stages that each fit a bounded call, with torch_fl and flag_gems installed.
#
# A full pass is dominated by Triton's compiles and FlagGems' autotuning, which use the CPU; its timings must not
# share the GPU with another process.  So:
#   compile N   starts N shards side by side in the background (setsid: they outlive the call), shard K with its
#               own Triton and FlagGems caches (WORK/cache-K), its state in WORK/compile-K.jsonl and its log in
#               WORK/compile-K.log; their results are discarded, what they leave is the warm caches
#   wait S      waits up to S seconds for the compile shards, then prints each one's progress; exit 0 when all
#               are done, 1 when some still run
#   time K-L    runs shards K to L (default all) one after the other over their warm caches (WORK/time-K.jsonl):
#               the measurement; a shard stopped by TIME_LIMIT (default 900 s) is resumed, and the case it hung on
#               is recorded as failed.  With RESULTS=DIR each shard's state file is copied there as it finishes,
#               for a channel that returns files only when a call ends well
#   merge OUT   joins the timing shards into the route table OUT (and OUT's evidence beside it)
# CALIBRATE ARGS (compile and time alike): for example --dtypes float32,bfloat16,float16 --samples 4.
#
# On an H200 (16 cores), 12 compile shards over the 332 operators flag_gems 5.0.2 offers, in float32, bfloat16 and
# float16 with 4 OpInfo samples, took about 7.5 minutes for 10 of them (two ran on, in a first-call compile); one
# timing shard (28 operators, about 250 cases) then took about 4 minutes on its own, so the timing stage of a
# full pass is about 50 minutes: split it over calls with `time K-L`, keeping the machine (its caches) in between.
#
# Exit codes: 0 done, 1 a shard failed or still runs, 2 unusable input.
set -uo pipefail
WORK=${1:?"usage: tools/gpu-calibrate.sh WORK compile N|wait S|time|merge OUT [CALIBRATE ARGS...] — see the header"}
STAGE=${2:?"give a stage: compile N, wait S, time or merge OUT"}
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

caches() {  # CACHES: the environment of shard $1
  CACHES=("TRITON_CACHE_DIR=$WORK/cache-$1/triton" "FLAGGEMS_CACHE_DIR=$WORK/cache-$1/gems")
}

case "$STAGE" in
  compile)
    N=${1:?"compile N: give the number of shards"}; shift
    [[ $N =~ ^[1-9][0-9]*$ ]] || { echo "tools/gpu-calibrate.sh: compile $N — give a count of shards" >&2; exit 2; }
    echo "$N" >"$WORK/shards"
    for K in $(seq 1 "$N"); do
      caches "$K"
      env "${CACHES[@]}" PYTHONUNBUFFERED=1 setsid "$PY" -m torch_fl.flaggems calibrate --shard "$K/$N" \
        --state "$WORK/compile-$K.jsonl" --out "$WORK/compile.conf" "$@" >"$WORK/compile-$K.log" 2>&1 &
      echo $! >"$WORK/compile-$K.pid"
    done
    echo "started $N compile shards in $WORK" ;;
  wait)
    S=${1:?"wait S: give seconds"}
    N=$(cat "$WORK/shards" 2>/dev/null) || { echo "tools/gpu-calibrate.sh: no compile shards in $WORK — run compile first" >&2; exit 2; }
    end=$((SECONDS + S)) running=0
    while :; do
      running=0
      for K in $(seq 1 "$N"); do kill -0 "$(cat "$WORK/compile-$K.pid")" 2>/dev/null && running=$((running + 1)); done
      [[ $running == 0 || $SECONDS -ge $end ]] && break
      sleep 5
    done
    for K in $(seq 1 "$N"); do
      echo "shard $K: $(cases "$WORK/compile-$K.jsonl") cases;" \
        "$(tail -c 300 "$WORK/compile-$K.log" | tr -cd '[:print:]\n' | grep -v '^\s*$' | tail -n 1)"
    done
    echo "$running of $N compile shards still running"
    [[ $running == 0 ]] ;;
  time)
    N=$(cat "$WORK/shards" 2>/dev/null) || { echo "tools/gpu-calibrate.sh: no compile shards in $WORK — run compile first" >&2; exit 2; }
    FIRST=1 LAST=$N
    if [[ ${1:-} =~ ^([0-9]+)-([0-9]+)$ ]]; then FIRST=${BASH_REMATCH[1]} LAST=${BASH_REMATCH[2]}; shift; fi
    (( 1 <= FIRST && FIRST <= LAST && LAST <= N )) || { echo "tools/gpu-calibrate.sh: time $FIRST-$LAST — give shards within 1-$N" >&2; exit 2; }
    status=0
    for K in $(seq "$FIRST" "$LAST"); do
      for attempt in 1 2 3; do
        caches "$K"
        env "${CACHES[@]}" timeout "${TIME_LIMIT:-900}" "$PY" -m torch_fl.flaggems calibrate --shard "$K/$N" \
          --state "$WORK/time-$K.jsonl" --out "$WORK/time.conf" "$@" >>"$WORK/time-$K.log" 2>&1
        rc=$?
        [[ $rc != 124 ]] && break
        echo "shard $K: stopped after ${TIME_LIMIT:-900} s (attempt $attempt); resuming" >>"$WORK/time-$K.log"
      done
      echo "time shard $K/$N: exit $rc ($(cases "$WORK/time-$K.jsonl") cases)"
      [[ -n ${RESULTS:-} ]] && mkdir -p "$RESULTS" && cp "$WORK/time-$K.jsonl" "$RESULTS/"
      [[ $rc == 0 ]] || status=1
    done
    exit $status ;;
  merge)
    OUT=${1:?"merge OUT: give the route table to write"}
    "$PY" -m torch_fl.flaggems merge "$WORK"/time-*.jsonl --out "$OUT" ;;
  *)
    echo "tools/gpu-calibrate.sh: unknown stage $STAGE — give compile N, wait S, time or merge OUT" >&2; exit 2 ;;
esac
