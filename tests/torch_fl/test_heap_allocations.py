"""Heap blocks per operator: flagos's device layer asks the C heap for none beyond what the kernel device's call asks.

An operator on flagos sees its arguments through the thread's cached kernel views, rebound to the call's
tensors, and its result becomes a flagos tensor in place (csrc/aten/views/KernelView.h).  So the operator asks
the C heap (malloc, calloc, realloc; operator new goes through malloc) for as many blocks as the same operator
on CPU tensors does -- its result's TensorImpl and storage, its shape vectors -- and takes its results' memory
from flagos's allocator cache, not from the heap's aligned allocations (posix_memalign, aligned_alloc,
memalign: what PyTorch's CPU allocator calls; a kernel's own scratch memory is the same on both devices).  A
regression in the layer -- a vector per call, a fresh view or wrapper per argument or result -- costs every
operator on the cuda platform an allocation and a free, in code that runs between CUDA's own; it shows here
without a GPU.

The counts come from a small library preloaded into a fresh interpreter, which counts the calls of the heap's
entry points on every thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.elf import compile_c

pytest.importorskip("torch")

COUNTER = r"""
#include <stdatomic.h>
#include <stddef.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static atomic_ulong blocks, aligned_blocks;
static void count(atomic_ulong *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }
void *malloc(size_t n) { count(&blocks); return __libc_malloc(n); }
void *calloc(size_t k, size_t n) { count(&blocks); return __libc_calloc(k, n); }
void *realloc(void *p, size_t n) { count(&blocks); return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { count(&aligned_blocks); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { count(&aligned_blocks); return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
  count(&aligned_blocks);
  void *p = __libc_memalign(a, n);
  if (p == NULL) return 12; /* ENOMEM */
  *out = p;
  return 0;
}
unsigned long heap_blocks(void) { return atomic_load(&blocks); }
unsigned long heap_aligned_blocks(void) { return atomic_load(&aligned_blocks); }
"""

# Each operator on each device: heap blocks and aligned blocks per call, after warm-up calls have filled the
# caches (flagos's allocator, the thread's views, the dispatcher's).  The collector is off: a collection in
# the middle of one side's loop would free and allocate for reasons of its own.
PROBE = r"""
import ctypes, gc, json, os
import torch

heap = ctypes.CDLL(os.environ["LD_PRELOAD"])  # the preloaded library itself
heap.heap_blocks.restype = heap.heap_aligned_blocks.restype = ctypes.c_ulong

def per_call(fn, runs=100):
    for _ in range(10):
        fn()
    blocks, aligned = heap.heap_blocks(), heap.heap_aligned_blocks()
    for _ in range(runs):
        fn()
    return (heap.heap_blocks() - blocks) / runs, (heap.heap_aligned_blocks() - aligned) / runs

gc.disable()
counts = {}
for device in ("cpu", "flagos"):
    torch.manual_seed(0)
    a, b = torch.randn(1024, device=device), torch.randn(1024, device=device)
    m, w = torch.randn(16, 64, device=device), torch.randn(32, 64, device=device)
    index = torch.arange(0, 1024, 4, device=device)
    mask = a > 0
    ops = {
        "add": lambda: a + b,
        "add_": lambda: a.add_(b),
        "mm": lambda: a.view(32, 32) @ b.view(32, 32),
        "linear": lambda: torch.nn.functional.linear(m, w, w[:, 0]),
        "sum": lambda: a.sum(),
        "softmax": lambda: torch.softmax(a, 0),
        "layer_norm": lambda: torch.nn.functional.layer_norm(m, (64,)),
        "gelu": lambda: torch.nn.functional.gelu(a),
        "where": lambda: torch.where(mask, a, b),
        "to_dtype": lambda: a.to(torch.half),
        "copy_strided": lambda: m.t().contiguous(),
        "index_select": lambda: a.index_select(0, index),
        "cat": lambda: torch.cat([a, b]),
        "argmax": lambda: a.argmax(),
        "arange": lambda: torch.arange(0, 64, device=device),
        "view": lambda: a.view(32, 32),
        "item": lambda: a[0].item(),
    }
    counts[device] = {name: per_call(fn) for name, fn in ops.items()}
print(json.dumps(counts))
"""

OPS = ["add", "add_", "mm", "linear", "sum", "softmax", "layer_norm", "gelu", "where", "to_dtype", "copy_strided",
       "index_select", "cat", "argmax", "view", "item",
       # PyTorch's generic arange hands the kernel an empty out= tensor to resize: the kernel view takes memory of
       # its own, which flagos adopts through a shared storage, and the next call needs a fresh view.
       pytest.param("arange", marks=pytest.mark.xfail(strict=True, reason="the kernel resizes its out= view"))]


@pytest.fixture(scope="module")
def heap_counts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[float]]]:
    """{device: {op: [heap blocks, aligned heap blocks] per call}}, from one fresh interpreter."""
    where = tmp_path_factory.mktemp("heap")
    counter = compile_c(where / "libheapcount.so", COUNTER, opt="-O2")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGOS_")} | {"LD_PRELOAD": str(counter)}
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=where, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"the probe failed ({result.returncode}):\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_counter_sees_the_cpu_allocate(heap_counts: dict[str, dict[str, list[float]]]) -> None:
    # A CPU result is a TensorImpl and a storage from the heap, and its memory from the CPU allocator's aligned
    # allocation; an in-place op makes neither.
    blocks, aligned = heap_counts["cpu"]["add"]
    assert blocks >= 2 and aligned == 1
    assert heap_counts["cpu"]["add_"] == [0, 0]


@pytest.mark.parametrize("op", OPS)
def test_flagos_asks_the_heap_for_no_more_than_the_cpu(op: str, heap_counts: dict[str, dict[str, list[float]]]) -> None:
    cpu_blocks, cpu_aligned = heap_counts["cpu"][op]
    flagos_blocks, flagos_aligned = heap_counts["flagos"][op]
    assert flagos_blocks <= cpu_blocks, f"{op}: {flagos_blocks} heap blocks per call on flagos, {cpu_blocks} on the CPU"
    # Results' memory is the flagos allocator's, from its cache; what a kernel allocates for itself (the CPU's
    # GELU takes scratch memory) it allocates on both devices.
    assert flagos_aligned <= cpu_aligned, f"{op}: {flagos_aligned} aligned heap blocks per call on flagos, " \
                                          f"{cpu_aligned} on the CPU"
