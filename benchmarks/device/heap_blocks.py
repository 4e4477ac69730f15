"""Heap blocks per operator call and per unit of work, flagos against the CPU or native CUDA.

A small library preloaded into a child interpreter counts the calls of the C heap's entry points on every
thread: blocks (malloc, calloc, realloc; C++'s operator new goes through malloc) and aligned blocks
(posix_memalign, aligned_alloc, memalign: what PyTorch's CPU allocator calls for tensor memory).  Reported, each
device's counts per call of a set of operators, after warm-up calls, and per unit of tools/device_workloads.py's
`decode` (a token of an 8-layer Llama; needs transformers) and `train` (a step of a 2-layer encoder with AdamW)
workloads.  The reference is the CPU on the host platform (`--reference cpu`, the default) or, on a GPU machine
with torch_fl built for the cuda platform, native CUDA in the same process (`--reference cuda`; decode only:
a process with flagos registered cannot run a CUDA backward, pytorch/pytorch#161129).

The device layer's own objects (kernel views, an operator's list of them, a result made flagos in place) are
reused from call to call, so on flagos an operator asks the heap for the blocks the reference's operator asks
for and no more; on the host platform its tensor memory comes from flagos's allocator cache, so its aligned
blocks are only what a kernel takes for its own scratch.  In the workloads the host runtime's own bookkeeping
adds blocks where its cache meets a block size it has not served before (a growing cache of keys and values).

    python benchmarks/device/heap_blocks.py [--out result.json] [--reference cpu|cuda] [--calls 100] [--units 20]
        [--workloads decode train]

Needs a C compiler (cc or gcc).  Exit codes: 0 ok, 2 unusable input.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
from preload_library import build_preload_library  # noqa: E402

WORKLOADS = ("decode", "train")

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


def operators(device: str) -> dict[str, Callable[[], object]]:
    """The operators counted, on operands made on `device` from one seed."""
    import torch

    torch.manual_seed(0)
    a, b = torch.randn(1024, device=device), torch.randn(1024, device=device)
    m, w = torch.randn(16, 64, device=device), torch.randn(32, 64, device=device)
    index = torch.arange(0, 1024, 4, device=device)
    mask = a > 0
    return {
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


def child(reference: str, calls: int, units: int, workloads: list[str]) -> None:
    """Runs with the counter preloaded: prints {"per_call": {op: {device: [blocks, aligned]}}, "per_unit": ...}."""
    import ctypes
    import gc

    import torch
    import torch_fl  # noqa: F401

    from device_workloads import WORKLOADS as UNITS

    heap = ctypes.CDLL(os.environ["LD_PRELOAD"])  # the preloaded library itself
    heap.heap_blocks.restype = heap.heap_aligned_blocks.restype = ctypes.c_ulong

    def per_run(fn: Callable[[], object], runs: int, warmup: int) -> list[float]:
        for _ in range(warmup):
            fn()
        blocks, aligned = heap.heap_blocks(), heap.heap_aligned_blocks()
        for _ in range(runs):
            fn()
        return [(heap.heap_blocks() - blocks) / runs, (heap.heap_aligned_blocks() - aligned) / runs]

    torch.set_num_threads(1)
    # A collection inside one side's loop would free and allocate for reasons of its own.
    gc.disable()
    per_call: dict[str, dict[str, list[float]]] = {}
    for device in (reference, "flagos"):
        for name, fn in operators(device).items():
            per_call.setdefault(name, {})[device] = per_run(fn, calls, warmup=10)
    per_unit: dict[str, dict[str, list[float]]] = {}
    for workload in workloads:
        for device in (reference, "flagos"):
            per_unit.setdefault(workload, {})[device] = per_run(UNITS[workload](device), units, warmup=5)
    print(json.dumps({"per_call": per_call, "per_unit": per_unit}))


def measure(folder: Path, reference: str = "cpu", calls: int = 100, units: int = 20,
            workloads: tuple[str, ...] = WORKLOADS) -> dict[str, Any]:
    """The child's counts, the counter built and the child run in `folder` (outside any source tree)."""
    counter = build_preload_library(folder, "heapcount", COUNTER, tool="heap_blocks.py", optimise="-O2",
                                    failed_hint="check the compiler installation")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGOS_")} | {"LD_PRELOAD": str(counter)}
    command = [sys.executable, __file__, "--child", reference, str(calls), str(units), *workloads]
    try:
        result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise SystemExit("heap_blocks.py: the counting child ran past 15 minutes; count fewer units "
                         "(--units) or fewer workloads (--workloads)") from None
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"heap_blocks.py: the counting child failed ({tail[0]})")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    if len(sys.argv) >= 5 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", choices=("cpu", "cuda"), default="cpu",
                        help="the device flagos is counted against (default cpu; cuda on a GPU machine)")
    parser.add_argument("--calls", type=int, default=100, help="counted calls per operator (default 100)")
    parser.add_argument("--units", type=int, default=20, help="counted tokens or steps per workload (default 20)")
    parser.add_argument("--workloads", nargs="*", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    if args.calls < 1 or args.units < 1:
        print("heap_blocks.py: --calls and --units take a positive count, such as --calls 100", file=sys.stderr)
        return 2
    if args.reference == "cuda" and "train" in args.workloads:
        print("heap_blocks.py: the train workload needs a CUDA backward, which a process with flagos registered "
              "cannot run; pass --workloads decode with --reference cuda", file=sys.stderr)
        return 2
    import torch
    from _report import emit_json

    if args.reference == "cuda" and not torch.cuda.is_available():
        print("heap_blocks.py: --reference cuda needs a GPU and a CUDA build of torch; run it on a GPU machine, "
              "or count against the CPU (--reference cpu)", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="heap-blocks-") as tmp:
        try:
            counts = measure(Path(tmp), args.reference, args.calls, args.units, tuple(args.workloads))
        except SystemExit as e:
            print(e, file=sys.stderr)
            return 2
    emit_json({"version": 1, "benchmark": "heap_blocks", "torch": torch.__version__, "reference": args.reference,
               "calls": args.calls, "units": args.units, **counts}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
