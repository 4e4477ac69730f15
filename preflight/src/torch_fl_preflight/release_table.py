"""The release table (one row per wheel), in Markdown, from the wheels' own manifests."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

from torch_fl_preflight import wheel_checks
from torch_fl_preflight.checker import Options, check_wheel, read_wheel_manifest
from torch_fl_preflight.compatibility import Companions
from torch_fl_preflight.report import Status
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
    "check",
)
MISSING = "—"
RECIPE_ONLY = "recipe only"


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


def render(wheels: list[str], *, release: bool, recipe_only: Sequence[str] = ()) -> tuple[str, bool]:
    """(markdown, ok).

    ``recipe_only``: platforms that have a recipe but no runtime adapter, hence no wheel; each is a row
    of its own whose check column says so (the release's table lists every platform, built or not).

    Each wheel is first checked alone, as ``--wheel`` checks it without a target (identity, RECORD,
    manifest, ELF records): a table of releases must not list a wheel whose bytes are not the ones
    its manifest describes. ok is False when a check fails, and with ``release`` when a wheel lacks
    the provenance a release needs; the ``check`` column names the failed checks of each row."""
    rows: list[tuple[str, ...]] = []
    problems: list[str] = []
    failures: list[str] = []
    for path in wheels:
        report = check_wheel(path, None, Options(release=release))
        with WheelArchive(path) as whl:
            meta = wheel_checks.read_wheel_metadata(whl)
            m = read_wheel_manifest(whl, meta)
        failed = [f for f in report.findings if f.status is Status.FAIL]
        problems += [
            f"{report.subject}: {f.message}"
            for f in report.findings
            if f.id == "manifest.provenance" and f.status in (Status.FAIL, Status.WARN)
        ]
        failures += [
            f"{report.subject}: {f.id}: {f.message}" for f in failed if f.id != "manifest.provenance"
        ]
        comps = m.companions or Companions()
        rows.append(
            (
                m.platform,
                m.wheel.version,
                m.torch.version,
                "cxx11" if m.torch.cxx11_abi else "pre-cxx11",
                f"{m.sdk.name} {m.sdk.version or MISSING}",
                m.vendor_torch.version if m.vendor_torch else MISSING,
                comps.flaggems or MISSING,
                comps.flagtree or MISSING,
                comps.flagcx or MISSING,
                _size(os.path.getsize(path)),
                _sha256(path)[:12],
                "FAIL " + ", ".join(dict.fromkeys(f.id for f in failed)) if failed else "ok",
            )
        )
    rows += [(name, *([MISSING] * (len(COLUMNS) - 2)), RECIPE_ONLY) for name in recipe_only]
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if failures:
        lines.append("")
        lines += [f"failed: {p}" for p in failures]
    if problems:
        lines.append("")
        lines += [f"missing provenance: {p}" for p in problems]
    return "\n".join(lines), not failures and not (release and problems)
