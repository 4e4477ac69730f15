"""torch.profiler on the cuda platform: `activities=[CPU, PrivateUse1]` around flagos work records its CUDA
kernels as flagos device events (CUPTI sees them; PyTorch labels a renamed PrivateUse1 backend's kernels
PrivateUse1), linked to their operators, with device time in key_averages() and the Chrome trace.

The side-by-side table against native CUDA for a whole training step is benchmarks/device/gpu_profiler_table.py."""

from __future__ import annotations

import json

import pytest
import torch
from torch.profiler import ProfilerActivity

pytestmark = [
    pytest.mark.gpu,
    # torch 2.11's profiler notes once per process that it keeps only the current cycle's events
    pytest.mark.filterwarnings("ignore:Warning. Profiler clears events at the end of each cycle:UserWarning"),
]


def _profile_training_step(**options: object) -> torch.profiler.profile:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 10)).to("flagos")
    x = torch.randn(64, 256, device="flagos")
    model(x).sum().backward()  # warm-up: cuBLAS handles and workspaces outside the profile
    torch.flagos.synchronize()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                                **options) as prof:  # type: ignore[arg-type]
        model(x).sum().backward()
        torch.flagos.synchronize()
    return prof


def test_kernels_are_flagos_device_events_under_their_operators() -> None:
    prof = _profile_training_step()
    averages = prof.key_averages()
    kernels = [e for e in averages if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert kernels, "no flagos device events"
    assert all(e.self_device_time_total > 0 for e in kernels)
    mm = {e.key: e for e in averages}["aten::mm"]
    assert mm.device_time_total > 0  # cuBLAS's kernels are attached to the operator that launched them
    table = averages.table(sort_by="self_device_time_total", row_limit=10)
    assert "Self FLAGOS" in table and "FLAGOS total" in table


def test_the_chrome_trace_links_kernels_to_their_operators(tmp_path) -> None:
    path = tmp_path / "trace.json"
    _profile_training_step().export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels
    # Each kernel's launch is joined to it by a flow ("ac2g": from the runtime call to the GPU event).
    flows = {e["id"] for e in events if e.get("cat") == "ac2g"}
    assert any(k.get("args", {}).get("correlation") in flows for k in kernels)


def test_profile_memory_records_the_steps_allocations() -> None:
    averages = {e.key: e for e in _profile_training_step(profile_memory=True).key_averages()}
    # flagos blocks are CUDA's caching allocator's: it reports them as device memory, never as CPU memory,
    # against the operator that allocated them (a forward matmul's result).
    for op in ("aten::addmm", "aten::mm"):
        assert averages[op].self_device_memory_usage > 0, op
        assert averages[op].self_cpu_memory_usage == 0, op
