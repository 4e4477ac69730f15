"""Memory statistics of the flagos device allocator, in ``torch.cuda``'s formats.

``memory_stats`` has CUDA's flat keys (``allocated_bytes.all.peak``, ``reserved_bytes.all.current``,
``num_alloc_retries``, ...), because libraries index them (Lightning's device stats, accelerate's
memory utilities, Hugging Face's Trainer).  They come from ``torch.accelerator.memory_stats``: the
flagos allocator's ``getDeviceStats`` (the C++ ``c10::CachingDeviceAllocator::DeviceStats``, the
structure CUDA's allocator fills too) flattened by PyTorch itself, so the keys, pools included, are
CUDA's by construction.  While torch_fl is loaded, ``torch.accelerator`` is flagos: PyTorch puts a
registered PrivateUse1 backend before any other accelerator (``at::accelerator::getAccelerator``).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["memory_stats", "memory_stats_as_nested_dict", "memory_summary"]


def memory_stats(index: int) -> collections.OrderedDict[str, Any]:
    """CUDA-format statistics of device ``index``, sorted by key as ``torch.cuda.memory_stats`` sorts them."""
    return collections.OrderedDict(sorted(torch.accelerator.memory_stats(index).items()))


def memory_stats_as_nested_dict(index: int) -> dict[str, Any]:
    """``memory_stats`` nested at each ``.``, as ``torch.cuda.memory_stats_as_nested_dict`` gives it."""
    nested: dict[str, Any] = {}
    for key, value in memory_stats(index).items():
        *path, leaf = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def _scaled(value: int, reference: int, units: tuple[str, ...], base: int, threshold: int) -> tuple[int, str]:
    """CUDA's summary scaling: the unit is chosen by the row's first value, the number is truncated to it."""
    unit, ref = units[0], float(reference)
    for nxt in units[1:]:
        if ref < threshold:
            break
        unit, value, ref = nxt, value // base, ref / base
    return value, unit


def _format_size(size: int, reference: int) -> str:
    value, unit = _scaled(size, reference, ("B  ", "KiB", "MiB", "GiB", "TiB", "PiB"), 1024, 768 * 1024)
    return f"{value:6d} {unit}"


def _format_count(count: int, reference: int) -> str:
    value, unit = _scaled(count, reference, (" ", "K", "M"), 1000, 750 * 1000)
    return f"{value:7d} {unit} "


_Formatter = Callable[[int, int], str]

#: The rows of ``torch.cuda.memory_summary``, in its order, with "GPU" read as "device".
_POOLED: tuple[tuple[str, str, _Formatter], ...] = (
    ("allocated_bytes", "Allocated memory", _format_size),
    ("active_bytes", "Active memory", _format_size),
    ("requested_bytes", "Requested memory", _format_size),
    ("reserved_bytes", "Reserved memory", _format_size),
    ("inactive_split_bytes", "Non-releasable memory", _format_size),
    ("allocation", "Allocations", _format_count),
    ("active", "Active allocs", _format_count),
    ("segment", "Reserved segments", _format_count),
    ("inactive_split", "Non-releasable allocs", _format_count),
)
_UNPOOLED: tuple[tuple[str, str, _Formatter], ...] = (
    ("oversize_allocations", "Oversize allocations", _format_count),
    ("oversize_segments", "Oversize segments", _format_count),
)
_FIELDS = ("current", "peak", "allocated", "freed")


def memory_summary(index: int, platform: str, abbreviated: bool = False) -> str:
    """The table ``torch.cuda.memory_summary`` prints, 75 columns wide, for flagos device ``index``."""
    stats = memory_stats(index)
    rule, double = "-" * 75, "=" * 75
    lines = [
        double,
        f" {'':16} PyTorch flagos ({platform}) memory summary, device ID {index:<8d}"[:75].ljust(75),
        rule,
        f"  {'':9} OOMs: {stats.get('num_ooms', 0):<12d} | {'':6} allocation retries: "
        f"{stats.get('num_alloc_retries', 0):<8d}"[:75].ljust(75),
        double,
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
    ]
    for key, name, fmt in _POOLED:
        lines.append(rule)
        pools = [("all", name)] if abbreviated else [
            ("all", name), ("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
        reference = [stats.get(f"{key}.all.{f}", 0) for f in _FIELDS]
        for pool, label in pools:
            values = [stats.get(f"{key}.{pool}.{f}", 0) for f in _FIELDS]
            cells = " | ".join(fmt(v, r) for v, r in zip(values, reference))
            lines.append(f" {label:<21} | {cells} ")
    for key, name, fmt in _UNPOOLED:
        lines.append(rule)
        values = [stats.get(f"{key}.{f}", 0) for f in _FIELDS]
        lines.append(f" {name:<21} | " + " | ".join(fmt(v, v) for v in values) + " ")
    lines.append(double)
    return "|" + "|\n|".join(lines) + "|\n"
