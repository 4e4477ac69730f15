"""Where a flagos training step spends its host time, against native cuda: per phase and per operator.

The model and step are gpu_transformer.py's (its Trainer), native in the reference
interpreter (`--reference-python`) on the same two cores as there.  After 3 warm-up steps each, the two take turns (`--rounds`
times): the median time of the forward (with the loss), backward and optimizer
phases over `--steps` steps (the device is synchronised between phases), then one
profiled step (torch.profiler): per host event (operators, and with `--compiled`
the compiled regions and their wrappers), the number of calls and the self CPU
time; where the profiler sees the GPU, per device kernel the number of launches
and the device time.  Per device, the fastest round of each figure is kept (the
GPU machine's speed drifts).  The report lists host events by their extra self
time on flagos and kernels by their extra device time.  `--compiled` profiles
gpu_compiled_transformer.py's step (the model under torch.compile, inductor) on
both sides instead.  A diagnostic, not a goal: gpu_transformer.py and
gpu_compiled_transformer.py measure the goals.

    python benchmarks/gpu_step_profile.py [--out gpu_step_profile.json] [--top 40] [--compiled]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
from _gpu_common import emit, parser, reference_python, require_flagos, share_cores
from gpu_compiled_transformer import CompiledTrainer
from gpu_transformer import NativeTrainer, Trainer, serve_trainer


def profile(trainer: Trainer, steps: int) -> dict:
    api = trainer.api
    phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
    marks: list[float] = []

    def mark() -> None:
        api.synchronize()
        marks.append(time.perf_counter())

    for _ in range(steps):
        marks.clear()
        mark()
        trainer.step(mark)
        mark()
        for name, (a, b) in zip(phases, zip(marks, marks[1:])):
            phases[name].append((b - a) * 1000)
    # Device kernels come from CUPTI, which sees every kernel of the process, flagos's included.
    activities = [a for a in (torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA)
                  if a in torch.profiler.supported_activities()]
    with torch.profiler.profile(activities=activities) as prof:
        trainer.step()
    ops, kernels = {}, {}
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CPU and e.self_cpu_time_total > 0:
            ops[e.key] = {"calls": e.count, "self_us": round(e.self_cpu_time_total, 1)}
        elif e.device_type != torch.autograd.DeviceType.CPU:
            kernels[e.key] = {"calls": e.count, "self_us": round(e.self_device_time_total, 1)}
    return {"phases_ms": {k: round(statistics.median(v), 3) for k, v in phases.items()}, "ops": ops,
            "kernels": kernels}


def fastest(rounds: list[dict]) -> dict:
    """Per phase, per host event and per kernel, the round in which it took least time."""
    zero = {"calls": 0, "self_us": 0.0}
    best = {"phases_ms": {k: min(r["phases_ms"][k] for r in rounds) for k in rounds[0]["phases_ms"]}}
    for table in ("ops", "kernels"):
        names = {n for r in rounds for n in r[table]}
        best[table] = {n: min((r[table].get(n, zero) for r in rounds), key=lambda o: o["self_us"]) for n in names}
    return best


def by_extra_time(native: dict[str, dict], flagos: dict[str, dict], top: int) -> list[dict]:
    zero = {"calls": 0, "self_us": 0.0}
    rows = ({"name": n, "native": native.get(n, zero), "flagos": flagos.get(n, zero),
             "extra_us": round(flagos.get(n, zero)["self_us"] - native.get(n, zero)["self_us"], 1)}
            for n in set(native) | set(flagos))
    return sorted(rows, key=lambda r: -r["extra_us"])[:top]


def totals(table: dict[str, dict]) -> dict[str, float]:
    return {"calls": sum(o["calls"] for o in table.values()),
            "self_us": round(sum(o["self_us"] for o in table.values()), 1)}


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--compiled", action="store_true", help="the model under torch.compile (inductor) on both sides")
    args = p.parse_args()
    make = CompiledTrainer if args.compiled else Trainer
    if args.native_child:
        trainer = make("cuda")
        serve_trainer(trainer, {"profile": lambda: profile(trainer, args.steps)})
        return 0
    require_flagos()
    share_cores()
    child_args = ["--steps", str(args.steps)] + (["--compiled"] if args.compiled else [])
    native = NativeTrainer(reference_python(args.reference_python), __file__, *child_args)
    flagos = make("flagos")
    try:
        for _ in range(3):
            native.step()
            flagos.step()
        native_rounds, flagos_rounds = [], []
        for _ in range(args.rounds):
            native_rounds.append(native.ask("profile"))
            flagos_rounds.append(profile(flagos, args.steps))
    finally:
        native.close()
    native_best, flagos_best = fastest(native_rounds), fastest(flagos_rounds)
    return emit({
        "benchmark": "gpu_step_profile",
        "step": "compiled" if args.compiled else "eager",
        "phases_ms": {"native": native_best["phases_ms"], "flagos": flagos_best["phases_ms"]},
        "host": {"native": totals(native_best["ops"]), "flagos": totals(flagos_best["ops"])},
        "device": {"native": totals(native_best["kernels"]), "flagos": totals(flagos_best["kernels"])},
        "by_extra_self_time": by_extra_time(native_best["ops"], flagos_best["ops"], args.top),
        "kernels_by_extra_device_time": by_extra_time(native_best["kernels"], flagos_best["kernels"], args.top),
    }, args.out)


if __name__ == "__main__":
    sys.exit(main())
