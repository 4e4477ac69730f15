"""The per-process memory fraction, and the allocation history and snapshot (torch.flagos.memory) that
PyTorch's memory viz reads, on the host platform's allocator."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.cuda._memory_viz as memory_viz


def test_memory_fraction_limits_what_the_process_reserves(run_python) -> None:
    result = run_python(
        """
        import torch
        print("default", torch.flagos.get_per_process_memory_fraction())
        torch.flagos.set_per_process_memory_fraction(0.25)
        print("set", torch.flagos.get_per_process_memory_fraction(0), torch.flagos.get_per_process_memory_fraction(1))
        keep = torch.empty(24 << 20, dtype=torch.uint8, device="flagos")        # 24 of the 32 MiB allowed
        cached = torch.empty(6 << 20, dtype=torch.uint8, device="flagos"); del cached
        try:
            torch.empty(10 << 20, dtype=torch.uint8, device="flagos")           # 34 MiB even without the cache
        except torch.OutOfMemoryError as e:
            print("OOM:", str(e))
        stats = torch.flagos.memory_stats()
        print("retries", stats["num_alloc_retries"], "ooms", stats["num_ooms"])
        print("cache freed", torch.flagos.memory_reserved() == 24 << 20)
        torch.empty(10 << 20, dtype=torch.uint8, device="flagos:1")            # another device: no limit set
        torch.flagos.set_per_process_memory_fraction(1.0)
        torch.empty(10 << 20, dtype=torch.uint8, device="flagos")
        print("lifted")
        """,
        env={"FLAGOS_HOST_MEMORY_LIMIT": "128M"},
    )
    assert "default 1.0" in result.stdout
    assert "set 0.25 1.0" in result.stdout
    assert ("OOM: flagos:0 out of memory: tried to allocate 10.00 MiB (device capacity 128.00 MiB"
            in result.stdout)
    assert "this process may reserve 32.00 MiB of it (set_per_process_memory_fraction(0.25))" in result.stdout
    # The cached 6 MiB block was released and the request retried before the error.
    assert "retries 1 ooms 1" in result.stdout
    assert "cache freed True" in result.stdout
    assert "lifted" in result.stdout


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_memory_fraction_out_of_range_is_refused(fraction: float) -> None:
    with pytest.raises(RuntimeError, match="invalid memory fraction .*between 0 and 1"):
        torch.flagos.set_per_process_memory_fraction(fraction)
    assert torch.flagos.get_per_process_memory_fraction() == 1.0


def _allocate_in_a_named_function() -> torch.Tensor:
    return torch.ones(256, 1024, device="flagos")  # 1 MiB


@pytest.fixture
def history():
    torch.flagos.empty_cache()
    torch.flagos.memory._record_memory_history()
    yield
    torch.flagos.memory._record_memory_history(None)


@pytest.mark.usefixtures("history")
def test_snapshot_has_cudas_format_and_the_allocating_stack() -> None:
    kept = _allocate_in_a_named_function()
    dropped = _allocate_in_a_named_function()
    dropped_address = dropped.data_ptr()
    del dropped
    snapshot = torch.flagos.memory._snapshot()

    assert set(snapshot) == {"segments", "device_traces"}
    assert len(snapshot["device_traces"]) == torch.flagos.device_count()
    by_address = {seg["address"]: seg for seg in snapshot["segments"]}
    live, cached = by_address[kept.data_ptr()], by_address[dropped_address]
    assert live["blocks"][0]["state"] == "active_allocated" and live["blocks"][0]["requested_size"] == 1 << 20
    assert cached["blocks"][0]["state"] == "inactive" and cached["allocated_size"] == 0
    assert live["segment_type"] == "small" and live["device"] == 0 and live["stream"] == 0
    names = [frame["name"] for frame in live["blocks"][0]["frames"]]
    assert "_allocate_in_a_named_function" in names

    actions = [(e["action"], e["addr"]) for e in snapshot["device_traces"][0]]
    assert actions == [
        ("segment_alloc", kept.data_ptr()), ("alloc", kept.data_ptr()),
        ("segment_alloc", dropped_address), ("alloc", dropped_address),
        ("free_requested", dropped_address), ("free_completed", dropped_address),
    ]
    assert all(e["size"] == 1 << 20 and e["time_us"] > 0 for e in snapshot["device_traces"][0])


@pytest.mark.usefixtures("history")
def test_pytorchs_memory_viz_reads_the_snapshot(tmp_path) -> None:
    kept = _allocate_in_a_named_function()
    del kept
    torch.flagos.empty_cache()
    again = _allocate_in_a_named_function()
    path = tmp_path / "snapshot.pickle"
    torch.flagos.memory._dump_snapshot(str(path))
    snapshot = pickle.loads(path.read_bytes())

    # memory_viz's text replay walks the trace against the segments; it names each action.
    replay = memory_viz.trace(snapshot)
    assert "cudaMalloc" in replay and "del " in replay and "cudaFree" in replay
    # segsum checks that every segment's blocks add up to its size.
    assert "segments: 1" in memory_viz.segsum(snapshot)
    # The flame graph's input lines (rendering them would download flamegraph.pl): one per block, with its stack.
    assert "_allocate_in_a_named_function" in memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    for page in (memory_viz.trace_plot(snapshot), memory_viz.segment_plot(snapshot)):
        assert page.startswith("<!DOCTYPE html>") or "<html" in page[:200]
    assert torch.flagos.memory_snapshot() == snapshot["segments"] and again.numel() == 256 * 1024


def test_history_keeps_the_newest_entries_and_stops_when_asked() -> None:
    torch.flagos.memory._record_memory_history(max_entries=4, context=None)
    try:
        for _ in range(3):
            x = torch.empty(512, device="flagos")
            del x
        trace = torch.flagos.memory._snapshot()["device_traces"][0]
        assert [e["action"] for e in trace] == ["free_completed", "alloc", "free_requested", "free_completed"]
        assert all(e["frames"] == [] for e in trace)  # context=None: no stacks
    finally:
        torch.flagos.memory._record_memory_history(None)
    y = torch.empty(512, device="flagos")
    assert torch.flagos.memory._snapshot()["device_traces"][0] == []
    del y


def test_unknown_history_settings_are_refused() -> None:
    with pytest.raises(RuntimeError, match="unknown memory history mode 'everything'"):
        torch.flagos.memory._record_memory_history("everything")
    with pytest.raises(RuntimeError, match="unknown memory history stacks 'cpp'"):
        torch.flagos.memory._record_memory_history(stacks="cpp")
