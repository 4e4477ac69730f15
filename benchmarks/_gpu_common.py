"""What the GPU benchmarks share: timing on CUDA events, medians, JSON out."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from typing import Any

import torch


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", help="also write the JSON here")
    return p


def median_ms(fn: Callable[[], object], repeats: int, warmup: int, inner: int = 1) -> float:
    """Median over `repeats` of the time of `inner` calls, per call, in milliseconds (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def environment() -> dict[str, Any]:
    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}


def emit(report: dict[str, Any], out: str | None) -> int:
    text = json.dumps({"version": 1, **environment(), **report}, indent=2)
    print(text)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


def require_flagos() -> None:
    if not torch.cuda.is_available():
        sys.exit("no CUDA GPU: run this on a machine with one (and torch_fl built for the cuda platform)")
    import torch_fl  # noqa: F401  (registers flagos where autoloading is off)
