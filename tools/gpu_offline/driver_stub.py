"""A stand-in for the NVIDIA driver on a machine without one, for a dry run of the procedure."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from failures import CheckFailed, UsageError

DRIVER_API = re.compile(r"^cu[A-Z]\w*$")


def driver_stub(preflight_json: Path, out: Path) -> Path:
    """A synthetic libcuda.so.1 exporting the driver entry points preflight found undefined.

    Only for a rehearsal on a machine without an NVIDIA driver (the same stub as
    tests/preflight/test_cuda_assets_gates.py): it stands for the driver the target must have, so
    that every other gate can be proven here.  Refuses when anything but the driver is missing.
    """
    try:
        doc = json.loads(preflight_json.read_text(encoding="utf-8"))
        findings = {f["id"]: f for f in doc["subjects"][0]["findings"]}
    except (OSError, ValueError, KeyError, IndexError) as e:
        raise UsageError(f"cannot read preflight's JSON report {preflight_json} ({e}) — run preflight with --json") from e
    needed = findings.get("elf.needed", {}).get("details") or []
    others = [d for d in needed if not d.endswith("libcuda.so.1 not found")]
    names = sorted({d.split(": ", 1)[1].split("@")[0] for d in findings.get("elf.symbols", {}).get("details") or []})
    not_driver = [n for n in names if not DRIVER_API.match(n)]
    if others or not_driver:
        raise CheckFailed(f"more than the driver is missing ({(others + not_driver)[:5]}) — fix the environment, not the stub")
    out.mkdir(parents=True, exist_ok=True)
    src = out / "libcuda_stub.c"
    src.write_text("".join(f"int {n}(void) {{ return 0; }}\n" for n in names) or "int cuInit(void) { return 0; }\n",
                   encoding="utf-8")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out / "libcuda.so.1"), str(src)],
                   check=True)
    return out
