"""Runs the device layer's workloads on flagos, so that a plugin built with FLAGOS_PGO=generate records its profile.

    FLAGOS_PGO=generate FLAGOS_PGO_DIR=$PWD/build/pgo pip install --no-build-isolation .
    python tools/pgo_workload.py --profile-dir build/pgo [--workloads decode train] [--units 200]
    FLAGOS_PGO=use FLAGOS_PGO_DIR=$PWD/build/pgo pip install --no-build-isolation .

The workloads are `tools/device_workloads.py`'s (batch-1 decoding of a small Llama, needing `transformers`, and
training steps of a small encoder): the operators, views and results of real models, on whatever platform the
plugin was built for.  They run in a child process, since the instrumented plugin writes its counts when its
process exits; then the profile folder must hold counts written since, or the plugin was not a
FLAGOS_PGO=generate build for that folder.  Exit codes: 0 ok, 1 no profile was written, 2 unusable input.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from device_workloads import WORKLOADS


def child(workloads: list[str], units: int) -> None:
    import torch
    import torch_fl  # noqa: F401

    torch.set_num_threads(1)
    for name in workloads:
        unit = WORKLOADS[name]("flagos")
        for _ in range(units):
            unit()
    torch.flagos.synchronize()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[3:], int(sys.argv[2]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile-dir", type=Path, required=True, help="the FLAGOS_PGO_DIR the plugin was built with")
    p.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=["decode", "train"])
    p.add_argument("--units", type=int, default=200, help="tokens or steps of each workload (default 200)")
    args = p.parse_args()
    if args.units < 1:
        print("tools/pgo_workload.py: --units takes a positive count, such as --units 200", file=sys.stderr)
        return 2
    started = time.time()
    run = subprocess.run([sys.executable, __file__, "--child", str(args.units), *args.workloads],
                         capture_output=True, text=True, check=False)
    if run.returncode != 0:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"tools/pgo_workload.py: the workload failed ({tail}); check that torch_fl imports here "
              "(pip install transformers for the decode workload)", file=sys.stderr)
        return 2
    written = [f for f in args.profile_dir.glob("*.gcda") if f.stat().st_mtime >= started - 1]
    if not written:
        print(f"tools/pgo_workload.py: the workload ran but wrote no profile to {args.profile_dir} — build the "
              f"plugin with FLAGOS_PGO=generate FLAGOS_PGO_DIR={args.profile_dir.resolve()}", file=sys.stderr)
        return 1
    print(f"{len(written)} profile files in {args.profile_dir} ({', '.join(args.workloads)}, {args.units} units each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
