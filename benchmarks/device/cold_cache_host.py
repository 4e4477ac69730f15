"""Per-op latency of a chain of small ops on flagos against the CPU, with the processor's caches cooled between chains.

An isolated loop of one op keeps every object it touches in the cache, so it measures the device layer's
instructions only.  In a training step other work runs between two uses of the same objects: what the layer
touches besides the tensors themselves (kernel views, their storages, the table they are kept in) has left
the cache by then.  Here a chain of four ops (add, neg, mul, relu: fresh results, two long-lived inputs)
runs after `--evict-mib` MiB of other memory has been written (0: warm caches), on the CPU and on flagos in
turns, and the median time per op of each is reported with their difference.

    python benchmarks/device/cold_cache_host.py [--evict-mib 4] [--number 3000] [--repeats 3] [--out result.json]

(`--number`: chains per round; `--repeats`: rounds of each device, the median round kept.)
"""

from __future__ import annotations

import platform
import statistics
import sys
import time

import torch
from _report import emit_json
from dispatch_overhead import timing_args

OPS_PER_CHAIN = 4


def chain_us(device: str, evict: torch.Tensor | None, chains: int) -> float:
    """Median microseconds per op of `chains` chains on `device`, each after writing `evict`."""
    a = torch.randn(256, device=device)
    b = torch.randn(256, device=device)
    times = []
    for _ in range(chains):
        if evict is not None:
            evict.add_(1)
        start = time.perf_counter_ns()
        torch.relu(torch.neg(a + b) * b)
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / OPS_PER_CHAIN / 1000


def main() -> int:
    args = timing_args(__doc__.splitlines()[0], number=3000, repeats=3, extra=lambda p: p.add_argument(
        "--evict-mib", type=int, default=4, help="MiB written between chains (0: warm caches)"))
    if args.evict_mib < 0 or args.number < 1 or args.repeats < 1:
        print("cold_cache_host.py: --evict-mib must be >= 0 and --number, --repeats >= 1", file=sys.stderr)
        return 2
    # CPU memory: written by one thread, as the step's other host work would be.
    evict = torch.zeros(args.evict_mib << 18) if args.evict_mib else None  # float32: 2**18 per MiB
    rounds: dict[str, list[float]] = {"cpu": [], "flagos": []}
    for _ in range(args.repeats):
        for device in rounds:
            rounds[device].append(chain_us(device, evict, args.number))
    cpu, flagos = statistics.median(rounds["cpu"]), statistics.median(rounds["flagos"])
    emit_json({
        "version": 1,
        "benchmark": "cold_cache_host",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "evict_mib": args.evict_mib,
        "chains": args.number,
        "elements": 256,
        "threads": 1,
        "cpu_us_per_op": round(cpu, 3),
        "flagos_us_per_op": round(flagos, 3),
        "extra_us_per_op": round(flagos - cpu, 3),
        "ratio": round(flagos / cpu, 3),
        "rounds_us_per_op": {device: [round(t, 3) for t in times] for device, times in rounds.items()},
    }, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
