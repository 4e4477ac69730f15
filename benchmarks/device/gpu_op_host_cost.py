"""Host cost per call of the operators a decoding or training step makes, on the GPU: flagos against native cuda.

Each op runs on the small tensors of a batch-1 decoding step (hidden 1024, bf16), `--number` calls in a
row after a warm-up, then one synchronisation: at these sizes the GPU keeps up with the host, so the time
per call is what the host spends to issue it (Python, the dispatcher, the device layer, the launch).
flagos runs here, native cuda in the reference interpreter (`--reference-python`, _gpu_common.py says why),
both pinned to the same two cores, taking turns op by op and repeat by repeat.  The report lists each op's
median microseconds per call on both sides and the difference, largest first: where flagos's extra host
time per op goes.  Where this interpreter's torch is a CUDA build, rows named "op@cuda" and "op@view" time
the op in this process on plain cuda tensors and on flagos's kernel views (against the same native op), which
splits the difference between loading torch_fl, the kernel views and the flagos layer itself.  A diagnostic for gpu_decode.py and gpu_transformer.py, not a goal of its own.

A loop of one op keeps the code it runs in the processor's instruction cache; a step does not: between two
calls of an op it runs the code of many others.  `--cold-code` runs sixteen other operators on small CPU
tensors (the same on both sides) before each call and times the call alone, so that each call finds its code
as a step leaves it.  The difference between the two modes is what the device layer's code costs when it has
to be fetched again.  `--ops add,linear,...` times those ops only.

A backward over device tensors runs its operators on autograd's worker thread for the device's index (one per
index, shared by cuda and flagos), with grad mode off.  `--autograd-thread` times every call there, from
inside a custom Function's backward, warm-up included: a cost that only the backward pays (compiled backward
graphs run there too) shows as the difference from the default run on the main thread.

    python benchmarks/device/gpu_op_host_cost.py [--out gpu_op_host_cost.json] [--number 2000] [--repeats 7]
        [--cold-code] [--autograd-thread] [--ops NAME,...]
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.nn.functional as F
from _gpu_common import NativeChild, device_api, emit, parser, reference_python, require_flagos, serve, share_cores

HIDDEN, HEADS, CACHE = 1024, 16, 96
T = TypeVar("T")


def cases(device: str) -> dict[str, Callable[[], object]]:
    """Op name -> a call of it on `device` (inputs made once)."""
    g = torch.Generator().manual_seed(0)
    bf16 = {"dtype": torch.bfloat16}

    def rand(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    x, y, w = rand(1, 1, HIDDEN), rand(1, 1, HIDDEN), rand(HIDDEN, HIDDEN)
    q, k = rand(1, HEADS, 1, HIDDEN // HEADS), rand(1, HEADS, CACHE, HIDDEN // HEADS)
    table, ids = rand(4096, HIDDEN), torch.tensor([[7]], device=device)
    cache, position, one = rand(1, HEADS, CACHE, HIDDEN // HEADS), torch.tensor([5], device=device), q.clone()
    small = rand(32, 32, dtype=torch.float32)
    mask = rand(1, 1, HIDDEN) > 0
    out = rand(1, HIDDEN)  # the out= buffer of mm_out, as inductor's extern mm calls write one
    variants: dict[str, Callable[[], object]] = {}
    if device == "flagos" and torch.version.cuda:
        # The same ops in this process on plain cuda tensors and on flagos's zero-copy cuda views of x and y:
        # native minus "@cuda" is what merely loading torch_fl costs every op, "@view" minus "@cuda" what the
        # kernel views cost the cuda kernel, the op minus "@view" what the flagos layer costs.
        from torch_fl import _C

        for where, (a, b, m, o) in {"cuda": (x.cpu().cuda(), y.cpu().cuda(), w.cpu().cuda(), out.cpu().cuda()),
                                    "view": tuple(_C._kernel_view(t) for t in (x, y, w, out))}.items():
            variants.update({f"add@{where}": lambda a=a, b=b: a + b, f"neg@{where}": lambda a=a: -a,
                             f"mul_@{where}": lambda a=a: a.mul_(1.0),
                             f"softmax@{where}": lambda a=a: torch.softmax(a, dim=-1),
                             f"mean@{where}": lambda a=a: a.mean(-1, keepdim=True),
                             f"linear@{where}": lambda a=a, m=m: F.linear(a, m),
                             f"mm_out@{where}": lambda a=a, m=m, o=o: torch.mm(a.view(1, HIDDEN), m.t(), out=o)})
    return variants | {
        "add": lambda: x + y,
        "add_scalar": lambda: x + 1,
        "mul": lambda: x * y,
        "mul_": lambda: x.mul_(1.0),
        "neg": lambda: -x,
        "rsqrt": lambda: torch.rsqrt(x),
        "pow": lambda: x.pow(2),
        "mean": lambda: x.mean(-1, keepdim=True),
        "to_float": lambda: x.float(),
        "silu": lambda: F.silu(x),
        "linear": lambda: F.linear(x, w),
        "mm_out": lambda: torch.mm(x.view(1, HIDDEN), w.t(), out=out),
        "matmul_fp32_32": lambda: small @ small,
        "view": lambda: x.view(1, 1, HEADS, HIDDEN // HEADS),
        "transpose": lambda: q.transpose(1, 2),
        "reshape": lambda: x.reshape(1, HEADS, 1, -1),
        "slice": lambda: x[..., : HIDDEN // 2],
        "unsqueeze": lambda: x.unsqueeze(0),
        "cat": lambda: torch.cat((x, y), dim=-1),
        "embedding": lambda: F.embedding(ids, table),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, k),
        "softmax": lambda: torch.softmax(x, dim=-1),
        "argmax": lambda: x.argmax(-1),
        "index_copy_": lambda: cache.index_copy_(2, position, one),
        "clone": lambda: x.clone(),
        "contiguous": lambda: q.transpose(1, 2).contiguous(),
        "arange": lambda: torch.arange(32, device=device),
        "select_backward": lambda: torch.ops.aten.select_backward(x.view(1, HIDDEN), [3, 1, HIDDEN], 0, 1),
        "masked_fill": lambda: x.masked_fill(mask, 0.0),
        "zeros": lambda: torch.zeros(1, HIDDEN, device=device, **bf16),
        "empty": lambda: torch.empty(1, HIDDEN, device=device, **bf16),
    }


def other_code() -> Callable[[], None]:
    """Sixteen operators on small CPU tensors, one call each: other code run between two calls of an op."""
    v, m = torch.randn(16), torch.randn(4, 4)
    calls: list[Callable[[], object]] = [
        lambda: torch.sin(v), lambda: torch.cumsum(v, 0), lambda: torch.sort(v), lambda: torch.topk(v, 3),
        lambda: torch.std(v), lambda: torch.remainder(v, 2), lambda: torch.roll(v, 1), lambda: torch.unique(v),
        lambda: torch.where(v > 0, v, 0.0), lambda: torch.median(v), lambda: m @ m, lambda: torch.inverse(m + 4),
        lambda: torch.lgamma(v), lambda: torch.histc(v), lambda: torch.logcumsumexp(v, 0), lambda: F.gelu(v)]

    def run() -> None:
        for call in calls:
            call()
    return run


def host_us(device: str, call: Callable[[], object], number: int, between: Callable[[], None] | None = None) -> float:
    """Microseconds of host time per call of `call`; with `between`, run before each call and not timed."""
    api = device_api(device)
    api.synchronize()
    if between is None:
        start = time.perf_counter()
        for _ in range(number):
            call()
        api.synchronize()
        return (time.perf_counter() - start) / number * 1e6
    spent = 0
    for _ in range(number):
        between()
        start_ns = time.perf_counter_ns()
        call()
        spent += time.perf_counter_ns() - start_ns
    api.synchronize()
    return spent / number / 1e3


def on_autograd_thread(device: str, work: Callable[[], T]) -> T:
    """`work()` run where a backward over `device` tensors runs its operators: autograd's thread for the device."""
    result: list[T] = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, a: torch.Tensor) -> torch.Tensor:
            return a.clone()

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
            result.append(work())
            return grad

    Probe.apply(torch.zeros(1, device=device, requires_grad=True)).sum().backward()
    return result[0]


def timing_mode(autograd_thread: bool) -> contextlib.AbstractContextManager:
    """Inference mode on the main thread; a backward needs autograd, and runs its operators with grad mode off."""
    return contextlib.nullcontext() if autograd_thread else torch.inference_mode()


def timers(device: str, number: int, cold_code: bool = False, ops: set[str] | None = None,
           autograd_thread: bool = False) -> dict[str, Callable[[], float]]:
    out = {}
    between = other_code() if cold_code else None
    with timing_mode(autograd_thread):
        for name, call in cases(device).items():
            if ops is not None and name.split("@")[0] not in ops:
                continue

            def timed(call: Callable[[], object] = call) -> float:
                return host_us(device, call, number, between)

            def warm(call: Callable[[], object] = call) -> None:
                for _ in range(200):
                    call()

            if autograd_thread:
                on_autograd_thread(device, warm)
                out[name] = lambda timed=timed: on_autograd_thread(device, timed)
            else:
                warm()
                out[name] = timed
    return out


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--number", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--cold-code", action="store_true", help="run other operators' code before each call, as a "
                   "step does, and time the call alone")
    p.add_argument("--autograd-thread", action="store_true", help="time the calls on autograd's thread for the "
                   "device, inside a backward, instead of the main thread")
    p.add_argument("--ops", help="comma-separated op names to time (default: all)")
    args = p.parse_args()
    ops = set(args.ops.split(",")) if args.ops else None
    if ops is not None:
        known = set(cases("cpu"))
        if not ops <= known:
            p.error(f"--ops: unknown {sorted(ops - known)}; choose from {sorted(known)}")
    if args.native_child:
        native_timers = timers("cuda", args.number, args.cold_code, ops, args.autograd_thread)

        def time_op(name: str) -> dict[str, float]:
            with timing_mode(args.autograd_thread):
                return {"us": native_timers[name]()}

        serve({"time": time_op})
        return 0
    require_flagos()
    cores = share_cores()
    native = NativeChild(reference_python(args.reference_python), __file__, "--number", str(args.number),
                         *(["--cold-code"] if args.cold_code else []), *(["--ops", args.ops] if args.ops else []),
                         *(["--autograd-thread"] if args.autograd_thread else []))
    rows = []
    try:
        flagos = timers("flagos", args.number, args.cold_code, ops, args.autograd_thread)
        for name, flagos_timer in flagos.items():
            native_us, flagos_us = [], []
            for _ in range(args.repeats):
                native_us.append(native.ask("time", name.split("@")[0])["us"])
                with timing_mode(args.autograd_thread):
                    flagos_us.append(flagos_timer())
            n, f = statistics.median(native_us), statistics.median(flagos_us)
            rows.append({"op": name, "native_us": round(n, 2), "flagos_us": round(f, 2), "extra_us": round(f - n, 2),
                         "ratio": round(f / n, 3)})
        native_env = native.ask("environment")
    finally:
        native.close()
    rows.sort(key=lambda r: -r["extra_us"])
    ratios = [r["ratio"] for r in rows]
    return emit({"benchmark": "gpu_op_host_cost", "number": args.number, "cold_code": args.cold_code,
                 "thread": "autograd" if args.autograd_thread else "main", "cores": cores,
                 "ops": rows,
                 "median_ratio": statistics.median(ratios), "median_extra_us": statistics.median(
                     r["extra_us"] for r in rows)}, args.out, native_env)


if __name__ == "__main__":
    sys.exit(main())
