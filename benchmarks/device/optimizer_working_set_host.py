"""An optimizer's working set on flagos (provider `host`) against plain CPU tensors: the cost per tensor.

AdamW visits four lists of a model's tensors (parameters, gradients, two states) with one foreach
op each, several times a step: 4 x 144 tensors for a 12-layer encoder.  Each flagos tensor of such a
list reaches the kernel as a kernel view, which each thread keeps for the next call while it still
matches its tensor (csrc/aten/views/KernelView.cpp); a view that no longer fits the thread's table is
rebuilt on every visit.  Here `torch._foreach_add_` runs over each of four lists of `--tensors`
8-element tensors, on one thread, CPU and flagos taking turns repeat by repeat; reported: the best
time per tensor of each and flagos's extra time per tensor.

    python benchmarks/device/optimizer_working_set_host.py [--out result.json] [--tensors 144]
"""

from __future__ import annotations

import platform
import sys
import timeit

import torch
from _report import emit_json
from dispatch_overhead import timing_args


def main() -> int:
    args = timing_args(__doc__.splitlines()[0], number=50, repeats=15, extra=lambda p: p.add_argument(
        "--tensors", type=int, default=144, help="tensors per list (four lists)"))
    torch.manual_seed(0)
    steps = {}
    for device in ("cpu", "flagos"):
        lists = [[torch.randn(8, device=device) for _ in range(args.tensors)] for _ in range(4)]

        def step(lists: list[list[torch.Tensor]] = lists) -> None:
            for tensors in lists:
                torch._foreach_add_(tensors, 1.0)

        step()  # warm-up: allocator blocks, routing and view caches
        steps[device] = step
    best = {device: float("inf") for device in steps}
    for _ in range(args.repeats):  # in turns, so that drift of a shared machine hits both
        for device, step in steps.items():
            best[device] = min(best[device], timeit.timeit(step, number=args.number))
    per_tensor_us = {device: t / args.number / (4 * args.tensors) * 1e6 for device, t in best.items()}
    report = {
        "version": 1,
        "benchmark": "optimizer_working_set_host",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "lists": 4,
        "tensors_per_list": args.tensors,
        "elements": 8,
        "threads": 1,
        "per_tensor_us": {device: round(us, 3) for device, us in per_tensor_us.items()},
        "flagos_extra_per_tensor_us": round(per_tensor_us["flagos"] - per_tensor_us["cpu"], 3),
    }
    emit_json(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
