#!/usr/bin/env python3
"""Bundle-to-final-wheel time of the cuda-assets payload against one `zip -r -6` pass.

Runs torch-fl-build's stages bundle -> repair -> manifest -> write (the
pipeline's own ``assemble``) on the real
CUDA libraries of the CUDA torch wheel of the installed torch's version (about
540 MB uncompressed; downloaded once into the user cache, or --cuda-wheel), with
a small compiled stand-in plugin wheel.  Then zips the same assembled tree with
`zip -r -6` as the baseline.  The assembly runs in a child process so that its
peak memory (ru_maxrss) is its own; patchelf's is reported separately (patchelf
reads each file it rewrites whole; the cuda recipe keeps the CUDA libraries'
shipped RPATH, so only the small plugin is rewritten).

    python benchmarks/packaging/assemble_wheel.py [--cuda-wheel PATH] [--jobs N] [--level 6]

Prints one JSON document (key "version").  Needs gcc, zip and torch-fl-build's
environment (torch installed; the packaging distribution importable).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VERSION = 1


def _child(args: argparse.Namespace) -> dict:
    """Run configure/build (not timed), then bundle..write (timed); report own peak memory."""
    sys.path.insert(0, str(REPO / "tests" / "packaging"))
    import synthetic
    from torch_fl_packaging.build import build
    from torch_fl_packaging.configure import configure
    from torch_fl_packaging.pipeline import Reporter, assemble

    work = Path(args.work)
    cfg = configure(platform="cuda", source_dir=REPO, out_dir=work / "out",
                    vendor_torch=Path(args.cuda_wheel) if args.cuda_wheel else None, compress_level=args.level)
    plugin = synthetic.make_plugin_wheel(work / "plugin", cfg.recipe, version=cfg.wheel_version,
                                         requires=list(cfg.requirements), torch_lib=cfg.torch_lib)
    cfg = dataclasses.replace(cfg, from_wheel=plugin)
    built = build(cfg, work)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reporter = Reporter(enabled=False)
    t0 = time.perf_counter()
    staged, _, _, final = assemble(cfg, built, work, reporter, jobs=args.jobs)
    total = time.perf_counter() - t0
    times = reporter.timings
    payload = sum(p.stat().st_size for p in staged.root.rglob("*") if p.is_file())
    return {
        "assemble_s": round(total, 3),
        "stages_s": {k: round(v, 3) for k, v in times.items()},
        "payload_bytes": payload,
        "wheel_bytes": final.stat().st_size,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_rss_before_assembly_mb": round(rss_before / 1024, 1),
        "patchelf_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
        "stage_dir": str(staged.root),
        "bundled": staged.bundled,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cuda-wheel", help="the CUDA torch wheel (default: download into the user cache)")
    p.add_argument("--jobs", type=int, default=None, help="compression threads (default: CPU count)")
    p.add_argument("--level", type=int, default=6)
    p.add_argument("--repeat", type=int, default=1,
                   help="alternate assembly and zip this many times; report the medians (a shared machine is noisy)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_child(args)))
        return 0
    if not shutil.which("zip"):
        print("assemble_wheel: zip is not installed — apt-get install zip", file=sys.stderr)
        return 2
    runs: list[dict] = []
    for _ in range(max(1, args.repeat)):
        run = _one_round(args)
        if run is None:
            return 1
        runs.append(run)
    mid = sorted(runs, key=lambda r: r["assemble_s"])[len(runs) // 2]
    zip_s = statistics.median(r["zip_baseline_s"] for r in runs)
    assemble_s = statistics.median(r["assemble_s"] for r in runs)
    result = {
        "version": VERSION,
        "benchmark": "assemble_wheel",
        "payload": "cuda-assets: CUDA libraries of the CUDA torch wheel + a compiled stand-in plugin",
        "cpus": os.cpu_count(),
        "load_average_at_start": runs[0]["load_average"],
        "level": args.level,
        "repeat": len(runs),
        **{k: v for k, v in mid.items() if k not in ("assemble_s", "zip_baseline_s", "load_average")},
        "assemble_s": round(assemble_s, 3),
        "zip_baseline_s": round(zip_s, 3),
        "ratio_assemble_to_zip": round(assemble_s / zip_s, 3),
        "runs": [{"assemble_s": r["assemble_s"], "zip_baseline_s": r["zip_baseline_s"]} for r in runs],
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "patchelf_peak_rss_mb": max(r["patchelf_peak_rss_mb"] for r in runs),
        # The goal covers every process of the assembly, patchelf included.
        "goals": {"assemble_not_slower_than_zip": assemble_s <= zip_s,
                  "peak_rss_le_300mb": max(max(r["peak_rss_mb"], r["patchelf_peak_rss_mb"]) for r in runs) <= 300},
    }
    print(json.dumps(result, indent=2))
    return 0


def _one_round(args: argparse.Namespace) -> dict | None:
    work = Path(tempfile.mkdtemp(prefix="assemble-bench-"))
    try:
        load = os.getloadavg()[0]
        cmd = [sys.executable, __file__, "--child", "--work", str(work), "--level", str(args.level)]
        if args.cuda_wheel:
            cmd += ["--cuda-wheel", args.cuda_wheel]
        if args.jobs:
            cmd += ["--jobs", str(args.jobs)]
        env = dict(os.environ)
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        env.setdefault("SOURCE_DATE_EPOCH", "1700000000")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return None
        child = json.loads(proc.stdout.strip().splitlines()[-1])
        stage = Path(child.pop("stage_dir"))
        zip_out = work / "baseline.zip"
        t = time.perf_counter()
        subprocess.run(["zip", "-r", f"-{args.level}", "-q", str(zip_out), "."], cwd=stage, check=True)
        child["zip_baseline_s"] = round(time.perf_counter() - t, 3)
        child["zip_baseline_bytes"] = zip_out.stat().st_size
        child["load_average"] = round(load, 2)
        return child
    finally:
        shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    sys.exit(main())
