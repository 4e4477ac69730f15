"""A benchmark's report: the JSON printed, and with `--out` also written there; and the interval that
says how well a median of paired ratios is known.

Every report records the machine, the versions, the command that made it and the commit it ran at
(when run from a git checkout), so that `benchmarks/report_tables.py` can say where each table's
numbers come from.  What a benchmark records itself (a GPU's name, the native side's versions) wins.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[2]


def _command() -> str:
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(_REPO).as_posix() if script.is_relative_to(_REPO) else script.name
    return shlex.join(["python", shown, *sys.argv[1:]])


def _git(*args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(["git", "-C", os.fspath(_REPO), *args], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None


def _commit() -> str | None:
    """HEAD, with "-dirty" where tracked files differ from it: a copy of a work tree with uncommitted changes
    (or one carried to another machine beside an older .git) ran code that no commit holds."""
    head = _git("rev-parse", "HEAD")
    if head is None or head.returncode != 0 or not head.stdout.strip():
        return None
    diff = _git("diff", "--quiet", "HEAD", "--")
    dirty = diff is not None and diff.returncode == 1
    return head.stdout.strip() + ("-dirty" if dirty else "")


def emit_json(report: dict[str, Any], out: str | None) -> None:
    report = {**report}
    report.setdefault("machine", platform.machine())
    report.setdefault("cpus", os.cpu_count())
    report.setdefault("python", platform.python_version())
    torch = sys.modules.get("torch")
    if torch is not None:
        report.setdefault("torch", getattr(torch, "__version__", None))
    report.setdefault("command", _command())
    report.setdefault("commit", _commit())
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text + "\n")


def median_interval(values: list[float], confidence: float = 0.95, digits: int = 4) -> list[float] | None:
    """A distribution-free interval for the median of `values`: [k-th smallest, k-th largest] for the largest k
    whose interval covers the median with at least `confidence` (how many values fall below the median is
    Binomial(n, 1/2)), rounded to `digits`; None where there are too few values for any (fewer than 6 at 95 %).
    The GPU machines' speed drifts within seconds, so a ratio's median is known only to within this; a goal
    inside the interval is neither met nor missed by that run."""
    n = len(values)
    ordered = sorted(values)
    tail = (1 - confidence) / 2
    below = 0.0  # P(Binomial(n, 1/2) < k)
    k = 0
    while below + math.comb(n, k) / 2**n <= tail:
        below += math.comb(n, k) / 2**n
        k += 1
    if k == 0:
        return None
    return [round(ordered[k - 1], digits), round(ordered[n - k], digits)]
