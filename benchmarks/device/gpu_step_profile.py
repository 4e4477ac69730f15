"""Where a flagos training step spends its host time, against native cuda: per phase and per operator.

The model and step are gpu_transformer.py's (its Trainer), native in the reference
interpreter (`--reference-python`) on the same two cores as there.  After 3 warm-up steps each, the two take turns (`--rounds`
times): the median time of the forward (with the loss), backward and optimizer
phases over `--steps` steps (the device is synchronised between phases), then one
profiled step (torch.profiler): per host event (operators, and with `--compiled`
the compiled regions and their wrappers), the number of calls and the self CPU
time; per CUDA runtime and driver API function (cudaLaunchKernel, cudaEventRecord,
cudaStreamWaitEvent, cudaMemcpyAsync, ...) the number of calls in the step; the
self CPU time per host thread (the caller's, and autograd's device thread); where
the profiler sees the GPU, per device kernel the number of launches and the device time.  Per device, the fastest round of each figure is kept (the
GPU machine's speed drifts).  The report lists host events by their extra self
time on flagos and kernels by their extra device time.  `--compiled` profiles
gpu_compiled_transformer.py's step (the model under torch.compile, inductor) on
both sides instead.  A diagnostic, not a goal: gpu_transformer.py and
gpu_compiled_transformer.py measure the goals.

    python benchmarks/device/gpu_step_profile.py [--out gpu_step_profile.json] [--top 40] [--compiled] [--batch 1 --seq 16]
"""

from __future__ import annotations

import statistics
import sys
import time

import gpu_transformer
import torch
from _gpu_common import emit, parser, reference_python, require_flagos, share_cores
from gpu_compiled_transformer import CompiledTrainer
from gpu_transformer import NativeTrainer, Trainer, alternate_profiles, serve_trainer


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
    ops, kernels, runtime = {}, {}, {}
    for e in prof.key_averages():
        if e.device_type != torch.autograd.DeviceType.CPU:
            kernels[e.key] = {"calls": e.count, "self_us": round(e.self_device_time_total, 1)}
        elif is_runtime_call(e.key):
            runtime[e.key] = {"calls": e.count, "self_us": round(e.self_cpu_time_total, 1)}
        elif e.self_cpu_time_total > 0:
            ops[e.key] = {"calls": e.count, "self_us": round(e.self_cpu_time_total, 1)}
    return {"phases_ms": {k: round(statistics.median(v), 3) for k, v in phases.items()}, "ops": ops,
            "kernels": kernels, "runtime": runtime, "threads": host_time_by_thread(prof.events())}


def is_runtime_call(name: str) -> bool:
    """A CUDA runtime (cudaLaunchKernel) or driver (cuLaunchKernel) API call, as the profiler names them."""
    return name.startswith("cuda") or (name.startswith("cu") and name[2:3].isupper())


def host_time_by_thread(events: list) -> list[dict]:
    """Self CPU time and event count per profiled thread, the caller's thread first (it ran the first event):
    on flagos and cuda alike the backward phase runs on autograd's thread of the device."""
    first = min(events, key=lambda e: e.time_range.start).thread if events else None
    threads: dict[int, dict] = {}
    for e in events:
        if e.device_type == torch.autograd.DeviceType.CPU:
            t = threads.setdefault(e.thread, {"thread": "caller" if e.thread == first else "other", "events": 0,
                                              "self_us": 0.0})
            t["events"] += 1
            t["self_us"] += e.self_cpu_time_total
    return sorted(({**t, "self_us": round(t["self_us"], 1)} for t in threads.values()),
                  key=lambda t: (t["thread"] != "caller", -t["self_us"]))


def fastest(rounds: list[dict]) -> dict:
    """Per phase, per host event and per kernel, the round in which it took least time."""
    zero = {"calls": 0, "self_us": 0.0}
    best = {"phases_ms": {k: min(r["phases_ms"][k] for r in rounds) for k in rounds[0]["phases_ms"]},
            "threads": min((r["threads"] for r in rounds), key=lambda ts: sum(t["self_us"] for t in ts))}
    for table in ("ops", "kernels", "runtime"):
        names = {n for r in rounds for n in r[table]}
        best[table] = {n: min((r[table].get(n, zero) for r in rounds), key=lambda o: o["self_us"]) for n in names}
    return best


def by_extra_time(native: dict[str, dict], flagos: dict[str, dict], top: int) -> list[dict]:
    zero = {"calls": 0, "self_us": 0.0}
    rows = ({"name": n, "native": native.get(n, zero), "flagos": flagos.get(n, zero),
             "extra_us": round(flagos.get(n, zero)["self_us"] - native.get(n, zero)["self_us"], 1)}
            for n in set(native) | set(flagos))
    return sorted(rows, key=lambda r: -r["extra_us"])[:top]


def runtime_call_table(native: dict[str, dict], flagos: dict[str, dict]) -> list[dict]:
    """Per CUDA runtime/driver API name, the calls in one training step on each side, most extra calls first."""
    zero = {"calls": 0, "self_us": 0.0}
    rows = [{"name": n, "native_calls": native.get(n, zero)["calls"], "flagos_calls": flagos.get(n, zero)["calls"],
             "native_us": native.get(n, zero)["self_us"], "flagos_us": flagos.get(n, zero)["self_us"]}
            for n in set(native) | set(flagos)]
    return sorted(rows, key=lambda r: (-(r["flagos_calls"] - r["native_calls"]), r["name"]))


def totals(table: dict[str, dict]) -> dict[str, float]:
    return {"calls": sum(o["calls"] for o in table.values()),
            "self_us": round(sum(o["self_us"] for o in table.values()), 1)}


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--compiled", action="store_true", help="the model under torch.compile (inductor) on both sides")
    p.add_argument("--batch", type=int, default=gpu_transformer.BATCH,
                   help="sequences per step (1 with --seq 16 makes the step host-bound: its phases are host time)")
    p.add_argument("--seq", type=int, default=gpu_transformer.SEQ)
    args = p.parse_args()
    gpu_transformer.BATCH, gpu_transformer.SEQ = args.batch, args.seq
    make = CompiledTrainer if args.compiled else Trainer
    if args.native_child:
        trainer = make("cuda")
        serve_trainer(trainer, {"profile": lambda: profile(trainer, args.steps)})
        return 0
    require_flagos()
    share_cores()
    child_args = ["--steps", str(args.steps), "--batch", str(args.batch), "--seq", str(args.seq)]
    child_args += ["--compiled"] if args.compiled else []
    native = NativeTrainer(reference_python(args.reference_python), __file__, *child_args)
    flagos = make("flagos")
    native_rounds, flagos_rounds = alternate_profiles(native, flagos, args.rounds, lambda: profile(flagos, args.steps))
    native_best, flagos_best = fastest(native_rounds), fastest(flagos_rounds)
    return emit({
        "benchmark": "gpu_step_profile",
        "step": "compiled" if args.compiled else "eager",
        "batch": args.batch, "seq": args.seq,
        "phases_ms": {"native": native_best["phases_ms"], "flagos": flagos_best["phases_ms"]},
        "host": {"native": totals(native_best["ops"]), "flagos": totals(flagos_best["ops"])},
        "device": {"native": totals(native_best["kernels"]), "flagos": totals(flagos_best["kernels"])},
        "runtime_calls": runtime_call_table(native_best["runtime"], flagos_best["runtime"]),
        "host_threads": {"native": native_best["threads"], "flagos": flagos_best["threads"]},
        "by_extra_self_time": by_extra_time(native_best["ops"], flagos_best["ops"], args.top),
        "kernels_by_extra_device_time": by_extra_time(native_best["kernels"], flagos_best["kernels"], args.top),
    }, args.out)


if __name__ == "__main__":
    sys.exit(main())
