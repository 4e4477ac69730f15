"""What torch_fl's bootstrap costs at import time (issue 5); one JSON document on stdout.

    python benchmarks/import_cost.py --wheel-dir DIR [--work DIR] [--runs N]

DIR holds the host and host-forked (STAND-IN) wheels (``torch-fl-build --out``).
Three fresh environments are made under ``--work`` (reused when present): stock
torch alone, stock torch + the host wheel, stock torch + the host-forked wheel.
Every figure is a median over ``--runs`` fresh interpreters:

* ``host``: ``import torch`` with torch_fl installed (autoload + startup hook)
  against ``import torch`` in the stock environment, and ``import torch_fl``.
  Goal: at most 50 ms added.
* ``forked``: ``import torch`` on an empty cache (the view is built) and on a
  warm one.
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

_TIMED_IMPORT = ("import time; t = time.perf_counter(); import {module}; "
                 "print((time.perf_counter() - t) * 1e3)")


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
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(_site(envs["stock"])),
                        f"torch=={version('torch').split('+')[0]}"], check=True)
    for kind in ("host", "forked"):
        if (envs[kind] / "bin" / "python").exists():
            continue
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(envs[kind])], check=True)
        shutil.copytree(_site(envs["stock"]), _site(envs[kind]), dirs_exist_ok=True, symlinks=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        str(_site(envs[kind])), str(wheels[kind])], check=True)
    return envs


def _timed(env: Path, code: str, runs: int, environ: dict[str, str], fresh_cache: bool = False) -> list[float]:
    out = []
    for _ in range(runs):
        e = dict(environ)
        if fresh_cache:
            e["FLAGOS_CACHE_DIR"] = tempfile.mkdtemp(prefix="import-cost-cache-")
        proc = subprocess.run([str(env / "bin" / "python"), "-c", code], capture_output=True, text=True, env=e,
                              check=True, cwd=env)
        out.append(float(proc.stdout.strip().splitlines()[-1]))
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
        for line in proc.stderr.splitlines():
            if line.rstrip().endswith("| _torch_fl_startup"):
                out.append(float(line.split("|")[1]))
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
    quiet = _env(FLAGOS_CACHE_DIR=cache)
    import_torch = _TIMED_IMPORT.format(module="torch")

    stock = _timed(envs["stock"], import_torch, args.runs, quiet)
    host_torch = _timed(envs["host"], import_torch, args.runs, quiet)
    host_fl = _timed(envs["host"], _TIMED_IMPORT.format(module="torch_fl"), args.runs, quiet)
    forked_first = _timed(envs["forked"], import_torch, args.runs, quiet, fresh_cache=True)
    _timed(envs["forked"], import_torch, 1, quiet)  # warm the shared cache
    forked_later = _timed(envs["forked"], import_torch, args.runs, quiet)

    # The hook on an interpreter that never imports torch: alternate the two
    # environments so that machine noise falls on both sides alike.
    with_hook, without = [], []
    for _ in range(args.pass_runs):
        with_hook.append(_wall(envs["host"], _env()))
        without.append(_wall(envs["stock"], _env()))
    hook_us = _hook_import_us(envs["host"], 30)
    shutil.rmtree(cache, ignore_errors=True)

    base = statistics.median(stock)
    doc = {
        "version": 1,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()[0]},
        "unit": "ms",
        "host": {
            "import_torch_stock": _summary(stock),
            "import_torch_with_torch_fl": _summary(host_torch),
            "import_torch_fl": _summary(host_fl),
            "added_to_import_torch": round(statistics.median(host_torch) - base, 2),
            "goal_added_max": 50,
        },
        "forked": {
            "import_torch_first_empty_cache": _summary(forked_first),
            "import_torch_later_warm_cache": _summary(forked_later),
            "added_first": round(statistics.median(forked_first) - base, 2),
            "added_later": round(statistics.median(forked_later) - base, 2),
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
