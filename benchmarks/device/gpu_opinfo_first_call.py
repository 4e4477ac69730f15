"""First call of every operator on the GPU: PyTorch's OpInfo database once through, flagos against native cuda.

Every OpInfo runs once, in one dtype (float32 where PyTorch's CPU kernels have it, else the
first of opinfo_runner.DTYPES they have), forward and backward on its first few samples, in a
fresh process per side after the device is initialised, so each op's time is its first call's.
The samples are made here and exported (tests/opinfo/opinfo_runner.py: export_samples), so both
sides compute on the same values with the same runner; an op's time runs from moving its
inputs to the device to its results and gradients back on the CPU.

Ops that compile kernels at run time -- PyTorch's jiterator, through NVRTC -- are told by the
kernel each adds to PyTorch's kernel cache, and measured apart: every process gets an empty
cache folder of its own (PYTORCH_KERNEL_CACHE_PATH), so each side compiles what it runs.  Over
`--rounds` rounds the sides alternate which runs first; each op's time is its median over the
rounds.  Only ops that both sides ran with the same outcome (the same samples raising) count.
Reported for each of the two groups: total wall time per side and the ratio, the median op time
per side and the ratio, the median of the per-op ratios; and the ops with the largest ratios.
flagos runs in this interpreter, native cuda in the reference interpreter (`--reference-python`;
_gpu_common.py says why), pinned to the same two cores.  Goal: total wall time of the ops
without run-time compilation <= 1.2x native.

    python benchmarks/device/gpu_opinfo_first_call.py [--out gpu_opinfo_first_call.json] [--rounds 2]
        [--reference-python PY] [--limit N] [--top 25]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _gpu_common import child_env, emit, parser, reference_python, require_flagos, share_cores
from gpu_first_use import initialise, reference_environment

OPINFO_DIR = Path(__file__).resolve().parents[2] / "tests" / "opinfo"
SIDES = ("flagos", "native")
GOAL_MAX_RATIO = 1.2
PREFERRED_DTYPE = "float32"


def runner() -> Any:
    """tests/opinfo/opinfo_runner.py (it needs expecttest, as PyTorch's OpInfo database does)."""
    if str(OPINFO_DIR) not in sys.path:
        sys.path.insert(0, str(OPINFO_DIR))
    import opinfo_runner

    return opinfo_runner


def one_case_per_op(case_ids: list[str], dtype_order: list[str]) -> list[str]:
    """For each op (in first-seen order), its case in PREFERRED_DTYPE, else in the first dtype of `dtype_order`."""
    by_op: dict[str, dict[str, str]] = {}
    for cid in case_ids:
        name, _, dtype = cid.rpartition("-")
        by_op.setdefault(name, {})[dtype] = cid
    chosen = []
    for dtypes in by_op.values():
        for dtype in (PREFERRED_DTYPE, *dtype_order):
            if dtype in dtypes:
                chosen.append(dtypes[dtype])
                break
    return chosen


def kernel_count(folder: Path) -> int:
    """Files in PyTorch's kernel cache folder: jiterator writes one per kernel it compiles."""
    return sum(len(files) for _, _, files in os.walk(folder))


def timed_case(case_id: str, device: str, samples: list[Any]) -> dict[str, Any]:
    """One case run on `device` on exported `samples`, with only the samples' runs timed (not the CPU-side
    sample generation): seconds, which samples raised, and whether a kernel was compiled meanwhile."""
    r = runner()
    prepared = r.prepare_case(case_id, samples)
    cache = os.environ.get("PYTORCH_KERNEL_CACHE_PATH")
    before = kernel_count(Path(cache)) if cache else 0
    start = time.perf_counter()
    results = r.run_prepared(prepared, device).samples
    seconds = time.perf_counter() - start
    compiled = bool(cache) and kernel_count(Path(cache)) > before
    return {"s": seconds, "raised": [res.error is not None for res in results], "compiled": compiled}


def run_side(side: str, payload_path: str, out_path: str) -> None:
    """Child side: every case of the payload once, in this fresh process."""
    device = "flagos" if side == "flagos" else "cuda"
    if side == "flagos":
        require_flagos()
    known = set(runner().case_ids())  # PyTorch's OpInfo database loads before anything is timed
    payload = torch.load(payload_path, weights_only=True)
    initialise(device)
    results = {cid: timed_case(cid, device, samples) for cid, samples in payload.items() if cid in known}
    Path(out_path).write_text(json.dumps(results))


def run_fresh(side: str, payload: Path, work: Path, reference: str) -> dict[str, Any]:
    cache, out = work / f"{side}-kernels", work / f"{side}.json"
    cache.mkdir()
    python, env = (sys.executable, dict(os.environ)) if side == "flagos" else (reference, child_env())
    env["PYTORCH_KERNEL_CACHE_PATH"] = str(cache)
    done = subprocess.run([python, os.path.abspath(__file__), "--side", side, str(payload), str(out)], env=env,
                          capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-4:])
        raise RuntimeError(f"the {side} process failed (exit {done.returncode}): {tail}")
    return json.loads(out.read_text())


def _group(times: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Totals, medians and ratios of per-op times (side -> case -> seconds) over the same cases."""
    if not times["native"]:
        return {"ops": 0}
    cases = sorted(times["native"])
    total = {side: sum(times[side][c] for c in cases) for side in SIDES}
    median = {side: statistics.median(times[side][c] for c in cases) for side in SIDES}
    return {"ops": len(cases),
            "total_s": {side: round(total[side], 3) for side in SIDES},
            "total_ratio": round(total["flagos"] / total["native"], 4),
            "median_op_ms": {side: round(median[side] * 1000, 3) for side in SIDES},
            "median_op_ratio": round(median["flagos"] / median["native"], 4),
            "median_of_op_ratios": round(statistics.median(times["flagos"][c] / times["native"][c] for c in cases), 4)}


def summarise(rounds: list[dict[str, Any]], top: int = 25) -> dict[str, Any]:
    """The report from `rounds` ({"order": [side, side], "flagos": {case: record}, "native": {...}}, records as
    timed_case returns them)."""
    cases = set.intersection(*(set(r[side]) for r in rounds for side in SIDES))
    differing = sorted(c for c in cases if any(r["flagos"][c]["raised"] != r["native"][c]["raised"] for r in rounds))
    counted = sorted(cases - set(differing))
    compiled = {c for c in counted if any(r[side][c]["compiled"] for r in rounds for side in SIDES)}
    per_op = {side: {c: statistics.median(r[side][c]["s"] for r in rounds) for c in counted} for side in SIDES}

    def subset(keep: set[str]) -> dict[str, dict[str, float]]:
        return {side: {c: t for c, t in per_op[side].items() if c in keep} for side in SIDES}

    plain, jit = _group(subset(set(counted) - compiled)), _group(subset(compiled))
    slowest = sorted(counted, key=lambda c: per_op["flagos"][c] / per_op["native"][c], reverse=True)[:top]
    return {
        "without_run_time_compilation": plain,
        "run_time_compiled": {**jit, "cases": sorted(compiled)},
        "not_counted": {"outcome_differs": differing,
                        "run_by_one_side_only": len(set.union(*(set(r[side]) for r in rounds for side in SIDES)))
                        - len(cases)},
        "largest_ratios": [{"case": c, "flagos_ms": round(per_op["flagos"][c] * 1000, 3),
                            "native_ms": round(per_op["native"][c] * 1000, 3),
                            "ratio": round(per_op["flagos"][c] / per_op["native"][c], 3),
                            "run_time_compiled": c in compiled} for c in slowest],
        "goal_max_total_ratio": GOAL_MAX_RATIO,
        "met": plain.get("total_ratio", float("inf")) <= GOAL_MAX_RATIO,
    }


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="rounds; the side that runs first alternates")
    p.add_argument("--limit", type=int, help="only the first N ops (a quick look)")
    p.add_argument("--top", type=int, default=25, help="how many of the largest per-op ratios to list")
    p.add_argument("--side", nargs=3, metavar=("SIDE", "PAYLOAD", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        run_side(*args.side)
        return 0
    require_flagos()
    reference = reference_python(args.reference_python)
    try:
        r = runner()
    except ImportError as e:
        print(f"PyTorch's OpInfo database cannot load here ({e}); install expecttest (ci/requirements-test.txt)",
              file=sys.stderr)
        return 2
    chosen = one_case_per_op(r.case_ids(), [r.DTYPE_NAMES[d] for d in r.DTYPES])[: args.limit]
    payload = {cid: s for cid in chosen if r.travels(s := r.export_samples(cid))}
    cores = share_cores()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="flagos-first-call-") as tmp:
        payload_path = Path(tmp) / "payload.pt"
        torch.save(payload, payload_path)
        try:
            for index in range(args.rounds):
                order = SIDES if index % 2 == 0 else SIDES[::-1]
                work = Path(tmp) / f"round{index}"
                work.mkdir()
                rounds.append({"order": list(order),
                               **{side: run_fresh(side, payload_path, work, reference) for side in order}})
        except RuntimeError as e:
            print(f"gpu_opinfo_first_call: {e}", file=sys.stderr)
            return 1
    return emit({
        "benchmark": "gpu_opinfo_first_call",
        "config": {"rounds": args.rounds, "orders": [r["order"] for r in rounds], "ops_exported": len(payload),
                   "ops_chosen": len(chosen), "max_samples": r.MAX_SAMPLES, "cores": cores},
        **summarise(rounds, args.top),
    }, args.out, reference_environment(reference))


if __name__ == "__main__":
    sys.exit(main())
