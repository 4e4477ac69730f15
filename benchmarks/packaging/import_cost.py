"""What torch_fl's bootstrap costs at import time; one JSON document on stdout.

    python benchmarks/packaging/import_cost.py --wheel-dir DIR [--work DIR] [--runs N]

DIR holds the host and host-forked (STAND-IN) wheels (``torch-fl-build --out``).
Three fresh environments are made under ``--work`` (reused when present): stock
torch alone, stock torch + the host wheel, stock torch + the host-forked wheel.
Every figure is a median over ``--runs`` fresh interpreters:

* ``host``: ``import torch`` with torch_fl installed (autoload + startup hook)
  and ``import torch_fl``, against ``import torch`` alone (same environment,
  ``TORCH_DEVICE_BACKEND_AUTOLOAD=0 FLAGOS_NO_STARTUP_HOOK=1``).  Goal: at most
  50 ms added.
* ``forked``: ``import torch`` on an empty cache (the view is built) and on a
  warm one.
* ``bootstrap_only``: ``importlib.util.find_spec("torch")``, which the startup
  hook answers, with the hook off and on: the bootstrap's own share, without
  the noise of loading PyTorch.
* ``startup_hook``: what the ``.pth`` adds to ``python -c pass`` when torch is
  never imported -- the hook module's own import time (``-X importtime``), and
  the wall-time difference against the stock environment.  Goal: at most 1 ms.
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

# Wall and CPU time (all threads) of one statement, in a fresh interpreter.
_TIMED = ("import time; w = time.perf_counter(); c = time.process_time(); {stmt}; "
          "print((time.perf_counter() - w) * 1e3, (time.process_time() - c) * 1e3)")
IMPORT_TORCH = _TIMED.format(stmt="import torch")
IMPORT_TORCH_FL = _TIMED.format(stmt="import torch_fl")
# The bootstrap alone: the startup hook answers this lookup (reading the manifest;
# forked: building or checking the view), and PathFinder does the rest.
FIND_TORCH = _TIMED.format(stmt="import importlib.util; importlib.util.find_spec('torch')")

def _site(env: Path) -> Path:
    return env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


def _make_envs(wheel_dir: Path, work: Path) -> dict[str, Path]:
    from importlib.metadata import version

    envs = {"stock": work / "stock", "host": work / "host", "forked": work / "forked"}
    wheels = {"host": next(wheel_dir.glob("torch_fl-*+host-*.whl")),
              "forked": next(wheel_dir.glob("torch_fl-*+host.forked-*.whl"))}
    if not (envs["stock"] / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(envs["stock"])], check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--ignore-installed",
                        "--prefix", str(envs["stock"]), f"torch=={version('torch').split('+')[0]}"], check=True)
    for kind in ("host", "forked"):
        if (envs[kind] / "bin" / "python").exists():
            continue
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(envs[kind])], check=True)
        shutil.copytree(_site(envs["stock"]), _site(envs[kind]), dirs_exist_ok=True, symlinks=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", "--prefix",
                        str(envs[kind]), str(wheels[kind])], check=True)
    return envs


def _once(env: Path, code: str, environ: dict[str, str]) -> tuple[float, float]:
    proc = subprocess.run([str(env / "bin" / "python"), "-c", code], capture_output=True, text=True, env=environ,
                          check=True, cwd=env)
    wall, cpu = proc.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


Case = tuple[Path, str, dict[str, str], bool]  # environment, code, variables, fresh cache per run


def _interleaved(cases: dict[str, Case], runs: int) -> dict[str, dict[str, list[float]]]:
    """Run every case once per round, so that the machine's load falls on all of them alike."""
    out: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in cases}
    for _ in range(runs):
        for name, (env, code, environ, fresh_cache) in cases.items():
            e = dict(environ)
            if fresh_cache:
                e["FLAGOS_CACHE_DIR"] = tempfile.mkdtemp(prefix="import-cost-cache-")
            wall, cpu = _once(env, code, e)
            out[name]["wall"].append(wall)
            out[name]["cpu"].append(cpu)
            if fresh_cache:
                shutil.rmtree(e["FLAGOS_CACHE_DIR"], ignore_errors=True)
    return out


def _wall(env: Path, environ: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run([str(env / "bin" / "python"), "-c", "pass"], env=environ, check=True)
    return (time.perf_counter() - t) * 1e3


def _hook_import_us(env: Path, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        proc = subprocess.run([str(env / "bin" / "python"), "-X", "importtime", "-c", "pass"], capture_output=True,
                              text=True, env=_env(), check=True)
        for line in proc.stderr.splitlines():  # "import time: self | cumulative | name"
            fields = line.split("|")
            if len(fields) == 3 and fields[2].strip() == "_torch_fl_startup":
                out.append(float(fields[1]))
    return out


def _summary(values: list[float], digits: int = 2) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits), "runs": len(values)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheel-dir", type=Path, required=True, help="holds the host and host-forked wheels")
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "torch-fl-import-cost",
                   help="where the three environments are made (reused when present)")
    p.add_argument("--runs", type=int, default=15, help="fresh interpreters per import figure")
    p.add_argument("--pass-runs", type=int, default=200, help="python -c pass runs per side of the hook figure")
    args = p.parse_args(argv)

    envs = _make_envs(args.wheel_dir.resolve(), args.work.resolve())
    cache = tempfile.mkdtemp(prefix="import-cost-cache-")
    on = _env(FLAGOS_CACHE_DIR=cache)
    alone = _env(FLAGOS_CACHE_DIR=cache, FLAGOS_NO_STARTUP_HOOK="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    hook_off = _env(FLAGOS_CACHE_DIR=cache, FLAGOS_NO_STARTUP_HOOK="1")
    _once(envs["forked"], IMPORT_TORCH, on)  # the shared cache's view exists before the "later" cases

    t = _interleaved({
        "host_import_torch_alone": (envs["host"], IMPORT_TORCH, alone, False),
        "host_import_torch": (envs["host"], IMPORT_TORCH, on, False),
        "host_import_torch_fl": (envs["host"], IMPORT_TORCH_FL, on, False),
        "forked_import_torch_first": (envs["forked"], IMPORT_TORCH, on, True),
        "forked_import_torch_later": (envs["forked"], IMPORT_TORCH, on, False),
    }, args.runs)
    b = _interleaved({
        "host_find_torch_hook_off": (envs["host"], FIND_TORCH, hook_off, False),
        "host_find_torch": (envs["host"], FIND_TORCH, on, False),
        "forked_find_torch_first": (envs["forked"], FIND_TORCH, on, True),
        "forked_find_torch_later": (envs["forked"], FIND_TORCH, on, False),
    }, args.runs * 2)

    # The hook on an interpreter that never imports torch: alternate the two
    # environments so that machine noise falls on both sides alike.
    with_hook, without = [], []
    for _ in range(args.pass_runs):
        with_hook.append(_wall(envs["host"], _env()))
        without.append(_wall(envs["stock"], _env()))
    hook_us = _hook_import_us(envs["host"], 30)
    shutil.rmtree(cache, ignore_errors=True)

    def med(d: dict[str, dict[str, list[float]]], name: str, kind: str = "cpu") -> float:
        return statistics.median(d[name][kind])

    def added(d: dict[str, dict[str, list[float]]], name: str, base: str) -> dict[str, float]:
        return {k: round(med(d, name, k) - med(d, base, k), 2) for k in ("wall", "cpu")}

    def figures(d: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, dict[str, float]]]:
        return {name: {k: _summary(v) for k, v in kinds.items()} for name, kinds in d.items()}

    doc = {
        "version": 1,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()[0]},
        "unit": "ms",
        "note": "median over fresh interpreters, cases interleaved; cpu = process CPU time (all threads), "
                "steadier than wall time on a loaded machine",
        "imports": figures(t),
        "bootstrap_only": figures(b),
        "summary": {
            "host_added_to_import_torch": added(t, "host_import_torch", "host_import_torch_alone"),
            "host_import_torch_fl_vs_import_torch_alone": added(t, "host_import_torch_fl", "host_import_torch_alone"),
            "host_bootstrap_on_import_torch": added(b, "host_find_torch", "host_find_torch_hook_off"),
            "forked_view_first": added(b, "forked_find_torch_first", "host_find_torch_hook_off"),
            "forked_view_later": added(b, "forked_find_torch_later", "host_find_torch_hook_off"),
            "forked_import_torch_first_vs_alone": added(t, "forked_import_torch_first", "host_import_torch_alone"),
            "forked_import_torch_later_vs_alone": added(t, "forked_import_torch_later", "host_import_torch_alone"),
            "goal_host_added_max": 50,
        },
        "startup_hook": {
            "hook_module_import_us": _summary(hook_us, 1),
            "python_c_pass_with_hook": _summary(with_hook),
            "python_c_pass_stock": _summary(without),
            "added_wall_median": round(statistics.median(with_hook) - statistics.median(without), 3),
            "goal_added_max": 1,
        },
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
