"""bf16 matmul 8192x8192x8192 on the GPU: flagos against native cuda, in TFLOP/s.

Median of 10 timed repeats of 10 calls each (CUDA events; native and flagos taking
turns) after 5 warm-up calls.  Goal: flagos >= 0.98 of native.

    python benchmarks/gpu_matmul.py [--out gpu_matmul.json]
"""

from __future__ import annotations

import sys

import torch
from _gpu_common import emit, median_ms, parser, require_flagos

N = 8192


def main() -> int:
    args = parser(__doc__.splitlines()[0]).parse_args()
    require_flagos()
    flops = 2 * N**3
    operands = {}
    for device in ("cuda", "flagos"):
        g = torch.Generator().manual_seed(0)
        operands[device] = [torch.randn(N, N, generator=g).to(device=device, dtype=torch.bfloat16) for _ in range(2)]
    # Ten products per timed repeat: their GPU time, not the launch latency of one.
    ms = median_ms({d: (lambda a=a, b=b: a @ b) for d, (a, b) in operands.items()}, repeats=10, warmup=5, inner=10)
    results = {d: {"ms": round(t, 3), "tflops": round(flops / t / 1e9, 1)} for d, t in ms.items()}
    ratio = results["flagos"]["tflops"] / results["cuda"]["tflops"]
    return emit({"benchmark": "gpu_matmul", "shape": [N, N, N], "dtype": "bfloat16", "native": results["cuda"],
                 "flagos": results["flagos"], "ratio": round(ratio, 4), "goal_min_ratio": 0.98}, args.out)


if __name__ == "__main__":
    sys.exit(main())
