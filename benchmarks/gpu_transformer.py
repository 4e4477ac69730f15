"""Training step of a 12-layer nn.TransformerEncoder on the GPU: flagos against native cuda.

d_model 1024, 16 heads, feed-forward 4096, batch 8 x 512 tokens, bf16 autocast,
AdamW.  Median step time over 10 steps after 3 warm-up steps, tokens/s, and the
peak memory of each run.  The two configurations alternate for `--rounds`
rounds (the GPU machine's speed drifts by ±15 % between runs); the report gives
every round and the ratio of the medians.  Goals: flagos >= 0.90 of native tokens/s,
peak memory <= 1.05 of native.

The native run happens in a child interpreter that never registers flagos: with
a PrivateUse1 backend registered, at::getAccelerator() is PrivateUse1 and
PyTorch's autograd engine rejects any backward over CUDA tensors
(`opt_ready_stream && opt_parent_stream`, pytorch/pytorch#161129).

    python benchmarks/gpu_transformer.py [--out gpu_transformer.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from _gpu_common import emit, parser, require_flagos

BATCH, SEQ, D_MODEL, HEADS, FF, LAYERS = 8, 512, 1024, 16, 4096, 12


def memory_api(device: str):  # noqa: ANN201 - a device module
    """synchronize / empty_cache / peak statistics of `device`: torch.flagos for flagos; for
    native cuda torch.cuda, or torch.accelerator on stock torch+cpu (no torch.cuda API there)."""
    if device == "flagos":
        return torch.flagos
    return torch.cuda if torch.version.cuda else torch.accelerator


def run(device: str, steps: int = 10, warmup: int = 3) -> dict[str, float]:
    api = memory_api(device)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.1, batch_first=True, norm_first=True)
    model = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(BATCH, SEQ, D_MODEL, device=device)
    api.synchronize()
    api.empty_cache()
    api.reset_peak_memory_stats()
    times = []
    for step in range(warmup + steps):
        api.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        optimizer.step()
        api.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    peak = api.max_memory_allocated()
    del model, optimizer, x, layer
    gc.collect()
    api.empty_cache()
    return {"step_ms": round(step_s * 1000, 2), "tokens_per_s": round(BATCH * SEQ / step_s, 1),
            "peak_memory_mib": round(peak / 2**20, 1), "last_loss": round(loss.item(), 5)}


def native_in_child() -> dict[str, float]:
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "FLAGOS_NO_STARTUP_HOOK": "1"}
    child = subprocess.run([sys.executable, __file__, "--native-only"], env=env, capture_output=True, text=True,
                           check=True)
    return json.loads(child.stdout)


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--native-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    if args.native_only:
        print(json.dumps(run("cuda")))
        return 0
    require_flagos()
    native_runs, flagos_runs = [], []
    for round_ in range(args.rounds):
        # Alternate which configuration goes first.
        if round_ % 2 == 0:
            native_runs.append(native_in_child())
            flagos_runs.append(run("flagos"))
        else:
            flagos_runs.append(run("flagos"))
            native_runs.append(native_in_child())
    native, flagos = median_of(native_runs), median_of(flagos_runs)
    return emit({
        "benchmark": "gpu_transformer",
        "config": {"layers": LAYERS, "d_model": D_MODEL, "heads": HEADS, "ff": FF, "batch": BATCH, "seq": SEQ,
                   "autocast": "bfloat16", "optimizer": "AdamW"},
        "native": native, "flagos": flagos, "rounds": {"native": native_runs, "flagos": flagos_runs},
        "throughput_ratio": round(flagos["tokens_per_s"] / native["tokens_per_s"], 4),
        "peak_memory_ratio": round(flagos["peak_memory_mib"] / native["peak_memory_mib"], 4),
        "goals": {"min_throughput_ratio": 0.90, "max_peak_memory_ratio": 1.05},
    }, args.out)


if __name__ == "__main__":
    sys.exit(main())
