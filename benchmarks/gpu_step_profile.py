"""Where a flagos training step spends its host time, against native cuda: per phase and per operator.

The model and step are gpu_transformer.py's.  For each device: the median time of
the forward (with the loss), backward and optimizer phases over `--steps` steps
(the device is synchronised between phases), then one profiled step
(torch.profiler, CPU activity): per operator, the number of calls and the self
CPU time.  The report lists the operators by their extra self time on flagos.
This is a diagnostic, not a goal: gpu_transformer.py measures the goal.

    python benchmarks/gpu_step_profile.py [--out gpu_step_profile.json] [--top 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from _gpu_common import emit, parser, require_flagos
from gpu_transformer import BATCH, D_MODEL, FF, HEADS, LAYERS, SEQ, memory_api


def profile(device: str, steps: int) -> dict:
    api = memory_api(device)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.1, batch_first=True, norm_first=True)
    model = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(BATCH, SEQ, D_MODEL, device=device)

    def step(marks: list[float] | None = None) -> None:
        def mark() -> None:
            if marks is not None:
                api.synchronize()
                marks.append(time.perf_counter())

        mark()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        mark()
        loss.backward()
        mark()
        optimizer.step()
        mark()

    for _ in range(3):
        step()
    phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
    for _ in range(steps):
        marks: list[float] = []
        step(marks)
        for name, (a, b) in zip(phases, zip(marks, marks[1:])):
            phases[name].append((b - a) * 1000)
    api.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
        api.synchronize()
    ops = {e.key: {"calls": e.count, "self_us": round(e.self_cpu_time_total, 1)}
           for e in prof.key_averages() if e.key.startswith("aten::")}
    return {"phases_ms": {k: round(statistics.median(v), 3) for k, v in phases.items()}, "ops": ops}


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--native-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args()
    if args.native_only:
        print(json.dumps(profile("cuda", args.steps)))
        return 0
    require_flagos()
    # Native in a flagos-free child: see gpu_transformer.py (pytorch/pytorch#161129).
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "FLAGOS_NO_STARTUP_HOOK": "1"}
    native = json.loads(subprocess.run([sys.executable, __file__, "--native-only", "--steps", str(args.steps)],
                                       env=env, capture_output=True, text=True, check=True).stdout)
    flagos = profile("flagos", args.steps)
    names = set(native["ops"]) | set(flagos["ops"])
    zero = {"calls": 0, "self_us": 0.0}
    rows = sorted(({"op": n, "native": native["ops"].get(n, zero), "flagos": flagos["ops"].get(n, zero),
                    "extra_us": round(flagos["ops"].get(n, zero)["self_us"] - native["ops"].get(n, zero)["self_us"], 1)}
                   for n in names), key=lambda r: -r["extra_us"])
    return emit({
        "benchmark": "gpu_step_profile",
        "phases_ms": {"native": native["phases_ms"], "flagos": flagos["phases_ms"]},
        "calls": {"native": sum(o["calls"] for o in native["ops"].values()),
                  "flagos": sum(o["calls"] for o in flagos["ops"].values())},
        "self_us": {"native": round(sum(o["self_us"] for o in native["ops"].values()), 1),
                    "flagos": round(sum(o["self_us"] for o in flagos["ops"].values()), 1)},
        "by_extra_self_time": rows[:args.top],
    }, args.out)


if __name__ == "__main__":
    sys.exit(main())
