"""Findings and how they are shown: a text report grouped by outcome, or one JSON document."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from torch_fl_preflight import __version__

REPORT_VERSION = 1


class Status(str, Enum):
    PASS = "pass"  # noqa: S105 - a check outcome, not a password
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"


@dataclass(frozen=True)
class Finding:
    """The outcome of one check on one subject."""

    id: str  # dotted: area.check, e.g. wheel.record, elf.symbols
    status: Status
    message: str  # one line: what was found, with the values
    fix: str = ""  # one line: what to do; empty on pass
    details: tuple[str, ...] = ()  # e.g. the missing symbols, capped


@dataclass
class SubjectReport:
    """All findings for one wheel (or the installed distribution)."""

    subject: str
    platform: str | None = None
    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    def ok(self, check_id: str, message: str) -> None:
        self.add(Finding(check_id, Status.PASS, message))

    def fail(self, check_id: str, message: str, fix: str, details: tuple[str, ...] = ()) -> None:
        self.add(Finding(check_id, Status.FAIL, message, fix, details))

    def warn(self, check_id: str, message: str, fix: str, details: tuple[str, ...] = ()) -> None:
        self.add(Finding(check_id, Status.WARN, message, fix, details))

    def skip(self, check_id: str, message: str) -> None:
        self.add(Finding(check_id, Status.SKIP, message))

    @property
    def failed(self) -> bool:
        return any(f.status is Status.FAIL for f in self.findings)


def exit_code(reports: list[SubjectReport]) -> int:
    return 1 if any(r.failed for r in reports) else 0


def counts(reports: list[SubjectReport]) -> dict[str, int]:
    out = {s.value: 0 for s in Status}
    for r in reports:
        for f in r.findings:
            out[f.status.value] += 1
    return out


def to_json(reports: list[SubjectReport]) -> str:
    doc = {
        "version": REPORT_VERSION,
        "tool": {"name": "torch-fl-preflight", "version": __version__},
        "ok": exit_code(reports) == 0,
        "counts": counts(reports),
        "subjects": [
            {
                "subject": r.subject,
                "platform": r.platform,
                "ok": not r.failed,
                "facts": r.facts,
                "findings": [
                    {**asdict(f), "status": f.status.value, "details": list(f.details)} for f in r.findings
                ],
            }
            for r in reports
        ],
    }
    return json.dumps(doc, indent=2, sort_keys=False)


_ORDER = (Status.FAIL, Status.WARN, Status.PASS, Status.SKIP)
_MARK = {Status.FAIL: "FAIL", Status.WARN: "WARN", Status.PASS: "ok  ", Status.SKIP: "skip"}
MAX_DETAILS_SHOWN = 10


def _readable_symbols(details: tuple[str, ...]) -> tuple[str, ...]:
    """`member: _ZN...` -> `member: c10::...  [_ZN...]`, through c++filt when it is installed.

    Text mode only; --json keeps the names exactly as the ELF files spell them."""
    exe = shutil.which("c++filt")
    mangled = [d.split(": ", 1)[1].split("@", 1)[0] if ": " in d else "" for d in details]
    if exe is None or not any(m.startswith("_Z") for m in mangled):
        return details
    try:
        out = subprocess.run(
            [exe], input="\n".join(mangled) + "\n", capture_output=True, text=True, timeout=10, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return details
    if len(out) != len(details):
        return details
    return tuple(
        d if not m.startswith("_Z") or o == m else f"{d.split(': ', 1)[0]}: {o}  [{d.split(': ', 1)[1]}]"
        for d, m, o in zip(details, mangled, out)
    )


def to_text(reports: list[SubjectReport], *, verbose: bool = False) -> str:
    lines: list[str] = []
    for r in reports:
        head = r.subject + (f"  [{r.platform}]" if r.platform else "")
        lines.append(head)
        for status in _ORDER:
            group = [f for f in r.findings if f.status is status]
            if not group or (status is Status.SKIP and not verbose):
                continue
            for f in group:
                lines.append(f"  {_MARK[status]} {f.id}: {f.message}")
                if f.fix and status in (Status.FAIL, Status.WARN):
                    lines.append(f"       fix: {f.fix}")
                shown = f.details if verbose else f.details[:MAX_DETAILS_SHOWN]
                if f.id == "elf.symbols":
                    shown = _readable_symbols(shown)
                lines.extend(f"       - {d}" for d in shown)
                if len(f.details) > len(shown):
                    lines.append(f"       ... and {len(f.details) - len(shown)} more (--json lists all)")
        lines.append("")
    c = counts(reports)
    verdict = "OK" if exit_code(reports) == 0 else "FAILED"
    total = sum(c.values())
    lines.append(
        f"{verdict}: {total} checks; {c['fail']} failed, {c['warn']} warned, {c['pass']} passed, "
        f"{c['skip']} skipped"
    )
    return "\n".join(lines)
