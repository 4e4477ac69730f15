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


def median_ms(fns: dict[str, Callable[[], object]], repeats: int, warmup: int, inner: int = 1) -> dict[str, float]:
    """Per device (the key), the median over `repeats` of the time of `inner` calls of its
    function, per call, in milliseconds (device events).  The devices take turns, repeat by
    repeat, so a drift of the machine's speed (clocks, a shared host) affects them alike.

    torch.Event, not torch.cuda.Event: on stock torch+cpu with the cuda-assets
    wheel the CUDA runtime is there but torch.cuda's Python API is not.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {device: [] for device in fns}
    for _ in range(repeats):
        for device, fn in fns.items():
            start = torch.Event(device=torch.device(device), enable_timing=True)
            end = torch.Event(device=torch.device(device), enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            times[device].append(start.elapsed_time(end) / inner)
    return {device: statistics.median(t) for device, t in times.items()}


def environment() -> dict[str, Any]:
    import torch_fl

    return {"gpu": _gpu_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "torch_fl": torch_fl.build_config.PLATFORM}


def _gpu_name() -> str:
    if torch.version.cuda:
        return torch.cuda.get_device_name(0)
    import subprocess

    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def emit(report: dict[str, Any], out: str | None) -> int:
    text = json.dumps({"version": 1, **environment(), **report}, indent=2)
    print(text)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


def require_flagos() -> None:
    import torch_fl  # registers flagos where autoloading is off

    if torch_fl.build_config.PLATFORM != "cuda" or not torch.flagos.is_available():
        print("no CUDA GPU: run this on a machine with one (and torch_fl built for the cuda platform)",
              file=sys.stderr)
        sys.exit(2)
