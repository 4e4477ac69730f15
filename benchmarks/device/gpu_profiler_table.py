"""torch.profiler's table for one training step on flagos, side by side with native CUDA's.

The step is gpu_transformer.py's (its Trainer).  flagos is profiled as a user of a PrivateUse1 device
profiles it, `activities=[CPU, PrivateUse1]`; native CUDA, in the reference interpreter
(`--reference-python`), as a CUDA user does, `activities=[CPU, CUDA]`.  After 3 warm-up steps each, the
two take turns profiling one step (`--rounds` times).  Per side: the operator events (`aten::` names) and
their calls, the device kernels with their launches and device time, and `key_averages().table()`'s text
(its device columns are "FLAGOS" on flagos, "CUDA" on native).  The report gives the ratios flagos /
native of the operator calls and of the total device time (the median over the rounds), and the kernels
only one side launched.

    python benchmarks/device/gpu_profiler_table.py [--out gpu_profiler_table.json] [--rounds 3]
"""

from __future__ import annotations

import statistics
import sys

import torch
from _gpu_common import emit, parser, reference_python, require_flagos, share_cores
from gpu_transformer import NativeTrainer, Trainer, alternate_profiles, serve_trainer


def profile_step(trainer: Trainer) -> dict:
    """One profiled step: operator calls, kernels, device time and the profiler's own table."""
    device = torch.profiler.ProfilerActivity.PrivateUse1 if trainer.device == "flagos" \
        else torch.profiler.ProfilerActivity.CUDA
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, device]) as prof:
        trainer.step()
    averages = prof.key_averages()
    ops = {e.key: e.count for e in averages
           if e.device_type == torch.autograd.DeviceType.CPU and e.key.startswith("aten::")}
    # The CUDA activity adds a device event of its own, "Activity Buffer Request" (CUPTI's buffer), no kernel.
    kernels = {e.key: {"launches": e.count, "device_us": round(e.self_device_time_total, 1)} for e in averages
               if e.device_type != torch.autograd.DeviceType.CPU and e.key != "Activity Buffer Request"}
    return {"ops": ops, "kernels": kernels,
            "op_calls": sum(ops.values()),
            "device_us": round(sum(k["device_us"] for k in kernels.values()), 1),
            "device_type": sorted({str(e.device_type) for e in averages
                                   if e.device_type != torch.autograd.DeviceType.CPU}),
            "table": averages.table(sort_by="self_device_time_total", row_limit=15)}


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if args.native_child:
        trainer = Trainer("cuda")
        serve_trainer(trainer, {"profile": lambda: profile_step(trainer)})
        return 0
    require_flagos()
    share_cores()
    native = NativeTrainer(reference_python(args.reference_python), __file__)
    flagos = Trainer("flagos")
    native_rounds, flagos_rounds = alternate_profiles(native, flagos, args.rounds, lambda: profile_step(flagos))

    def median(rounds: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    n_last, f_last = native_rounds[-1], flagos_rounds[-1]
    return emit({
        "benchmark": "gpu_profiler_table",
        "rounds": args.rounds,
        "op_calls": {"native": median(native_rounds, "op_calls"), "flagos": median(flagos_rounds, "op_calls")},
        "op_calls_ratio": round(median(flagos_rounds, "op_calls") / median(native_rounds, "op_calls"), 4),
        "device_us": {"native": median(native_rounds, "device_us"), "flagos": median(flagos_rounds, "device_us")},
        "device_time_ratio": round(median(flagos_rounds, "device_us") / median(native_rounds, "device_us"), 4),
        "kernel_names": {"native": len(n_last["kernels"]), "flagos": len(f_last["kernels"]),
                         "only_native": sorted(set(n_last["kernels"]) - set(f_last["kernels"])),
                         "only_flagos": sorted(set(f_last["kernels"]) - set(n_last["kernels"]))},
        "ops_with_other_calls": {op: {"native": n_last["ops"].get(op, 0), "flagos": f_last["ops"].get(op, 0)}
                                 for op in sorted(set(n_last["ops"]) | set(f_last["ops"]))
                                 if n_last["ops"].get(op, 0) != f_last["ops"].get(op, 0)},
        "device_types": {"native": n_last["device_type"], "flagos": f_last["device_type"]},
        "tables": {"native": n_last["table"], "flagos": f_last["table"]},
    }, args.out)


if __name__ == "__main__":
    sys.exit(main())
