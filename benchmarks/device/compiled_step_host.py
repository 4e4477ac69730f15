"""A compiled model's step on the host platform: inductor on flagos against inductor on plain CPU tensors.

A small pre-norm TransformerEncoder (4 layers, d_model 64, 4 heads, feed-forward
128, batch 2 x 16, no dropout) wrapped in `torch.compile` (inductor, whose C++
backend writes the kernels on both devices) runs forward and backward on one
thread.  The sizes are small on purpose: the kernels take little time, so the
figure shows what flagos adds around them: the compiled wrapper's buffer
allocations, the extern kernels (matrix products, attention) dispatched as flagos
operators, gradient accumulation.  After a warm-up (the compile), the two devices
take turns, `--repeats` timings of `--number` steps each; the report gives the
median and best time per step and the ratio flagos/cpu of each, and the median
time of the forward and of the backward within a step.  A diagnostic for
the cuda platform's compiled-step gap (gpu_compiled_transformer.py), where the
same wrapper code runs around Triton kernels.

    python benchmarks/device/compiled_step_host.py [--out result.json]
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
import timeit

import torch
from _report import emit_json
from dispatch_overhead import timing_args

LAYERS, D_MODEL, HEADS, FF, BATCH, SEQ = 4, 64, 4, 128, 2, 16


def compiled_step(device: str, phases: dict[str, float]):  # noqa: ANN201 - a step callable
    """One forward and backward of the compiled model on `device`; each adds its phases' seconds to `phases`."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True, norm_first=True)
    model = torch.compile(torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).to(device))
    x = torch.randn(BATCH, SEQ, D_MODEL, device=device)

    def step() -> None:
        start = time.perf_counter()
        loss = model(x).sum()
        forward_done = time.perf_counter()
        loss.backward()
        phases["forward"] += forward_done - start
        phases["backward"] += time.perf_counter() - forward_done

    return step


def main() -> int:
    args = timing_args(__doc__.splitlines()[0], number=50, repeats=15)
    if not hasattr(torch, "flagos") or torch_fl_platform() != "host":
        print("this measures the host platform: run it with torch_fl built for host", file=sys.stderr)
        return 2
    devices = ("cpu", "flagos")
    phases = {device: {"forward": 0.0, "backward": 0.0} for device in devices}
    steps = {device: compiled_step(device, phases[device]) for device in devices}
    for step in steps.values():  # compiles, then warms the allocators and caches
        for _ in range(5):
            step()
    times: dict[str, list[float]] = {"cpu": [], "flagos": []}
    phase_times = {device: {"forward": [], "backward": []} for device in devices}
    for _ in range(args.repeats):
        for device, step in steps.items():
            phases[device].update(forward=0.0, backward=0.0)
            times[device].append(timeit.timeit(step, number=args.number) / args.number * 1e6)
            for phase, seconds in phases[device].items():
                phase_times[device][phase].append(seconds / args.number * 1e6)
    medians = {d: statistics.median(t) for d, t in times.items()}
    best = {d: min(t) for d, t in times.items()}
    report = {
        "benchmark": "compiled_step_host",
        "machine": platform.machine(),
        "torch": torch.__version__,
        "config": {"layers": LAYERS, "d_model": D_MODEL, "heads": HEADS, "ff": FF, "batch": BATCH, "seq": SEQ,
                   "threads": 1, "compile": "torch.compile(model), inductor, default mode"},
        "step_us": {d: {"median": round(medians[d], 1), "best": round(best[d], 1)} for d in steps},
        "ratio_median": round(medians["flagos"] / medians["cpu"], 3),
        "ratio_best": round(best["flagos"] / best["cpu"], 3),
        # Where the step's time goes: flagos runs the backward on autograd's device thread, the CPU on the caller's.
        "phase_us_median": {d: {phase: round(statistics.median(t), 1) for phase, t in phase_times[d].items()}
                            for d in devices},
    }
    emit_json(report, args.out)
    return 0


def torch_fl_platform() -> str:
    import torch_fl

    return torch_fl._C._platform()


if __name__ == "__main__":
    sys.exit(main())
