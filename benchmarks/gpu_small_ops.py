"""Small-op latency on the GPU: flagos against native cuda, eager, 1024 elements.

Per op, the median (over 15 repeats of 500 calls, after warm-up, native and flagos
taking turns) of the time per call measured with CUDA events around the calls: for such small ops that is the
host-side dispatch cost.  Goal: flagos/native <= 1.5.

    python benchmarks/gpu_small_ops.py [--out gpu_small_ops.json]
"""

from __future__ import annotations

import sys

import torch
from _gpu_common import emit, median_ms, parser, require_flagos

OPS = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "relu": lambda a, b: torch.relu(a),
    "sum": lambda a, b: a.sum(),
}


def main() -> int:
    args = parser(__doc__.splitlines()[0]).parse_args()
    require_flagos()
    results = {}
    for name, op in OPS.items():
        args_of = {device: (torch.randn(1024, device=device), torch.randn(1024, device=device))
                   for device in ("cuda", "flagos")}
        ms = median_ms({d: (lambda a=a, b=b, op=op: op(a, b)) for d, (a, b) in args_of.items()},
                       repeats=15, warmup=200, inner=500)
        per = {d: t * 1000 for d, t in ms.items()}
        results[name] = {"native_us": round(per["cuda"], 2), "flagos_us": round(per["flagos"], 2),
                         "ratio": round(per["flagos"] / per["cuda"], 3)}
    ratios = [r["ratio"] for r in results.values()]
    return emit({"benchmark": "gpu_small_ops", "elements": 1024, "ops": results, "max_ratio": max(ratios),
                 "goal_max_ratio": 1.5}, args.out)


if __name__ == "__main__":
    sys.exit(main())
