"""Where a flagos training step spends its host time, against native cuda: per phase and per operator.

The model and step are gpu_transformer.py's (its Trainer), native in the reference
interpreter (`--reference-python`) on the same two cores as there.  After 3 warm-up steps each, the two take turns (`--rounds`
times): the median time of the forward (with the loss), backward and optimizer
phases over `--steps` steps (the device is synchronised between phases), then one
profiled step (torch.profiler, CPU activity): per operator, the number of calls
and the self CPU time.  Per device, the fastest round of each figure is kept (the
GPU machine's speed drifts).  The report lists the operators by their extra self
time on flagos.  A diagnostic, not a goal: gpu_transformer.py measures the goal.

    python benchmarks/gpu_step_profile.py [--out gpu_step_profile.json] [--top 40]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
from _gpu_common import emit, parser, reference_python, require_flagos, share_cores
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
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        trainer.step()
    ops = {e.key: {"calls": e.count, "self_us": round(e.self_cpu_time_total, 1)}
           for e in prof.key_averages() if e.key.startswith("aten::")}
    return {"phases_ms": {k: round(statistics.median(v), 3) for k, v in phases.items()}, "ops": ops}


def fastest(rounds: list[dict]) -> dict:
    """Per phase and per operator, the round in which it took least time."""
    names = {n for r in rounds for n in r["ops"]}
    zero = {"calls": 0, "self_us": 0.0}
    return {"phases_ms": {k: min(r["phases_ms"][k] for r in rounds) for k in rounds[0]["phases_ms"]},
            "ops": {n: min((r["ops"].get(n, zero) for r in rounds), key=lambda o: o["self_us"]) for n in names}}


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args()
    if args.native_child:
        trainer = Trainer("cuda")
        serve_trainer(trainer, {"profile": lambda: profile(trainer, args.steps)})
        return 0
    require_flagos()
    share_cores()
    native = NativeTrainer(reference_python(args.reference_python), __file__, "--steps", str(args.steps))
    flagos = Trainer("flagos")
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
    zero = {"calls": 0, "self_us": 0.0}
    rows = sorted(({"op": n, "native": native_best["ops"].get(n, zero), "flagos": flagos_best["ops"].get(n, zero),
                    "extra_us": round(flagos_best["ops"].get(n, zero)["self_us"]
                                      - native_best["ops"].get(n, zero)["self_us"], 1)}
                   for n in set(native_best["ops"]) | set(flagos_best["ops"])), key=lambda r: -r["extra_us"])
    return emit({
        "benchmark": "gpu_step_profile",
        "phases_ms": {"native": native_best["phases_ms"], "flagos": flagos_best["phases_ms"]},
        "calls": {"native": sum(o["calls"] for o in native_best["ops"].values()),
                  "flagos": sum(o["calls"] for o in flagos_best["ops"].values())},
        "self_us": {"native": round(sum(o["self_us"] for o in native_best["ops"].values()), 1),
                    "flagos": round(sum(o["self_us"] for o in flagos_best["ops"].values()), 1)},
        "by_extra_self_time": rows[:args.top],
    }, args.out)


if __name__ == "__main__":
    sys.exit(main())
