"""``torch.flagos.memory``: the flagos device allocator, with ``torch.cuda.memory``'s functions.

Statistics in CUDA's formats (``_memory``), the per-process memory fraction, and the allocation
history and snapshot that PyTorch's memory viz reads.  Where flagos blocks are another allocator's
(the cuda platform: CUDA's caching allocator hands them out, ``csrc/runtime/cuda/CudaDeviceAllocator.cpp``),
that allocator's own history describes them, and the history functions are ``torch.cuda.memory``'s; where
flagos owns its blocks (the host platform), the allocator records them itself
(``csrc/runtime/MemoryHistory.h``).
"""

from __future__ import annotations

import pickle
import sys
from typing import Any, Literal

from torch_fl import _C, _device_facts, _memory
from torch_fl._device_index import DeviceLike as _DeviceLike
from torch_fl._device_index import device_index as _index

__all__ = [
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
    "memory_stats_as_nested_dict", "memory_summary", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "reset_max_memory_allocated", "empty_cache", "mem_get_info", "set_per_process_memory_fraction",
    "get_per_process_memory_fraction", "memory_snapshot",
]


def memory_stats(device: _DeviceLike = None) -> dict[str, Any]:
    """The allocator's statistics for ``device`` with ``torch.cuda.memory_stats``'s flat keys
    (``allocated_bytes.all.peak``, ``reserved_bytes.large_pool.current``, ``num_alloc_retries``, ...)."""
    return _memory.memory_stats(_index(device))


def memory_stats_as_nested_dict(device: _DeviceLike = None) -> dict[str, Any]:
    """``memory_stats`` as nested dictionaries (``["allocated_bytes"]["all"]["peak"]``), as torch.cuda's."""
    return _memory.memory_stats_as_nested_dict(_index(device))


def memory_summary(device: _DeviceLike = None, abbreviated: bool = False) -> str:
    """The table ``torch.cuda.memory_summary`` prints, for a flagos device."""
    return _memory.memory_summary(_index(device), _C._platform(), abbreviated)


def memory_allocated(device: _DeviceLike = None) -> int:
    return int(memory_stats(device).get("allocated_bytes.all.current", 0))


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return int(memory_stats(device).get("allocated_bytes.all.peak", 0))


def memory_reserved(device: _DeviceLike = None) -> int:
    return int(memory_stats(device).get("reserved_bytes.all.current", 0))


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return int(memory_stats(device).get("reserved_bytes.all.peak", 0))


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_accumulated_memory_stats(_index(device))


def reset_max_memory_allocated(device: _DeviceLike = None) -> None:
    """torch.cuda's older name: resets every peak statistic, as ``reset_peak_memory_stats``."""
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    _C._empty_cache()


def mem_get_info(device: _DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of ``device``."""
    return _C._mem_get_info(_index(device))


def set_per_process_memory_fraction(fraction: float, device: _DeviceLike = None) -> None:
    """Limits what this process may reserve on ``device`` to ``fraction`` (0..1) of its memory, as
    ``torch.cuda.set_per_process_memory_fraction``: an allocation beyond it frees the allocator's cache and
    retries, then raises ``torch.OutOfMemoryError`` naming the limit."""
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
        raise TypeError(f"set_per_process_memory_fraction: fraction must be a float, not {type(fraction).__name__}")
    _C._set_memory_fraction(float(fraction), _index(device))


def get_per_process_memory_fraction(device: _DeviceLike = None) -> float:
    """The fraction ``set_per_process_memory_fraction`` set for ``device`` (1.0 until then)."""
    return float(_C._memory_fraction(_index(device)))


def _record_memory_history(enabled: Literal["state", "all"] | None = "all",
                           context: Literal["state", "alloc", "all"] | None = "all",
                           stacks: Literal["python", "all"] = "all", max_entries: int = sys.maxsize,
                           device: _DeviceLike = None) -> None:
    """Starts (or, with ``enabled=None``, stops) recording allocations with their stacks, as
    ``torch.cuda.memory._record_memory_history``: ``enabled="state"`` keeps the stacks of live blocks,
    ``"all"`` also a trace of every allocator action (the newest ``max_entries`` per device);
    ``context`` says which actions keep a stack; ``stacks="all"`` adds C++ frames to Python's."""
    module = _device_facts.kernel_device_module()  # flagos blocks are its allocator's: its history has them
    if module is not None:
        module.memory._record_memory_history(enabled, context=context, stacks=stacks, max_entries=max_entries)
        return
    _C._record_memory_history(enabled, context, stacks, max_entries)


def _snapshot(device: _DeviceLike = None) -> dict[str, Any]:
    """The allocator's state and trace in ``torch.cuda.memory._snapshot``'s format: ``segments`` (each
    with its ``blocks``) and ``device_traces`` (one list of actions per device)."""
    module = _device_facts.kernel_device_module()
    if module is not None:
        return module.memory._snapshot()  # type: ignore[no-any-return]
    snapshot: dict[str, Any] = _C._memory_snapshot()
    return snapshot


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Writes ``_snapshot()`` as a pickle, the file https://pytorch.org/memory_viz opens."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def memory_snapshot() -> list[dict[str, Any]]:
    """Every segment the allocator holds, on every device (``torch.cuda.memory_snapshot``)."""
    segments: list[dict[str, Any]] = _snapshot()["segments"]
    return segments
