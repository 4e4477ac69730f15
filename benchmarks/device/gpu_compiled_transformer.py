"""torch.compile(model) on gpu_transformer.py's training step: flagos against native cuda and flagos eager.

The model, batch, bf16 autocast and AdamW are gpu_transformer.py's; the model is
wrapped in `torch.compile` (inductor, default mode: no CUDA graphs on either side,
since flagos runs without them), the optimizer step stays eager.  Three trainers
take turns step by step after the warm-up, the order reversed every other step (all processes pinned to the same two
cores): native compiled (the reference interpreter, `--reference-python`; see
_gpu_common.py), flagos compiled (a child of this interpreter, or this process with
`--flagos-in-process`) and flagos eager (a child of this interpreter, so that each
side's peak memory is its own model's).  Reported: the
median step time and tokens/s of each, the throughput ratio of flagos compiled to
native compiled (goal >= 0.97) and to flagos eager (the speed-up of compiling),
the median of the per-step ratios, each run's peak memory, and the compile time
of both compiled sides: the first step's wall time less the median step, with
inductor's compile workers on the two pinned cores.  Inductor's and Triton's
caches start empty in a temporary folder (both sides), so the compile times are
cold ones; `--warm` keeps the users' caches.

    python benchmarks/device/gpu_compiled_transformer.py [--out gpu_compiled_transformer.json] [--steps 30]
        [--reference-python PY] [--warm] [--flagos-in-process]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import torch
from _gpu_common import (emit, flagos_layout, flagos_process, parser, reference_python, require_flagos, share_cores,
                         take_turns)
from gpu_transformer import (BATCH, D_MODEL, FF, HEADS, LAYERS, SEQ, ChildTrainer, FlagosTrainer, NativeTrainer,
                             Trainer, serve_trainer, summary)

GOAL_VS_NATIVE = 0.97


class CompiledTrainer(Trainer):
    """gpu_transformer's Trainer with its model compiled by inductor."""

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.model = torch.compile(self.model)  # type: ignore[assignment]


def ratio(a: float, b: float) -> float:
    return round(a / b, 4)


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3, help="steps of each trainer before timing; the first compiles")
    p.add_argument("--warm", action="store_true", help="keep inductor's and Triton's caches (warm compile times)")
    p.add_argument("--flagos-eager-child", action="store_true", help=argparse.SUPPRESS)
    flagos_layout(p)
    args = p.parse_args()
    if args.native_child:
        serve_trainer(CompiledTrainer("cuda"))
        return 0
    if args.flagos_eager_child:
        serve_trainer(Trainer("flagos"), native=False)
        return 0
    require_flagos()
    if torch.version.cuda is None:
        print(f"inductor's Triton backend on flagos needs a CUDA build of torch in this process (this torch is"
              f" {torch.__version__}): run this with the torch_fl built against the CUDA torch", file=sys.stderr)
        return 2
    if args.flagos_child:
        serve_trainer(CompiledTrainer("flagos"), native=False)
        return 0
    cores = share_cores()
    caches = None if args.warm else tempfile.TemporaryDirectory(prefix="flagos-compile-bench-",
                                                                ignore_cleanup_errors=True)
    if caches is not None:  # before inductor or Triton read them, and inherited by the native child
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(caches.name, "inductor")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(caches.name, "triton")
    native = NativeTrainer(reference_python(args.reference_python), __file__)
    compiled = CompiledTrainer("flagos") if args.flagos_in_process else FlagosTrainer(__file__)
    eager = ChildTrainer([sys.executable, __file__, "--flagos-eager-child"], dict(os.environ))
    try:
        first = {"native": native.step(), "flagos": compiled.step()}
        eager.step()
        sides = {"native_compiled": native.step, "flagos_compiled": compiled.step, "flagos_eager": eager.step}
        take_turns(sides, args.warmup - 1)
        for trainer in (native, compiled, eager):
            trainer.reset_peak()
        times = take_turns(sides, args.steps)
        results = {"native_compiled": summary(times["native_compiled"], native.stats()),
                   "flagos_compiled": summary(times["flagos_compiled"], compiled.stats()),
                   "flagos_eager": summary(times["flagos_eager"], eager.stats())}
        native_env = native.ask("environment")
    finally:
        native.close()
        eager.close()
        if isinstance(compiled, ChildTrainer):
            compiled.close()
        if caches is not None:
            caches.cleanup()
    compile_s = {side: round((first[side] - statistics.median(times[f"{side}_compiled"])) / 1000, 2)
                 for side in first}
    vs_native = ratio(results["flagos_compiled"]["tokens_per_s"], results["native_compiled"]["tokens_per_s"])
    return emit({
        "benchmark": "gpu_compiled_transformer",
        "config": {"layers": LAYERS, "d_model": D_MODEL, "heads": HEADS, "ff": FF, "batch": BATCH, "seq": SEQ,
                   "autocast": "bfloat16", "optimizer": "AdamW (eager)", "compile": "torch.compile(model), inductor, "
                   "default mode", "caches": "warm" if args.warm else "cold", "steps": args.steps,
                   "warmup": args.warmup, "cores": cores, "flagos_process": flagos_process(args)},
        **results,
        "steps_ms": {side: [round(t, 2) for t in ts] for side, ts in times.items()},
        "compile_s": compile_s,
        "first_step_ms": {side: round(ms, 1) for side, ms in first.items()},
        "throughput_ratio_vs_native_compiled": vs_native,
        "median_pair_ratio_vs_native_compiled": round(statistics.median(
            n / f for n, f in zip(times["native_compiled"], times["flagos_compiled"], strict=True)), 4),
        "speedup_vs_flagos_eager": ratio(results["flagos_compiled"]["tokens_per_s"],
                                         results["flagos_eager"]["tokens_per_s"]),
        "peak_memory_ratio_vs_native_compiled": ratio(results["flagos_compiled"]["peak_memory_mib"],
                                                      results["native_compiled"]["peak_memory_mib"]),
        "goals": {"min_throughput_ratio_vs_native_compiled": GOAL_VS_NATIVE},
    }, args.out, native_env)


if __name__ == "__main__":
    sys.exit(main())
