"""First use on the GPU: a fresh process's first training step and first `generate`, flagos against native cuda.

Every measurement is a process of its own.  Once the device is initialised (a first
allocation and a small kernel, synchronised), one workload is timed from its first call
to the device's last result:

* `step`: gpu_transformer.py's model (its Trainer: 12 layers, bf16 autocast, AdamW) takes its
  first training step;
* `generate`: a tiny Hugging Face Llama, built from a config in code (no download), runs its
  first greedy `generate` of 8 new tokens.

flagos runs in this interpreter, native cuda in the reference interpreter (`--reference-python`;
_gpu_common.py says why), both pinned to the same two cores.  Processes started back to back
share one-time caches (PyTorch's NVRTC kernel cache on disk, the page cache of the CUDA
libraries, the driver's), so each round starts the other side first; a first round of each
side warms what every later process finds warm and is not counted.  Reported per workload:
each side's times and median, the ratio of the medians, and the median per-round ratio for
each order.  Goal: flagos <= 1.1x native for both workloads.

    python benchmarks/device/gpu_first_use.py [--out gpu_first_use.json] [--rounds 4] [--reference-python PY]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from _gpu_common import child_env, device_api, emit, parser, reference_python, require_flagos, share_cores

WORKLOADS = ("step", "generate")
SIDES = ("flagos", "native")
GOAL_MAX_RATIO = 1.1
NEW_TOKENS = 8


def device_of(side: str) -> str:
    return "flagos" if side == "flagos" else "cuda"


def order_of(round_index: int) -> tuple[str, str]:
    """Which side starts round `round_index`: flagos in even rounds, native in odd ones."""
    return SIDES if round_index % 2 == 0 else SIDES[::-1]


def synchronizer(device: str) -> Callable[[], None]:
    return device_api(device).synchronize


def initialise(device: str) -> None:
    """What every process does before the timed part: a first allocation and a small kernel."""
    (torch.ones(2, device=device) + 1).cpu()
    synchronizer(device)()


def tiny_llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def first_generate(device: str) -> float:
    """Seconds of the first greedy `generate` of a tiny Llama moved to `device`."""
    model = tiny_llama().to(device)
    ids = torch.arange(1, 9).reshape(1, 8).to(device)
    sync = synchronizer(device)
    sync()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                             min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    sync()
    seconds = time.perf_counter() - start
    assert out.shape == (1, 8 + NEW_TOKENS), out.shape
    return seconds


def first_step(device: str) -> float:
    """Seconds of the first training step of gpu_transformer.py's model on `device`."""
    from gpu_transformer import Trainer

    return Trainer(device).step() / 1000


def measure(side: str, workload: str) -> dict[str, Any]:
    """Child side: one workload's first run in this fresh process."""
    device = device_of(side)
    if side == "flagos":
        require_flagos()
    if workload == "generate":
        try:
            import transformers  # noqa: F401
        except ImportError:
            return {"skipped": "transformers is not installed in this interpreter"}
    initialise(device)
    return {"seconds": first_generate(device) if workload == "generate" else first_step(device)}


def run_fresh(side: str, workload: str, reference: str) -> dict[str, Any]:
    """`measure` in a fresh process of `side`'s interpreter; its JSON line."""
    python, env = (sys.executable, dict(os.environ)) if side == "flagos" else (reference, child_env())
    done = subprocess.run([python, os.path.abspath(__file__), "--measure", side, workload], env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = " | ".join(done.stderr.strip().splitlines()[-4:])
        raise RuntimeError(f"the {side} process for {workload} failed (exit {done.returncode}): {tail}")
    return json.loads(lines[-1])


def reference_environment(python: str) -> dict[str, Any]:
    """The reference interpreter's torch, CUDA and Python versions, as the native child reports them."""
    code = ("import json, sys, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda,"
            " 'python': sys.version.split()[0]}))")
    done = subprocess.run([python, "-c", code], env=child_env(), capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per workload, from the counted runs ({"round", "workload", "side", "seconds" or "skipped"}): each side's
    times and median, the ratio of the medians, and per starting side the median of the per-round ratios."""
    report: dict[str, Any] = {}
    for workload in WORKLOADS:
        mine = [r for r in runs if r["workload"] == workload]
        skipped = sorted({r["skipped"] for r in mine if "skipped" in r})
        if skipped or not mine:
            report[workload] = {"skipped": "; ".join(skipped) or "not run"}
            continue
        seconds = {side: [r["seconds"] for r in mine if r["side"] == side] for side in SIDES}
        medians = {side: statistics.median(s) for side, s in seconds.items()}
        per_round: dict[str, list[float]] = {f"{side}_first": [] for side in SIDES}
        for index in sorted({r["round"] for r in mine}):
            pair = {r["side"]: r["seconds"] for r in mine if r["round"] == index}
            per_round[f"{order_of(index)[0]}_first"].append(pair["flagos"] / pair["native"])
        ratio = medians["flagos"] / medians["native"]
        report[workload] = {
            **{side: {"seconds": [round(s, 4) for s in seconds[side]], "median_s": round(medians[side], 4)}
               for side in SIDES},
            "ratio": round(ratio, 4),
            "median_round_ratio_by_order": {k: round(statistics.median(v), 4) for k, v in per_round.items() if v},
            "goal_max_ratio": GOAL_MAX_RATIO,
            "met": ratio <= GOAL_MAX_RATIO,
        }
    return report


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4, help="counted rounds (each side once per workload)")
    p.add_argument("--measure", nargs=2, metavar=("SIDE", "WORKLOAD"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)), flush=True)
        return 0
    require_flagos()
    reference = reference_python(args.reference_python)
    cores = share_cores()  # the children inherit the affinity
    runs: list[dict[str, Any]] = []
    try:
        for index in range(-1, args.rounds):  # round -1 warms the caches and is not counted
            for workload in WORKLOADS:
                for side in order_of(index):
                    result = run_fresh(side, workload, reference)
                    if index >= 0:
                        runs.append({"round": index, "workload": workload, "side": side, **result})
    except RuntimeError as e:
        print(f"gpu_first_use: {e}", file=sys.stderr)
        return 1
    return emit({
        "benchmark": "gpu_first_use",
        "config": {"rounds": args.rounds, "cores": cores, "new_tokens": NEW_TOKENS,
                   "orders": "flagos first in even rounds, native first in odd ones; one uncounted warm-up round"},
        "workloads": summarise(runs),
        "goal_max_ratio": GOAL_MAX_RATIO,
    }, args.out, reference_environment(reference))


if __name__ == "__main__":
    sys.exit(main())
