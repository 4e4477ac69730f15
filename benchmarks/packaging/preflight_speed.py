"""How fast is torch-fl-preflight on the cuda-assets wheel, against `auditwheel show`?

Measures, each in a fresh process (cold start: interpreter start, imports, probe, everything):
  * preflight: the full check, ELF gates included, against a target environment with torch
    2.13.0+cpu and the nvidia-* packages (--python), wall time and peak RSS;
  * auditwheel show --json on the same wheel (given the target's torch/lib on LD_LIBRARY_PATH),
    wall time and peak RSS.
Prints one JSON document. Goals: preflight <= 3 s, >= 10x faster than
auditwheel show, peak memory <= 300 MB.

    python benchmarks/packaging/preflight_speed.py [--wheel W] [--python P] [--repeat N] [--skip-auditwheel]

Without --wheel/--python it builds (once, in ${XDG_CACHE_HOME:-~/.cache}/torch_fl) the stand-in
cuda-assets wheel and the target environment from the CUDA torch 2.13.0 wheel and its nvidia-*
requirements, downloading them on first use (several GB).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


CPU_LOG: list[float] = []


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, int, str]:
    """(wall seconds, peak RSS in bytes, exit code, stdout) of one fresh process; its CPU seconds
    (user + system) are appended to CPU_LOG. The machine may be shared: CPU time is the steadier figure."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out_chunks = []
    assert proc.stdout is not None
    out_chunks.append(proc.stdout.read())
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    CPU_LOG.append(usage.ru_utime + usage.ru_stime)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.stderr is not None:
        proc.stderr.read()
    return wall, usage.ru_maxrss * 1024, proc.returncode, b"".join(out_chunks).decode(errors="replace")


def default_inputs() -> tuple[Path, Path]:
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "preflight")]  # support/, then the builders
    import _preflight_builders as builders

    inputs = builders.download_cuda_inputs()
    wheel = builders.cuda_assets_wheel(inputs, builders.cache_dir() / "wheels")
    python = builders.cuda_env("torch-2.13.0-cpu-nvidia", inputs["cpu"], inputs["nvidia"])
    return wheel, python


def driver_stub(wheel: Path, python: Path) -> Path | None:
    """A synthetic libcuda.so.1 exporting the driver entry points (cu*) the wheel's libraries
    reference, so that the full check can pass on a machine without the NVIDIA driver (as in
    tests/preflight/test_cuda_assets_gates.py). None when gcc is missing or nothing is needed."""
    if shutil.which("gcc") is None:
        return None
    _w, _r, _c, out = timed([*preflight_command(), "--wheel", str(wheel), "--python", str(python), "--json"])
    findings = json.loads(out)["subjects"][0]["findings"]
    missing = next((f["details"] for f in findings if f["id"] == "elf.symbols"), [])
    names = sorted({d.split(": ", 1)[1].split("@")[0] for d in missing})
    if not names or not all(n.startswith("cu") for n in names):
        return None
    out_dir = Path(tempfile.mkdtemp(prefix="synthetic-driver-"))
    src = out_dir / "libcuda.c"
    src.write_text("".join(f"int {n}(void){{return 0;}}\n" for n in names))
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out_dir / "libcuda.so.1"), str(src),
                    "-Wl,-soname,libcuda.so.1"], check=True)
    return out_dir


def preflight_command() -> list[str]:
    exe = shutil.which("torch-fl-preflight")
    return [exe] if exe else [sys.executable, "-m", "torch_fl_preflight"]


def auditwheel_command() -> list[str] | None:
    local = Path(sys.executable).with_name("auditwheel")
    if local.exists():
        return [str(local)]
    found = shutil.which("auditwheel")
    return [found] if found else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", type=Path)
    ap.add_argument("--python", type=Path, help="target environment's interpreter")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-auditwheel", action="store_true")
    ap.add_argument("--no-driver-stub", action="store_true",
                    help="do not put a synthetic libcuda.so.1 on LD_LIBRARY_PATH (this machine has no driver)")
    args = ap.parse_args()
    wheel, python = (args.wheel, args.python) if args.wheel and args.python else default_inputs()
    site = subprocess.run([str(python), "-c", "import sysconfig;print(sysconfig.get_paths()['platlib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()

    env = dict(os.environ)
    stub = None if args.no_driver_stub else driver_stub(wheel, python)
    if stub is not None:
        env["LD_LIBRARY_PATH"] = str(stub)
    runs = []
    report: dict[str, object] = {}
    CPU_LOG.clear()
    for _ in range(args.repeat):
        cmd = [*preflight_command(), "--wheel", str(wheel), "--python", str(python), "--json"]
        wall, rss, code, out = timed(cmd, env)
        runs.append((wall, rss, code))
        report = json.loads(out)
    pf_wall = [w for w, _, _ in runs]
    result: dict[str, object] = {
        "version": 1,
        "benchmark": "preflight_speed",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "wheel": {"path": wheel.name, "bytes": wheel.stat().st_size},
        "target_python": str(python),
        "synthetic_driver_stub": stub is not None,
        "preflight": {
            "exit_codes": sorted({c for _, _, c in runs}),
            "checks": report.get("counts"),
            "wall_s": {"min": round(min(pf_wall), 3), "median": round(statistics.median(pf_wall), 3),
                       "runs": [round(w, 3) for w in pf_wall]},
            "peak_rss_mb": round(max(r for _, r, _ in runs) / 2**20, 1),
            "cpu_s_min": round(min(CPU_LOG), 3),
        },
        "goals": {"wall_s_max": 3.0, "speedup_min": 10.0, "peak_rss_mb_max": 300},
    }
    aw = None if args.skip_auditwheel else auditwheel_command()
    if aw is not None:
        ld = [os.path.join(site, "torch", "lib"), *([str(stub)] if stub else [])]
        env = dict(os.environ, LD_LIBRARY_PATH=":".join(ld))
        CPU_LOG.clear()
        aw_runs = [timed([*aw, "show", "--json", str(wheel)], env) for _ in range(args.repeat)]
        aw_wall = [w for w, _, _, _ in aw_runs]
        result["auditwheel_show"] = {
            "wall_s": {"min": round(min(aw_wall), 3), "median": round(statistics.median(aw_wall), 3),
                       "runs": [round(w, 3) for w in aw_wall]},
            "peak_rss_mb": round(max(r for _, r, _, _ in aw_runs) / 2**20, 1),
            "exit_codes": sorted({c for _, _, c, _ in aw_runs}),
            "cpu_s_min": round(min(CPU_LOG), 3),
        }
        result["speedup"] = round(min(aw_wall) / min(pf_wall), 1)
    pf = result["preflight"]
    assert isinstance(pf, dict)
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    result["meets_goals"] = {
        "wall": min(pf_wall) <= 3.0,
        "memory": pf["peak_rss_mb"] <= 300,
        "speedup": (result.get("speedup") or 0) >= 10.0 if aw is not None else None,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
