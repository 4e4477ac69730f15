"""A benchmark's report: the JSON printed, and with `--out` also written there."""

from __future__ import annotations

import json
from typing import Any


def emit_json(report: dict[str, Any], out: str | None) -> None:
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
