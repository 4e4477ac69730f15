"""Instructions and simulated instruction-cache misses per unit of work, flagos against the CPU, on the host platform.

A GPU machine's processor counters are out of reach (its VMs have no PMU), and a loop of one operator keeps
the device layer's code in the instruction cache where a real workload does not.  callgrind counts every
instruction the process runs and, with `--cache-sim=yes`, simulates a 32 KiB L1 instruction cache over
them, so two runs of one workload, one per device, say how many more instructions flagos runs per unit and
how many more times it fetches code the cache no longer held: the same layer code runs on the cuda platform.

    python tools/callgrind_host.py [--workload decode|train|compiled] [--units 10] [--top 30] [--json OUT] [--keep DIR]

The workloads are `tools/device_workloads.py`'s, small so that a run takes about half a minute under callgrind:
`decode` (a unit is a token of batch-1 greedy decoding), `train` (a unit is a training step) and `compiled` (a unit
is a forward and backward of a model under `torch.compile`; it compiles in the warm-up, which callgrind runs
uninstrumented, in about two minutes per device).  Inductor's C++ kernels differ in name, and partly in code,
between the two devices (the CPU's appear under `?`), so read that workload's layer functions, not its totals.

Functions are told apart by name: callgrind merges the local copies several libraries make of one inline
function (intrusive_ptr's reference counting) and labels them with one of those libraries, so the per-library
table is approximate where such copies are hot.

Collection starts after the warm-up and stops after the last unit, on every thread: a small shim built here
with the C compiler issues callgrind's client requests (valgrind's `callgrind.h`).  Printed per unit: both
devices by library, and the functions whose instructions or misses differ most.  Host-platform parts that
the cuda platform does not run (the host allocator, the host runtime) appear in the tables by name.

Needs valgrind (with its headers) and a C compiler.  The plugin's functions have names where it was built
unstripped (`SKBUILD_INSTALL_STRIP=false pip install --no-build-isolation .`); a stripped build shows
addresses.  Exit codes: 0 ok, 2 unusable input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from device_workloads import WORKLOADS
from preload_library import build_preload_library

SHIM = r"""
#include <valgrind/callgrind.h>
void start_collecting(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void stop_collecting(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("units"); }
"""


def child(workload: str, device: str, units: int, shim: str) -> None:
    """Runs under callgrind: the workload on `device`, collecting over `units` units after a warm-up."""
    import ctypes

    import torch

    if device == "flagos":
        import torch_fl  # noqa: F401

    collector = ctypes.CDLL(shim)

    def collect(unit: Callable[[], None], warmup: int) -> None:
        for _ in range(warmup):
            unit()
        collector.start_collecting()
        for _ in range(units):
            unit()
        collector.stop_collecting()

    torch.set_num_threads(1)
    unit = WORKLOADS[workload](device)
    collect(unit, warmup=5 if workload == "decode" else 3)


# callgrind_annotate's rows: "  1,234 (0.5%)  56 (0.1%)  file:function [library]"
ROW = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+([\d,]+) \([^)]*\)\s+(.*?)\s*$")


def functions(profile: Path) -> dict[str, tuple[int, int, str]]:
    """Function (with its library) -> (instructions, L1 instruction-cache misses) over the collected units.

    callgrind merges functions of one name, such as the local copies several libraries make of one inline
    function of a header, and names the library it saw first: the library is a label, the name the key."""
    annotated = subprocess.run(["callgrind_annotate", "--threshold=100", "--show=Ir,I1mr", "--sort=Ir",
                                str(profile)], capture_output=True, text=True, check=True).stdout
    out: dict[str, tuple[int, int]] = {}
    for line in annotated.splitlines():
        m = ROW.match(line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        name = m.group(3)
        library = re.search(r"\[([^\]]*)\]$", name)
        function = re.sub(r"\s*\[[^\]]*\]$", "", name).split(":", 1)[-1] if ":" in name else name
        ir, misses, _ = out.get(function, (0, 0, ""))
        label = re.sub(r"(\.cpython-.*|\.so.*)$", "", Path(library.group(1)).name) if library else "?"
        out[function] = (ir + int(m.group(1).replace(",", "")), misses + int(m.group(2).replace(",", "")), label)
    return out


def run_device(workload: str, device: str, units: int, shim: Path, folder: Path) -> dict[str, tuple[int, int, str]]:
    out = folder / f"callgrind.{device}"
    command = ["valgrind", "--tool=callgrind", "--cache-sim=yes", "--instr-atstart=no",
               f"--callgrind-out-file={out}", sys.executable, __file__, "--child", workload, device, str(units),
               str(shim)]
    # valgrind runs no AVX-512, while inductor builds its C++ kernels for the processor it finds outside valgrind
    # (-march=native), and ATen picks its kernels likewise: both are held to AVX2.
    env = {**os.environ, "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3", "ATEN_CPU_CAPABILITY": "avx2"}
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    dumps = sorted(folder.glob(f"callgrind.{device}.*"))
    if result.returncode != 0 or not dumps:
        tail = result.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"tools/callgrind_host.py: the {device} run failed ({tail[0]}); run the workload "
                         f"without valgrind to see why")
    return functions(dumps[-1])


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="decode")
    p.add_argument("--units", type=int, default=10, help="tokens or steps collected (default 10)")
    p.add_argument("--top", type=int, default=30, help="functions listed per table (default 30)")
    p.add_argument("--json", type=Path, help="also write the per-unit figures here")
    p.add_argument("--keep", type=Path, help="keep callgrind's dumps here (callgrind_annotate --tree=caller reads them)")
    args = p.parse_args()
    if args.units < 1 or args.top < 1:
        print("tools/callgrind_host.py: --units and --top take a positive count, such as --units 10", file=sys.stderr)
        return 2
    for tool in ("valgrind", "callgrind_annotate"):
        if shutil.which(tool) is None:
            print(f"tools/callgrind_host.py: {tool} is not on PATH; install valgrind (Debian: apt install valgrind)",
                  file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="callgrind-host-") as tmp:
        folder = Path(tmp)
        try:
            shim = build_preload_library(folder, "collect", SHIM, tool="tools/callgrind_host.py", optimise="-O1",
                                         failed_hint="is valgrind/callgrind.h missing? install valgrind with its "
                                                     "headers (Debian: apt install valgrind)")
            sides = {device: run_device(args.workload, device, args.units, shim, folder) for device in ("cpu", "flagos")}
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                for dump in folder.glob("callgrind.*.*"):
                    shutil.copy2(dump, args.keep / dump.name)
        except SystemExit as e:
            print(e, file=sys.stderr)
            return 2
    per_unit = {device: {k: (ir / args.units, m / args.units) for k, (ir, m, _) in rows.items()}
                for device, rows in sides.items()}
    label = {k: lib for rows in sides.values() for k, (_, _, lib) in rows.items()}
    libraries: dict[str, dict[str, list[float]]] = {}
    for device, rows in per_unit.items():
        for key, (ir, misses) in rows.items():
            entry = libraries.setdefault(sides[device][key][2], {}).setdefault(device, [0.0, 0.0])
            entry[0] += ir
            entry[1] += misses
    unit = "token" if args.workload == "decode" else "step"
    print(f"per {unit}, {args.units} {unit}s collected: instructions (Ir) and simulated L1i misses (I1mr)")
    print(f"{'library':32s} {'cpu Ir':>12s} {'flagos Ir':>12s} {'cpu I1mr':>10s} {'flagos I1mr':>11s}")
    totals = {d: [sum(v[0] for v in per_unit[d].values()), sum(v[1] for v in per_unit[d].values())] for d in per_unit}
    for name, by_device in sorted(libraries.items(), key=lambda kv: -max(v[0] for v in kv[1].values()))[:12]:
        c, f = by_device.get("cpu", [0, 0]), by_device.get("flagos", [0, 0])
        print(f"{name[:32]:32s} {c[0]:12.0f} {f[0]:12.0f} {c[1]:10.0f} {f[1]:11.0f}")
    print(f"{'all':32s} {totals['cpu'][0]:12.0f} {totals['flagos'][0]:12.0f} {totals['cpu'][1]:10.0f} "
          f"{totals['flagos'][1]:11.0f}")
    keys = set(per_unit["cpu"]) | set(per_unit["flagos"])

    def extra(key: str, column: int) -> float:
        return per_unit["flagos"].get(key, (0, 0))[column] - per_unit["cpu"].get(key, (0, 0))[column]

    for column, title in ((1, "simulated L1i misses"), (0, "instructions")):
        print(f"\nflagos minus cpu, {title} per {unit}, largest first:")
        for key in sorted(keys, key=lambda k: -extra(k, column))[:args.top]:
            print(f"{extra(key, column):12.0f}  {key[:130]}  [{label[key]}]")
    if args.json:
        args.json.write_text(json.dumps({"workload": args.workload, "units": args.units, "per_unit_totals": totals,
                                         "per_unit_by_library": libraries}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
