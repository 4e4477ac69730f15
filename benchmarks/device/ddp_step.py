"""DDP training step time on flagos (host platform, flccl over gloo) against DDP on CPU tensors (gloo).

A world of ``--world`` processes on 127.0.0.1 (one thread each) trains the same small MLP twice, once on flagos
and once on CPU tensors, both wrapped in PyTorch's DistributedDataParallel in the same process group.  The steps
alternate between the two (which goes first alternates too), so that both see the same machine state; each step (forward, backward with the
bucketed all-reduce, SGD) is timed on every rank and the slowest rank's time counts.  The report gives the medians
and the median of the per-pair ratios flagos/cpu (goal: <= 1.2).

    python benchmarks/device/ddp_step.py [--world 2] [--steps 60] [--warmup 10] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from _report import emit_json

WIDTH, DEPTH, BATCH = 256, 4, 32


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [torch.nn.Linear(64, WIDTH), torch.nn.ReLU()]
    for _ in range(DEPTH - 1):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 10))


def _rank(rank: int, world: int, port: int, steps: int, warmup: int, out: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.flagos.set_device(rank)
    dist.init_process_group(rank=rank, world_size=world)
    try:
        runs = {}
        for device in ("flagos", "cpu"):
            ddp = DDP(_model().to(device), device_ids=[rank] if device == "flagos" else None)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
            g = torch.Generator().manual_seed(rank)
            x, y = torch.randn(BATCH, 64, generator=g).to(device), torch.randint(0, 10, (BATCH,), generator=g).to(device)
            runs[device] = (ddp, opt, x, y)
        times: dict[str, list[float]] = {"flagos": [], "cpu": []}
        for step in range(warmup + steps):
            # Alternate which device goes first, so neither always runs on a machine the other just warmed.
            for device in ("flagos", "cpu") if step % 2 == 0 else ("cpu", "flagos"):
                ddp, opt, x, y = runs[device]
                dist.barrier(device_ids=[rank])
                start = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
                opt.step()
                if device == "flagos":
                    torch.flagos.synchronize()
                elapsed = torch.tensor([time.perf_counter() - start])
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's step is the world's
                if step >= warmup:
                    times[device].append(elapsed.item())
        if rank == 0:
            Path(out).write_text(json.dumps(times))
    finally:
        dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["FLAGOS_HOST_DEVICES"] = str(max(args.world, 2))
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "times.json"
        mp.spawn(_rank, args=(args.world, port, args.steps, args.warmup, str(raw)), nprocs=args.world)
        times = json.loads(raw.read_text())

    ratios = [f / c for f, c in zip(times["flagos"], times["cpu"], strict=True)]
    flagos_ms, cpu_ms = statistics.median(times["flagos"]) * 1e3, statistics.median(times["cpu"]) * 1e3
    report = {
        "benchmark": "ddp_step",
        "command": "python benchmarks/device/ddp_step.py " + " ".join(sys.argv[1:]),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "world": args.world,
        "model": f"MLP 64-{WIDTH}x{DEPTH}-10, batch {BATCH} per rank, SGD, one thread per rank",
        "steps": args.steps,
        "flagos_step_ms_median": round(flagos_ms, 3),
        "cpu_step_ms_median": round(cpu_ms, 3),
        "ratio_of_medians": round(flagos_ms / cpu_ms, 3),
        "ratio_median_per_step_pair": round(statistics.median(ratios), 3),
        "goal": "ratio <= 1.2",
        "step_ms": {d: [round(t * 1e3, 3) for t in ts] for d, ts in times.items()},
    }
    emit_json(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
