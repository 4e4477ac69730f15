"""One case on both sides: is FlagGems' result the kernel device's (within tolerance), and how long each side takes.

Times are medians over ``reps`` calls after ``warmup`` calls (the first of which compiles Triton's kernels),
each call timed alone: with the kernel device's events where it has them (CUDA), else ``time.perf_counter``
around the call and a synchronisation.  An in-place or out= op writes its arguments again on each rep;
only its first, checked call's values matter.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.testing._comparison import default_tolerances
from torch.utils._pytree import tree_flatten

from torch_fl.flaggems.calibration.cases import Case, clone_call

__all__ = ["Settings", "measure", "tolerance_of"]


@dataclass(frozen=True)
class Settings:
    warmup: int
    """Calls before timing (the first compiles FlagGems' Triton kernels)."""
    reps: int
    """Timed calls per side; the median is kept."""
    tolerance: str
    """``pytorch``: torch.testing.assert_close's defaults per dtype; ``flaggems``: flag_gems.testing.assert_close."""
    provider_overhead_us: float
    """The flaggems provider's own cost per call (views, adoption), added to FlagGems' side."""


def tolerance_of(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) of torch.testing.assert_close for ``dtype`` (0, 0: exact)."""
    return default_tolerances(dtype)


def _written(overload: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The arguments an in-place or out= op writes."""
    written = []
    for i, a in enumerate(overload._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        if a.kwarg_only:
            written.append(kwargs.get(a.name))
        elif i < len(args):
            written.append(args[i])
    return written


def _difference(expected: Any, actual: Any, tolerance: str, gems: Any) -> str | None:
    """Why ``actual`` is not ``expected`` (one line), or None."""
    want, _ = tree_flatten(expected)
    got, _ = tree_flatten(actual)
    if len(want) != len(got):
        return f"{len(got)} results, expected {len(want)}"
    for k, (e, a) in enumerate(zip(want, got)):
        if not isinstance(e, torch.Tensor):
            if isinstance(a, torch.Tensor) or e != a:
                return f"result {k}: {a!r}, expected {e!r}"
            continue
        if not isinstance(a, torch.Tensor):
            return f"result {k}: {type(a).__name__}, expected a tensor"
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"result {k}: {a.dtype} {list(a.shape)}, expected {e.dtype} {list(e.shape)}"
        try:
            if tolerance == "flaggems":
                gems.testing.assert_close(a, e, e.dtype, equal_nan=True)
            else:
                rtol, atol = tolerance_of(e.dtype)
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True, check_device=False,
                                           check_stride=False)
        except AssertionError as failure:
            lines = [line.strip() for line in str(failure).splitlines()
                     if line.strip() and not line.startswith("Tensor-likes are not")]
            return f"result {k}: " + "; ".join(lines[:3])
    return None


def _timer(device: str) -> Callable[[Callable[[], Any], int, int], tuple[float, float]]:
    """(first call's time, median of the timed calls), in microseconds."""
    if torch.device(device).type == "cuda":
        def cuda_time(call: Callable[[], Any], warmup: int, reps: int) -> tuple[float, float]:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            call()
            torch.cuda.synchronize()
            first = (time.perf_counter() - t0) * 1e6
            for _ in range(max(0, warmup - 1)):
                call()
            samples = []
            for _ in range(reps):
                start.record()
                call()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) * 1e3)
            return first, statistics.median(samples)
        return cuda_time

    def host_time(call: Callable[[], Any], warmup: int, reps: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        call()
        first = (time.perf_counter() - t0) * 1e6
        for _ in range(max(0, warmup - 1)):
            call()
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            call()
            samples.append((time.perf_counter() - t0) * 1e6)
        return first, statistics.median(samples)
    return host_time


def timer_name(device: str) -> str:
    return "device events" if torch.device(device).type == "cuda" else "perf_counter"


def measure(case: Case, function: Callable[..., Any], overload: Any, settings: Settings, device: str,
            gems: Any) -> dict[str, Any]:
    """The result record of ``case`` (see ``state``): ``skipped`` where the kernel device refuses the call."""
    record = case.identity()
    args, kwargs = clone_call(case.args, case.kwargs)
    try:
        expected = overload(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 -- not a call the kernel device takes: nothing to compare with
        return {**record, "skipped": f"the kernel device refuses it: {type(e).__name__}"}
    expected = (expected, _written(overload, args, kwargs))
    gargs, gkwargs = clone_call(case.args, case.kwargs)
    try:
        actual = (function(*gargs, **gkwargs), _written(overload, gargs, gkwargs))
    except Exception as e:  # noqa: BLE001 -- a refusal: the provider would run the kernel device's kernel
        message = (str(e).strip().splitlines() or [""])[0][:200]
        return {**record, "correct": False, "failure": f"refused: {type(e).__name__}: {message}"}
    failure = _difference(expected, actual, settings.tolerance, gems)
    time_call = _timer(device)
    args, kwargs = clone_call(case.args, case.kwargs)
    _, native_us = time_call(lambda: overload(*args, **kwargs), settings.warmup, settings.reps)
    gargs, gkwargs = clone_call(case.args, case.kwargs)
    _, gems_us = time_call(lambda: function(*gargs, **gkwargs), settings.warmup, settings.reps)
    return {**record, "correct": failure is None, "failure": failure, "native_us": round(native_us, 3),
            "flaggems_us": round(gems_us + settings.provider_overhead_us, 3)}
