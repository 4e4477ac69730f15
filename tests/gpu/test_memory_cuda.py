"""torch.flagos.memory on the cuda platform: flagos blocks are CUDA's caching allocator's, so the memory
fraction is CUDA's allocator's limit, and the history and snapshot are CUDA's, with flagos tensors in them."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_memory_fraction_is_enforced_on_flagos_allocations() -> None:
    total = torch.flagos.mem_get_info()[1]
    torch.flagos.empty_cache()
    torch.flagos.set_per_process_memory_fraction(0.05)
    try:
        assert torch.flagos.get_per_process_memory_fraction() == 0.05
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(int(total * 0.08), dtype=torch.uint8, device="flagos")
        small = torch.empty(int(total * 0.01), dtype=torch.uint8, device="flagos")
        del small
    finally:
        torch.flagos.set_per_process_memory_fraction(1.0)
    torch.flagos.empty_cache()


def test_history_and_snapshot_hold_flagos_tensors() -> None:
    if not torch.cuda.is_available():
        pytest.skip("the history is torch.cuda.memory's, which stock torch+cpu does not compile")
    torch.flagos.memory._record_memory_history()
    try:
        x = torch.ones(1 << 20, device="flagos")
        snapshot = torch.flagos.memory._snapshot()
    finally:
        torch.flagos.memory._record_memory_history(None)
    addresses = {b["address"] for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "active_allocated"}
    assert x.data_ptr() in addresses
    allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc" and e["addr"] == x.data_ptr()]
    assert allocs and any("test_history_and_snapshot_hold_flagos_tensors" in f["name"] for f in allocs[0]["frames"])
