"""The route table a calibration writes (``<name>.conf``, the routing file's own format) and its evidence
(``<name>.evidence.json``, ``route_evidence.schema.json``)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from torch_fl.flaggems import evidence
from torch_fl.flaggems.calibration.decide import Decision
from torch_fl.flaggems.calibration.state import State
from torch_fl.routing import evidence_path

__all__ = ["default_name", "write"]


def default_name(environment: dict[str, Any]) -> str:
    """``flaggems_routes_<flag_gems version>_<device>.conf``: the name the shipped tables have."""
    device = "".join(c if c.isalnum() else "-" for c in str(environment.get("device", "device")).lower()).strip("-")
    while "--" in device:
        device = device.replace("--", "-")
    return f"flaggems_routes_{environment.get('flag_gems')}_{device}.conf"


def _comment(text: str) -> str:
    return " ".join(text.split())[:160]


def write(out: Path, decisions: list[Decision], state: State, fallback: str, command: str) -> dict[str, Any]:
    """Writes the table and its evidence; returns the evidence document."""
    run = state.runs[0]
    environment = run["environment"]
    results = [r for r in state.results.values() if "skipped" not in r]
    shards = {r.get("shard") or "1/1" for r in state.runs}
    document: dict[str, Any] = {
        "version": 1,
        "calibrated": True,
        "command": command,
        "environment": environment,
        "settings": {**run["settings"], "shards": len(shards)},
        "started": min(r["started"] for r in state.runs),
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        # A screening's shards ran before the timing, side by side: its wall time is its longest shard's.
        "wall_s": round(state.wall_s + run["settings"].get("screen", {}).get("wall_s", 0.0), 1),
        "cases": {"run": len(results), "failed": sum(1 for r in results if not r["correct"])},
        "ops": {d.op: {"category": d.category, "reason": d.reason,
                       "route": [f"flaggems if {r}" if str(r) else "flaggems" for r in d.rules] or [fallback],
                       "dtypes": d.dtypes} for d in sorted(decisions, key=lambda d: d.op)},
    }
    evidence.validate(document)
    sidecar = evidence_path(out)
    lines = [
        "# flagos route table for provider flaggems, written by `python -m torch_fl.flaggems calibrate`",
        f"# flag_gems {environment['flag_gems']}, triton {environment['triton']}, torch {environment['torch']}, "
        f"on {environment['device']} (platform {environment['platform']}); {document['cases']['run']} cases",
        f"# Evidence: {sidecar.name}. An op (a dtype, a size) goes to flaggems only where FlagGems was correct and",
        f"# faster there; every other call runs on provider {fallback}. Format: docs/routing.md, \"Calibration\".",
        f"default = {fallback}",
    ]
    for d in sorted(decisions, key=lambda d: d.op):
        if d.rules:
            for rule in d.rules:
                condition = f" if {rule}" if str(rule) else ""
                lines.append(f"{d.op} = flaggems{condition}  # {_comment(d.reason)}")
        else:
            lines.append(f"{d.op} = {fallback}  # {_comment(d.reason)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    sidecar.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return document
