"""The caching device allocator: statistics, caching, pinned memory, out of memory."""

from __future__ import annotations

import gc
import torch


def test_statistics_track_allocations_and_peaks() -> None:
    torch.flagos.empty_cache()
    torch.flagos.reset_peak_memory_stats()
    base = torch.flagos.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="flagos")  # 1 MiB: exactly one 512 B-rounded block
    assert torch.flagos.memory_allocated() == base + (1 << 20)
    assert torch.flagos.memory_reserved() >= torch.flagos.memory_allocated()
    y = torch.empty(4 << 20, dtype=torch.uint8, device="flagos")  # rounded to 2 MiB units
    peak = torch.flagos.max_memory_allocated()
    assert peak == base + (1 << 20) + (4 << 20)
    del x, y
    assert torch.flagos.memory_allocated() == base
    assert torch.flagos.max_memory_allocated() == peak
    assert torch.flagos.memory_reserved() >= peak - base  # freed blocks stay cached
    torch.flagos.reset_peak_memory_stats()
    assert torch.flagos.max_memory_allocated() == base
    torch.flagos.empty_cache()
    assert torch.flagos.memory_reserved() == torch.flagos.memory_allocated() == base


def test_cached_blocks_are_reused() -> None:
    torch.flagos.empty_cache()
    x = torch.empty(1000, device="flagos")
    ptr = x.data_ptr()
    del x
    reserved = torch.flagos.memory_reserved()
    y = torch.empty(1000, device="flagos")
    assert y.data_ptr() == ptr
    assert torch.flagos.memory_reserved() == reserved


def test_devices_are_accounted_separately_and_agree_with_torch_accelerator() -> None:
    before0, before1 = torch.flagos.memory_allocated(0), torch.flagos.memory_allocated(1)
    z = torch.empty(2048, device="flagos:1")
    assert torch.flagos.memory_allocated(0) == before0
    assert torch.flagos.memory_allocated(1) == before1 + 2048 * 4
    assert torch.accelerator.memory_allocated(1) == torch.flagos.memory_allocated(1)
    del z


def test_device_from_pointer_and_pinned_memory() -> None:
    x = torch.ones(4, device="flagos:1")
    assert x.untyped_storage().device == torch.device("flagos", 1)
    pinned = torch.ones(8).pin_memory()
    assert pinned.is_pinned() and not torch.ones(8).is_pinned()
    y = pinned.to("flagos", non_blocking=True)
    torch.flagos.synchronize()
    assert y.sum().item() == 8.0


def test_storage_resize_keeps_data() -> None:
    x = torch.arange(4.0, device="flagos")
    storage = x.untyped_storage()
    storage.resize_(64)
    assert storage.nbytes() == 64
    torch.testing.assert_close(x.cpu(), torch.arange(4.0))


def test_out_of_memory_is_a_clear_error_and_the_process_keeps_working(run_python) -> None:
    result = run_python(
        """
        import torch
        keep = torch.ones(1024, device="flagos")
        try:
            torch.empty(64 << 20, dtype=torch.uint8, device="flagos")
        except torch.OutOfMemoryError as e:
            assert isinstance(e, RuntimeError)
            print("OOM:", str(e).splitlines()[0])
        stats = torch.flagos.memory_stats()
        assert stats["num_ooms"] == 1, stats
        more = torch.ones(1024, device="flagos") + keep
        print("after:", more.sum().item())
        big = torch.empty(24 << 20, dtype=torch.uint8, device="flagos:1")  # the limit is per device
        print("device 1 ok")
        """,
        env={"FLAGOS_HOST_MEMORY_LIMIT": "32M"},
    )
    assert "OOM: flagos:0 out of memory: tried to allocate 64.00 MiB" in result.stdout
    assert "FLAGOS_HOST_MEMORY_LIMIT" in result.stdout
    assert "after: 2048.0" in result.stdout


def test_cache_is_released_before_reporting_out_of_memory(run_python) -> None:
    result = run_python(
        """
        import torch
        for _ in range(3):
            x = torch.empty(20 << 20, dtype=torch.uint8, device="flagos")
            del x
            # A differently sized block cannot reuse the cached one; the allocator
            # must free its cache to fit it under the 32 MiB limit.
            y = torch.empty(24 << 20, dtype=torch.uint8, device="flagos")
            del y
        print("retries", torch.flagos.memory_stats()["num_alloc_retries"])
        """,
        env={"FLAGOS_HOST_MEMORY_LIMIT": "32M"},
    )
    assert int(result.stdout.split()[-1]) >= 1


# -- torch.cuda's formats ---------------------------------------------------------------------

#: Keys that libraries index in torch.cuda.memory_stats() (Lightning's DeviceStatsMonitor, accelerate,
#: Hugging Face's Trainer memory metrics).
_INDEXED_KEYS = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                 "reserved_bytes.all.peak", "active_bytes.all.peak", "requested_bytes.all.current",
                 "inactive_split_bytes.all.current", "allocation.all.current", "segment.all.current",
                 "num_alloc_retries", "num_ooms")


def test_memory_stats_has_cuda_flat_keys_that_follow_allocations() -> None:
    # Earlier tests' garbage holding flagos tensors must not be collected between the two readings.
    gc.collect()
    gc.disable()
    try:
        torch.flagos.empty_cache()
        torch.flagos.reset_peak_memory_stats()
        before = torch.flagos.memory_stats()
        x = torch.empty(1 << 20, dtype=torch.uint8, device="flagos")
        after = torch.flagos.memory_stats()
    finally:
        gc.enable()
    assert set(_INDEXED_KEYS) <= set(before)
    assert list(before) == sorted(before)  # torch.cuda.memory_stats is an OrderedDict sorted by key
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"] + (1 << 20)
    assert after["allocated_bytes.all.peak"] >= after["allocated_bytes.all.current"]
    assert after["allocation.all.current"] == before["allocation.all.current"] + 1
    assert after["reserved_bytes.all.current"] >= after["allocated_bytes.all.current"]
    # The pools add up to the aggregate, as in CUDA's allocator.
    for stat in ("allocated_bytes", "reserved_bytes", "allocation", "segment"):
        assert after[f"{stat}.all.current"] == after[f"{stat}.large_pool.current"] + after[f"{stat}.small_pool.current"]
    assert torch.flagos.memory_allocated() == after["allocated_bytes.all.current"]
    del x


def test_memory_stats_answer_as_torch_accelerator_does() -> None:
    x = torch.ones(256, device="flagos:1")
    assert torch.flagos.memory_stats(1) == torch.accelerator.memory_stats(1)
    assert torch.flagos.memory_allocated("flagos:1") == torch.accelerator.memory_allocated(1)
    assert torch.flagos.max_memory_reserved(1) == torch.accelerator.max_memory_reserved(1)
    assert torch.flagos.mem_get_info(1) == torch.accelerator.get_memory_info(1)
    torch.accelerator.reset_peak_memory_stats(1)
    assert torch.flagos.max_memory_allocated(1) == torch.flagos.memory_allocated(1)
    del x


def test_nested_form_is_cudas() -> None:
    flat = torch.flagos.memory_stats()
    nested = torch.flagos.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["peak"] == flat["allocated_bytes.all.peak"]
    assert nested["num_alloc_retries"] == flat["num_alloc_retries"]


def test_memory_summary_reads_like_cudas(monkeypatch) -> None:
    x = torch.empty(3 << 20, dtype=torch.uint8, device="flagos")
    summary = torch.flagos.memory_summary()
    lines = summary.splitlines()
    assert all(len(line) == 77 for line in lines), [line for line in lines if len(line) != 77]
    assert "PyTorch flagos (host) memory summary, device ID 0" in lines[1]
    allocated = next(line for line in lines if line.startswith("| Allocated memory "))
    assert "KiB" in allocated  # CUDA switches unit only past 768 of the smaller one
    assert len(torch.flagos.memory_summary(abbreviated=True).splitlines()) < len(lines)
    # CUDA's own formatter reads every key it needs from flagos's statistics.
    import torch.cuda.memory as cuda_memory

    monkeypatch.setattr(cuda_memory, "memory_stats", lambda device=None: torch.flagos.memory_stats(device))
    cuda_summary = cuda_memory.memory_summary(0)
    assert cuda_summary.splitlines()[8:10] == lines[8:10]  # the "Allocated memory" rows, number for number
    del x
