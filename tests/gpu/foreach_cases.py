"""The foreach cases of tests/gpu/test_foreach_cuda.py, run on a device: in the test process on flagos, and in the
reference interpreter (reference.py) on native CUDA.  Standard library and torch only: the reference
interpreter imports this module without the test's dependencies."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree


def on(device: str, value: Any) -> Any:
    """`value` with every tensor in it (lists and dicts included) moved to `device`."""
    return pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), value)


def run(case: dict[str, Any], device: str) -> dict[str, Any]:
    """One case on `device`: what the operator returned and its first list afterwards (both on the CPU), or the
    first line of the error it raised."""
    first = on(device, [t.clone() for t in case["inputs"]])
    try:
        out = getattr(torch, case["fn"])(first, *on(device, case["args"]), **on(device, case["kwargs"]))
    except (RuntimeError, TypeError, ValueError) as e:
        return {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    devices = sorted({t.device.type for t in out}) if isinstance(out, (list, tuple)) else []
    return {"out": on("cpu", out), "written": on("cpu", first), "devices": devices}


def results(cases: list[dict[str, Any]], device: str) -> list[dict[str, Any]]:
    return [run(case, device) for case in cases]
