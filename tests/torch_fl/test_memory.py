"""The caching device allocator: statistics, caching, pinned memory, out of memory."""

from __future__ import annotations

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
