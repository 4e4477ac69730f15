"""How many vendor-runtime calls and allocations flagos makes per operator, held to fixed numbers.

The host runtime counts every call of its API (hostrtGetApiCallCounter, read through
torch_fl._C._runtime_api_calls), as a vendor's tracing interface does.  The numbers come from the design,
not from a measurement: a regression in the device layer -- a synchronisation where CUDA would not make
one, an event between work on one stream, a device switch to the device already current, a device
query per operator, memory taken from the runtime instead of the allocator's cache -- shows here on the
host platform, without a GPU.  Speed itself is measured by benchmarks/ (dispatch_overhead.py on the host,
gpu_*.py on a GPU), never by a timed test.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")


def calls_per_run(fn: Callable[[], object], runs: int = 50) -> dict[str, float]:
    """Runtime API calls per run of `fn`, after warm-up runs have filled the allocator's cache."""
    from torch_fl import _C

    for _ in range(5):
        fn()
    _C._runtime_api_calls(True)
    for _ in range(runs):
        fn()
    return {name: calls / runs for name, calls in _C._runtime_api_calls(True).items() if calls}


def allocations_per_run(fn: Callable[[], object], runs: int = 50) -> float:
    for _ in range(5):
        fn()
    before = torch.flagos.memory_stats()["allocation.all.allocated"]
    for _ in range(runs):
        fn()
    return (torch.flagos.memory_stats()["allocation.all.allocated"] - before) / runs


@pytest.fixture
def operands() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(1024, device="flagos"), torch.randn(1024, device="flagos")


def test_the_runtime_counts_its_calls() -> None:
    from torch_fl import _C

    _C._runtime_api_calls(True)
    torch.flagos.synchronize()
    torch.empty(1 << 30, device="flagos")  # more than the cache holds: the allocator asks the runtime
    counts = _C._runtime_api_calls(False)
    assert counts["hostrtDeviceSynchronize"] == 1
    assert counts["hostrtMalloc"] >= 1
    assert set(counts) >= {"hostrtStreamSynchronize", "hostrtEventRecord", "hostrtStreamWaitEvent", "hostrtSetDevice"}


@pytest.mark.parametrize("op", ["add", "add_", "mm", "sum", "softmax", "to_dtype"])
def test_a_small_op_calls_the_runtime_not_at_all(op: str, operands: tuple[torch.Tensor, torch.Tensor]) -> None:
    # Its result comes from the allocator's cache, it runs on the current stream of the current device, and
    # nothing waits for it: no malloc, no event, no stream or device synchronisation, no device switch.  An
    # op whose result PyTorch makes through a flagos factory (empty, then copy_) asks for the current device
    # at most 3 times: the factory's device, and its device guard's entry and exit.
    a, b = operands
    call = {"add": lambda: a + b, "add_": lambda: a.add_(b), "mm": lambda: a.view(32, 32) @ b.view(32, 32),
            "sum": lambda: a.sum(), "softmax": lambda: torch.softmax(a, 0), "to_dtype": lambda: a.to(torch.half)}[op]
    counts = calls_per_run(call)
    assert counts.pop("hostrtGetDevice", 0) <= 3
    assert counts == {}


@pytest.mark.parametrize(("op", "allocations"), [("add", 1), ("add_", 0), ("mm", 1), ("view", 0)])
def test_an_op_allocates_its_result_once(op: str, allocations: int,
                                         operands: tuple[torch.Tensor, torch.Tensor]) -> None:
    # One allocation per new result, none for in-place ops and views: the kernel's result is flagos memory,
    # not a temporary copied into a second buffer.
    a, b = operands
    call = {"add": lambda: a + b, "add_": lambda: a.add_(b), "mm": lambda: a.view(32, 32) @ b.view(32, 32),
            "view": lambda: a.view(32, 32)}[op]
    assert allocations_per_run(call) == allocations


@pytest.mark.parametrize("op", ["add", "mm", "softmax", "index_select"])
def test_a_kernel_writes_its_result_into_flagos_memory(op: str, operands: tuple[torch.Tensor, torch.Tensor]) -> None:
    # The host platform's kernels are PyTorch's CPU kernels; while one runs for flagos, PyTorch's CPU allocator
    # serves it from the flagos allocator, so its result is adopted as it is: the profiler's memory events
    # show the result's bytes as flagos memory and not a byte of CPU memory (no CPU buffer to copy from).
    a, b = operands
    index = torch.arange(0, 1024, 4, device="flagos")
    call = {"add": lambda: a + b, "mm": lambda: a.view(32, 32) @ b.view(32, 32),
            "softmax": lambda: torch.softmax(a, 0), "index_select": lambda: a.index_select(0, index)}[op]
    call()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        result = call()
    memory = [e for e in prof.events() if e.cpu_memory_usage or e.device_memory_usage]
    assert sum(e.cpu_memory_usage for e in memory) == 0
    assert sum(e.device_memory_usage for e in memory) >= result.numel() * result.element_size()
    assert result.untyped_storage().device == a.device


def test_cpu_tensors_keep_the_cpu_allocator() -> None:
    # Outside flagos's kernels PyTorch's CPU allocator is the one it had: CPU tensors are CPU memory.
    before = torch.flagos.memory_stats()["allocation.all.allocated"]
    x = torch.randn(4096) + 1
    assert torch.flagos.memory_stats()["allocation.all.allocated"] == before
    assert x.untyped_storage().device.type == "cpu"


def test_a_training_step_neither_synchronises_nor_switches_devices() -> None:
    # Forward, backward and an AdamW update on one device and one stream: autograd's engine sets its device
    # before every node and guards ask for the current device, but no call may switch it, record or wait on
    # an event, synchronise, or take memory from the runtime.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("flagos")
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(8, 16, device="flagos")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        optimizer.step()

    counts = calls_per_run(step, runs=10)
    queries = counts.pop("hostrtGetDevice", 0)
    assert counts == {}
    # The backward graph has 11 nodes (5 of them AccumulateGrad); the engine and the guards around each node
    # ask for the current device at most 4 times, and the forward and optimizer phases add none.
    assert queries <= 4 * 11


def test_reading_a_scalar_is_one_copy(operands: tuple[torch.Tensor, torch.Tensor]) -> None:
    # .item() copies one element to the host and waits for that copy only.
    a, _ = operands
    counts = calls_per_run(lambda: a.sum().item())
    assert sum(v for name, v in counts.items() if name.startswith("hostrtMemcpy")) == 1
    assert {name for name in counts if not name.startswith("hostrtMemcpy")} == set()
