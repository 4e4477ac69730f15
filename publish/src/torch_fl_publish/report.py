"""The run's summary: a rich table for people, or one JSON document (``--json``)."""

from __future__ import annotations

import json
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from torch_fl_publish import __version__
from torch_fl_publish.publish import Result
from torch_fl_publish.upload import Status

#: Version of the JSON document; bump on any incompatible change (result.schema.json).
JSON_VERSION = 1

_STYLE = {
    Status.UPLOADED: "green",
    Status.PRESENT: "cyan",
    Status.PLANNED: "cyan",
    Status.REFUSED: "bold red",
    Status.FAILED: "bold red",
    Status.UNVERIFIED: "bold red",
}


def as_json(result: Result) -> dict[str, Any]:
    return {
        "version": JSON_VERSION,
        "tool": "torch-fl-publish",
        "tool_version": __version__,
        "lane": result.lane,
        "repository_url": result.repository_url,
        "simple_url": result.simple_url,
        "tag": result.tag,
        "dry_run": result.dry_run,
        "ok": result.ok,
        "files": [
            {
                "filename": o.wheel.filename,
                "project": str(o.wheel.project),
                "version": str(o.wheel.version),
                "size": o.wheel.size,
                "sha256": o.wheel.sha256,
                "status": o.status.value,
                "verified": o.verified,
                "attempts": o.attempts,
                "index_sha256": o.index_sha256,
                "detail": o.detail,
            }
            for o in result.outcomes
        ],
        "not_published": [o.wheel.filename for o in result.not_published],
    }


def write_error_json(line: str, exit_code: int, out: TextIO) -> None:
    document = {
        "version": JSON_VERSION,
        "tool": "torch-fl-publish",
        "tool_version": __version__,
        "ok": False,
        "error": line,
        "exit_code": exit_code,
    }
    out.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def write_json(result: Result, out: TextIO) -> None:
    out.write(json.dumps(as_json(result), indent=2) + "\n")


def write_table(result: Result, out: TextIO) -> None:
    # Piped output (CI logs) is not a terminal: make it wide enough that wheel names stay whole.
    probe = Console(file=out)
    console = Console(file=out, highlight=False, width=probe.width if probe.is_terminal else 220)
    table = Table(title=f"torch-fl-publish: lane {result.lane} -> {result.repository_url}", title_justify="left")
    table.add_column("wheel", no_wrap=True)
    for column in ("size", "sha256", "status", "tries"):
        table.add_column(column, no_wrap=True)
    table.add_column("detail", overflow="fold")
    for o in result.outcomes:
        status = o.status.value + (" ✓" if o.verified else "")
        table.add_row(
            o.wheel.filename,
            f"{o.wheel.size / 1e6:.1f} MB" if o.wheel.size >= 100_000 else f"{o.wheel.size / 1e3:.1f} kB",
            o.wheel.sha256[:12],
            f"[{_STYLE[o.status]}]{status}[/]",
            str(o.attempts),
            o.detail,
        )
    console.print(table)
    failed = result.not_published
    if failed:
        console.print(f"[bold red]not published ({len(failed)}):[/] " + ", ".join(o.wheel.filename for o in failed))
    else:
        counts: dict[str, int] = {}
        for o in result.outcomes:
            counts[o.status.value] = counts.get(o.status.value, 0) + 1
        console.print("ok: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
