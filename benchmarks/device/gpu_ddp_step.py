"""DDP training step on one GPU, a world of one: flagos (flccl over NCCL) against native CUDA DDP (NCCL).

Each side wraps the same MLP (``--width`` wide, ``--depth`` hidden layers, batch ``--batch``) in PyTorch's
DistributedDataParallel over a process group of one rank (a HashStore, so nothing listens on a port) and trains
with SGD: forward, backward with DDP's bucketed all-reduce, step.  The native side runs in the reference
interpreter (``_gpu_common.py`` says why), the flagos side in a child of this interpreter (``--flagos-in-process``:
in the benchmark's own process); the two take turns step by step, which goes first alternating.
Reported: median step times and the median of the per-pair throughput ratios native/flagos (goal >= 0.97).

    python benchmarks/device/gpu_ddp_step.py [--out gpu_ddp_step.json] [--steps 50] [--width 2048] [--reference-python PY]
        [--flagos-in-process]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.distributed as dist
from _gpu_common import (FlagosChild, NativeChild, device_api, emit, flagos_layout, flagos_process, parser,
                         reference_python, require_flagos, serve, share_cores, take_turns)
from torch.nn.parallel import DistributedDataParallel as DDP


class DDPTrainer:
    """A DDP-wrapped MLP, its SGD and a fixed batch on `device`, in a world of one."""

    def __init__(self, device: str, backend: str | None, width: int, depth: int, batch: int) -> None:
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
        torch.manual_seed(0)
        layers: list[torch.nn.Module] = [torch.nn.Linear(width, width), torch.nn.ReLU()]
        for _ in range(depth - 1):
            layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 16)).to(device)
        self.device, self.api = device, device_api(device)
        self.ddp = DDP(model, device_ids=[0])
        self.optimizer = torch.optim.SGD(self.ddp.parameters(), lr=1e-3)
        self.x = torch.randn(batch, width, device=device)
        self.loss = float("nan")

    def step(self) -> dict[str, float]:
        self.api.synchronize()
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.ddp(self.x).square().mean()
        loss.backward()
        self.optimizer.step()
        self.api.synchronize()
        self.loss = loss.item()
        return {"ms": (time.perf_counter() - start) * 1000}

    def stats(self) -> dict[str, float]:
        return {"last_loss": round(self.loss, 6), "buckets": self.ddp._get_ddp_logging_data().get("num_buckets", 0)}


def engine_name() -> dict[str, str]:
    """The flagos process group's engine (torch_fl.distributed)."""
    from torch_fl.distributed import engine_of

    return {"engine": type(engine_of()).__name__}


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=256)
    flagos_layout(p)
    args = p.parse_args()
    shape = (args.width, args.depth, args.batch)
    if args.native_child:
        trainer = DDPTrainer("cuda", "nccl", *shape)
        serve({"step": trainer.step, "stats": trainer.stats})
        return 0
    require_flagos()
    if args.flagos_child:
        trainer = DDPTrainer("flagos", None, *shape)
        serve({"step": trainer.step, "stats": trainer.stats, "engine": engine_name}, native=False)
        return 0
    cores = share_cores()
    shape_args = ("--width", str(args.width), "--depth", str(args.depth), "--batch", str(args.batch))
    native = NativeChild(reference_python(args.reference_python), __file__, *shape_args)
    flagos_child = None if args.flagos_in_process else FlagosChild(__file__, *shape_args)
    try:
        if flagos_child is None:
            trainer = DDPTrainer("flagos", None, *shape)
            flagos = {"step": trainer.step, "stats": trainer.stats, "engine": engine_name}
        else:
            flagos = {name: lambda name=name: flagos_child.ask(name) for name in ("step", "stats", "engine")}
        sides = {"native": lambda: native.ask("step")["ms"], "flagos": lambda: flagos["step"]()["ms"]}
        take_turns(sides, args.warmup)
        times = take_turns(sides, args.steps)
        native_stats, native_env = native.ask("stats"), native.ask("environment")
        flagos_stats, engine = flagos["stats"](), flagos["engine"]()["engine"]
    finally:
        native.close()
        if flagos_child is not None:
            flagos_child.close()
    medians = {side: round(statistics.median(t), 3) for side, t in times.items()}
    return emit({
        "benchmark": "gpu_ddp_step",
        "config": {"width": args.width, "depth": args.depth, "batch": args.batch, "world_size": 1,
                   "steps": args.steps, "warmup": args.warmup, "cores": cores, "flagos_process": flagos_process(args)},
        "step_ms": medians,
        "engine": engine,
        "native": native_stats, "flagos": flagos_stats,
        "median_pair_ratio": round(statistics.median(n / f for n, f in zip(times["native"], times["flagos"])), 4),
        "goals": {"min_throughput_ratio": 0.97},
    }, args.out, native_env)


if __name__ == "__main__":
    sys.exit(main())
