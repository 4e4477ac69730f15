"""Per-op latency of small ops on flagos (provider `host`) against plain CPU tensors.

Each op runs on 1024-element inputs, eagerly, on one thread.  For both devices
`--repeats` timings of `--number` calls are taken after a warm-up; the report
gives the median and the best (timeit's advice for a shared machine: the best
is the least disturbed) per call, and the ratio flagos/cpu of each.  Goals for
the zero-copy provider: the median of the ops' ratios <= 1.15, the worst <= 1.3.

    python benchmarks/device/dispatch_overhead.py [--out result.json]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import timeit
from collections.abc import Callable

import torch
from _report import emit_json

OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "relu": lambda a, b: torch.relu(a),
    "sum": lambda a, b: a.sum(),
    "add_": lambda a, b: a.add_(b),
    "matmul_32x32": lambda a, b: a.view(32, 32) @ b.view(32, 32),
    "softmax": lambda a, b: torch.softmax(a, dim=0),
    "index_select": lambda a, b: a.index_select(0, b[:16].long().abs() % 1024),
}


def per_call_us(fn: Callable[[], object], number: int, repeats: int) -> tuple[float, float]:
    """(median, best) microseconds per call."""
    for _ in range(number):  # warm-up: caches, allocator blocks, routing cache
        fn()
    times = [t / number * 1e6 for t in timeit.repeat(fn, number=number, repeat=repeats)]
    return statistics.median(times), min(times)


def timing_args(description: str, number: int, repeats: int,
                extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The options of a host timing benchmark (calls per repeat, repeats, the JSON's path, and what `extra`
    adds), parsed; torch then runs on one thread, as every host timing here does."""
    parser = argparse.ArgumentParser(description=description)
    if extra is not None:
        extra(parser)
    parser.add_argument("--number", type=int, default=number)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    return args


def main() -> int:
    args = timing_args(__doc__.splitlines()[0], number=2000, repeats=7)

    results = {}
    for name, op in OPS.items():
        per_device = {}
        for device in ("cpu", "flagos"):
            a = torch.randn(1024, device=device)
            b = torch.randn(1024, device=device)
            per_device[device] = per_call_us(lambda: op(a, b), args.number, args.repeats)
        (cpu_median, cpu_best), (fl_median, fl_best) = per_device["cpu"], per_device["flagos"]
        results[name] = {
            "cpu_us": {"median": round(cpu_median, 3), "best": round(cpu_best, 3)},
            "flagos_us": {"median": round(fl_median, 3), "best": round(fl_best, 3)},
            "ratio_median": round(fl_median / cpu_median, 3),
            "ratio": round(fl_best / cpu_best, 3),
        }
    ratios = [r["ratio"] for r in results.values()]
    report = {
        "version": 1,
        "benchmark": "dispatch_overhead",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "elements": 1024,
        "threads": 1,
        "ops": results,
        "ratio_of": "best per-call times",
        "median_ratio": round(statistics.median(ratios), 3),
        "max_ratio": round(max(ratios), 3),
        "goal_median_ratio": 1.15,
        "goal_max_ratio": 1.3,
    }
    emit_json(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
