"""bf16 matmul 8192x8192x8192 on the GPU: flagos against native cuda, in TFLOP/s.

Median of 10 timed repeats of 10 calls each (CUDA events) after 5 warm-up calls.  flagos
runs here, native cuda in the reference interpreter (`--reference-python`, _gpu_common.py
says why); the two take turns repeat by repeat.  Goal: flagos >= 0.99 of native.

    python benchmarks/device/gpu_matmul.py [--out gpu_matmul.json] [--reference-python PY]
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from _gpu_common import NativeChild, emit, event_timer, median_ms, parser, reference_python, require_flagos, serve

N, REPEATS, WARMUP, INNER = 8192, 10, 5, 10


def product(device: str) -> Callable[[], object]:
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(N, N, generator=g).to(device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(WARMUP):
        a @ b
    return lambda: a @ b


def main() -> int:
    args = parser(__doc__.splitlines()[0]).parse_args()
    if args.native_child:
        # Ten products per timed repeat: their GPU time, not the launch latency of one.
        serve({"time": lambda time_once=event_timer("cuda", product("cuda"), INNER): {"ms": time_once()}})
        return 0
    require_flagos()
    native = NativeChild(reference_python(args.reference_python), __file__)
    try:
        flagos = event_timer("flagos", product("flagos"), INNER)
        ms = median_ms({"cuda": lambda: native.ask("time")["ms"], "flagos": flagos}, repeats=REPEATS)
        native_env = native.ask("environment")
    finally:
        native.close()
    flops = 2 * N**3
    results = {d: {"ms": round(t, 3), "tflops": round(flops / t / 1e9, 1)} for d, t in ms.items()}
    ratio = results["flagos"]["tflops"] / results["cuda"]["tflops"]
    return emit({"benchmark": "gpu_matmul", "shape": [N, N, N], "dtype": "bfloat16", "native": results["cuda"],
                 "flagos": results["flagos"], "ratio": round(ratio, 4), "goal_min_ratio": 0.99}, args.out, native_env)


if __name__ == "__main__":
    sys.exit(main())
