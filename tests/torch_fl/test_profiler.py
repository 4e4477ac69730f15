"""torch.profiler on flagos (host platform): PrivateUse1 activity with per-kernel device time under its ops, and
flagos memory on the memory timeline, as a CUDA user reads them for cuda (csrc/profiler/HostActivityProfiler.cpp)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, profile  # noqa: E402

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def matmul_relu() -> None:
    a, b = torch.randn(128, 128, device="flagos"), torch.randn(128, 128, device="flagos")
    (a @ b).relu()
    torch.flagos.synchronize()


def test_flagos_ops_get_device_time_and_their_kernels_are_named() -> None:
    with profile(activities=ACTIVITIES) as prof:
        matmul_relu()
    averages = {e.key: e for e in prof.key_averages()}
    # The op that reaches the device layer carries its kernel's time; a composite op (matmul) has none of
    # its own, only its callee's, as on CUDA.
    assert averages["aten::mm"].self_device_time_total > 0
    assert averages["aten::matmul"].self_device_time_total == 0
    assert averages["aten::matmul"].device_time_total == pytest.approx(averages["aten::mm"].device_time_total)
    assert "flagos aten::mm" in averages and "flagos aten::relu" in averages
    assert "Self FLAGOS" in prof.key_averages().table(row_limit=5)


def test_cpu_work_gets_no_flagos_kernels() -> None:
    with profile(activities=ACTIVITIES) as prof:
        torch.randn(64, 64) @ torch.randn(64, 64)
    assert not [e for e in prof.key_averages() if e.key.startswith("flagos ")]
    assert sum(e.self_device_time_total for e in prof.key_averages()) == 0


def test_a_chrome_trace_shows_kernels_linked_to_their_ops(tmp_path: Path) -> None:
    with profile(activities=ACTIVITIES) as prof:
        matmul_relu()
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    ops = {e["args"]["External id"]: e["name"] for e in events if e.get("cat") == "cpu_op"}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert {"flagos aten::mm", "flagos aten::relu", "flagos aten::normal_"} <= {k["name"] for k in kernels}
    assert "flagos aten::matmul" not in {k["name"] for k in kernels}
    for kernel in kernels:
        assert ops[kernel["args"]["External id"]] == kernel["name"].removeprefix("flagos ")


def test_profile_memory_reports_flagos_memory_as_flagos() -> None:
    # A block cached by an earlier test, up to twice the size asked for, would serve the request, and its size is
    # what the profiler is told.
    torch.flagos.empty_cache()
    with profile(activities=ACTIVITIES, profile_memory=True) as prof:
        x = torch.empty(1 << 16, device="flagos")
        del x
    empty = next(e for e in prof.events() if e.name == "aten::empty")
    freed = [e for e in prof.events() if e.name == "[memory]"]
    assert (empty.device_memory_usage, empty.cpu_memory_usage) == (1 << 18, 0)
    assert [(e.device_memory_usage, e.cpu_memory_usage) for e in freed] == [(-(1 << 18), 0)]
    assert "FLAGOS Mem" in prof.key_averages().table(row_limit=3)


def test_the_backward_pass_is_profiled_on_autograd_s_device_thread() -> None:
    model = torch.nn.Linear(32, 32).to("flagos")
    x = torch.randn(8, 32, device="flagos")
    with profile(activities=ACTIVITIES) as prof:
        model(x).sum().backward()
        torch.flagos.synchronize()
    kernels = {e.key for e in prof.key_averages() if e.key.startswith("flagos ")}
    assert "flagos aten::addmm" in kernels
    assert "flagos aten::mm" in kernels  # the weight's gradient, computed on autograd's thread
