"""Heap blocks per operator: flagos's device layer asks the C heap for none beyond what the kernel device's call asks.

An operator on flagos sees its arguments through the thread's cached kernel views, rebound to the call's
tensors, and its result becomes a flagos tensor in place (csrc/aten/views/KernelView.h).  So the operator asks
the C heap (malloc, calloc, realloc; operator new goes through malloc) for as many blocks as the same operator
on CPU tensors does -- its result's TensorImpl and storage, its shape vectors -- and takes its results' memory
from flagos's allocator cache, not from the heap's aligned allocations (what PyTorch's CPU allocator calls; a
kernel's own scratch memory is the same on both devices).  A regression in the layer -- a vector per call, a
fresh view or wrapper per argument or result -- costs every operator on the cuda platform an allocation and a
free, in code that runs between CUDA's own; it shows here without a GPU.

The counts come from benchmarks/device/heap_blocks.py: a small library preloaded into a fresh interpreter
counts the calls of the heap's entry points on every thread.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from support.paths import REPO

pytest.importorskip("torch")
sys.path.insert(0, str(REPO / "benchmarks" / "device"))
import heap_blocks  # noqa: E402

OPS = ["add", "add_", "mm", "linear", "sum", "softmax", "layer_norm", "gelu", "where", "to_dtype", "copy_strided",
       "index_select", "cat", "argmax", "view", "item",
       # PyTorch's generic arange hands the kernel an empty out= tensor to resize: the memory the kernel gives the
       # view moves to the flagos tensor, and the view stays one the next call can take.
       "arange"]


@pytest.fixture(scope="module")
def per_call(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """{op: {device: [heap blocks, aligned heap blocks] per call}}, from one fresh interpreter."""
    return heap_blocks.measure(tmp_path_factory.mktemp("heap"), calls=100, workloads=())["per_call"]


def test_every_counted_operator_is_checked(per_call: dict[str, Any]) -> None:
    assert set(per_call) == {op if isinstance(op, str) else op.values[0] for op in OPS}


def test_the_counter_sees_the_cpu_allocate(per_call: dict[str, Any]) -> None:
    # A CPU result is a TensorImpl and a storage from the heap, and its memory from the CPU allocator's aligned
    # allocation; an in-place op makes neither.
    blocks, aligned = per_call["add"]["cpu"]
    assert blocks >= 2 and aligned == 1
    assert per_call["add_"]["cpu"] == [0, 0]


@pytest.mark.parametrize("op", OPS)
def test_flagos_asks_the_heap_for_no_more_than_the_cpu(op: str, per_call: dict[str, Any]) -> None:
    cpu_blocks, cpu_aligned = per_call[op]["cpu"]
    flagos_blocks, flagos_aligned = per_call[op]["flagos"]
    assert flagos_blocks <= cpu_blocks, f"{op}: {flagos_blocks} heap blocks per call on flagos, {cpu_blocks} on the CPU"
    # Results' memory is the flagos allocator's, from its cache; what a kernel allocates for itself (the CPU's
    # GELU takes scratch memory) it allocates on both devices.
    assert flagos_aligned <= cpu_aligned, f"{op}: {flagos_aligned} aligned heap blocks per call on flagos, " \
                                          f"{cpu_aligned} on the CPU"
