"""The release table (one row per wheel), in Markdown, from the wheels' own manifests."""

from __future__ import annotations

import hashlib
import os

from torch_fl_preflight import wheel_checks
from torch_fl_preflight.checker import read_wheel_manifest
from torch_fl_preflight.manifest_checks import check_release
from torch_fl_preflight.report import SubjectReport
from torch_fl_preflight.wheel_reader import WheelArchive

COLUMNS = (
    "platform",
    "wheel version",
    "build torch",
    "C++ ABI",
    "SDK",
    "vendor torch",
    "FlagGems",
    "FlagTree",
    "FlagCX",
    "size",
    "sha256",
)
MISSING = "—"


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(8 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError


def render(wheels: list[str], *, release: bool) -> tuple[str, bool]:
    """(markdown, ok); ok is False when a wheel lacks the provenance a release needs."""
    rows = []
    problems = []
    for path in wheels:
        with WheelArchive(path) as whl:
            meta = wheel_checks.read_wheel_metadata(whl)
            m = read_wheel_manifest(whl, meta)
        probe = SubjectReport(os.path.basename(path))
        check_release(m, probe, release=release)
        problems += [
            f"{probe.subject}: {f.message}" for f in probe.findings if f.status.value in ("fail", "warn")
        ]
        comps = m.get("companions", {})
        sdk = m["sdk"]
        rows.append(
            (
                m["platform"],
                m["wheel"]["version"],
                m["torch"]["version"],
                "cxx11" if m["torch"]["cxx11_abi"] else "pre-cxx11",
                f"{sdk['name']} {sdk['version']}" if "version" in sdk else f"{sdk['name']} {MISSING}",
                (m.get("vendor_torch") or {}).get("version", MISSING),
                comps.get("flaggems", MISSING),
                comps.get("flagtree", MISSING),
                comps.get("flagcx", MISSING),
                _size(os.path.getsize(path)),
                _sha256(path)[:12],
            )
        )
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if problems:
        lines.append("")
        lines += [f"missing provenance: {p}" for p in problems]
    return "\n".join(lines), not (release and problems)
