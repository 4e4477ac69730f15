"""Small-op latency on the GPU: flagos against native cuda, eager, 1024 elements.

Per op, the median (over 15 repeats of 500 calls, after 200 warm-up calls) of the time per call
measured with CUDA events around the calls: for such small ops that is the host-side dispatch
cost.  Native cuda runs in the reference interpreter (`--reference-python`, _gpu_common.py says
why), flagos in a child of this interpreter started and driven the same way (`--flagos-in-process`:
in the benchmark's own process), both pinned to the same two cores; the two take turns repeat by
repeat.  Goal: flagos/native <= 1.05.

    python benchmarks/device/gpu_small_ops.py [--out gpu_small_ops.json] [--reference-python PY]
        [--flagos-in-process]
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from _gpu_common import (FlagosChild, NativeChild, emit, event_timer, flagos_layout, flagos_process, median_ms,
                         parser, reference_python, require_flagos, serve, share_cores)

OPS = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "relu": lambda a, b: torch.relu(a),
    "sum": lambda a, b: a.sum(),
}
REPEATS, WARMUP, INNER = 15, 200, 500


def timers(device: str) -> dict[str, Callable[[], float]]:
    """Per op, a timer of INNER calls on `device`, after the warm-up."""
    out = {}
    for name, op in OPS.items():
        a, b = torch.randn(1024, device=device), torch.randn(1024, device=device)
        call = lambda a=a, b=b, op=op: op(a, b)  # noqa: E731
        for _ in range(WARMUP):
            call()
        out[name] = event_timer(device, call, INNER)
    return out


def serve_timers(device: str) -> None:
    """Child side: answer `time OP` with one timing of OP on `device`."""
    device_timers = timers(device)
    serve({"time": lambda op: {"ms": device_timers[op]()}}, native=device == "cuda")


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    flagos_layout(p)
    args = p.parse_args()
    if args.native_child:
        serve_timers("cuda")
        return 0
    require_flagos()
    if args.flagos_child:
        serve_timers("flagos")
        return 0
    cores = share_cores()
    native = NativeChild(reference_python(args.reference_python), __file__)
    flagos_child = None if args.flagos_in_process else FlagosChild(__file__)
    try:
        if flagos_child is not None:
            flagos = {name: lambda name=name: flagos_child.ask("time", name)["ms"] for name in OPS}
        else:
            flagos = timers("flagos")
        results = {}
        for name in OPS:
            ms = median_ms({"cuda": lambda name=name: native.ask("time", name)["ms"], "flagos": flagos[name]},
                           repeats=REPEATS)
            per = {d: t * 1000 for d, t in ms.items()}
            results[name] = {"native_us": round(per["cuda"], 2), "flagos_us": round(per["flagos"], 2),
                             "ratio": round(per["flagos"] / per["cuda"], 3)}
        native_env = native.ask("environment")
    finally:
        native.close()
        if flagos_child is not None:
            flagos_child.close()
    ratios = [r["ratio"] for r in results.values()]
    return emit({"benchmark": "gpu_small_ops", "elements": 1024, "cores": cores, "ops": results,
                 "flagos_process": flagos_process(args),
                 "max_ratio": max(ratios), "goal_max_ratio": 1.05}, args.out, native_env)


if __name__ == "__main__":
    sys.exit(main())
