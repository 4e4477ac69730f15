"""The state file of a calibration: JSON lines, appended and flushed as the run goes.

Three kinds of line: ``{"kind": "run", ...}`` when a run starts (its environment, settings, command, shard),
``{"kind": "start", "id": ...}`` before a case, ``{"kind": "case", ...}`` with its result.  A run cut short
keeps every finished case; a rerun skips them.  A case started but never finished (the process crashed or
was killed in it, a hang) is recorded by the next run as a failure, not tried again.  Shards write their own
files; ``merge`` reads them together, refusing files measured with another flag_gems, Triton or device.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from torch_fl.flaggems import evidence

__all__ = ["State", "StateError", "StateWriter", "read", "read_many", "unfinished_record"]


class StateError(ValueError):
    """A state file that cannot be used (unreadable, or measured elsewhere)."""


@dataclass
class State:
    runs: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Case id -> its result line."""
    unfinished: set[str] = field(default_factory=set)
    """Cases started and never finished."""
    wall_s: float = 0.0
    """The runs' wall time, summed (runs that ended)."""

    @property
    def environment(self) -> dict[str, Any] | None:
        return self.runs[-1]["environment"] if self.runs else None


def _differs(first: dict[str, Any], later: dict[str, Any]) -> list[str]:
    """``flag_gems 5.0.1 (not 5.0.2)``: the facts in which ``later`` differs from ``first``."""
    return [f"{key} {later.get(key)!s} (not {first.get(key)!s})" for key in evidence.MATCHED
            if first.get(key) != later.get(key)]


def unfinished_record(case_id: str, **outcome: Any) -> dict[str, Any]:
    """The result line of a case started and never finished, known only by its id, with ``outcome``."""
    op, dtype, source, _ = case_id.split("|", 3)
    return {"id": case_id, "op": op, "dtype": dtype.split(":")[0], "source": source, "numel": 0, "bucket": 0,
            **outcome}


def read(path: Path) -> State:
    state = State()
    if not path.exists():
        return state
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise StateError(f"cannot read state file {path}: {e.strerror}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            if number == len(lines):  # the last line of a run killed while writing it
                break
            raise StateError(f"{path}:{number}: not a JSON line; remove it or start a new state file") from None
        kind = entry.get("kind")
        if kind == "run":
            differs = _differs(state.runs[0]["environment"], entry["environment"]) if state.runs else []
            if differs:
                raise StateError(f"{path}:{number}: measured with another flag_gems, triton or device than the "
                                 f"runs before it ({', '.join(differs)}); use a new state file")
            state.runs.append(entry)
        elif kind == "start":
            state.unfinished.add(entry["id"])
        elif kind == "end":
            state.wall_s += float(entry.get("wall_s", 0.0))
        elif kind == "case":
            state.results[entry["id"]] = entry
            state.unfinished.discard(entry["id"])
    return state


def read_many(paths: list[Path]) -> State:
    """Shards' states as one; every file must come from the same flag_gems, Triton and device."""
    merged = State()
    for path in paths:
        if not path.is_file():
            raise StateError(f"state file {path} does not exist")
        state = read(path)
        if not state.runs:
            raise StateError(f"{path} holds no calibration run")
        if merged.runs:
            differs = _differs(merged.runs[0]["environment"], state.runs[0]["environment"])
            if differs:
                raise StateError(f"{path} was measured elsewhere than {paths[0]}: {', '.join(differs)}; merge only "
                                 "shards of one calibration")
        merged.runs.extend(state.runs)
        merged.results.update(state.results)
        merged.unfinished |= state.unfinished
        merged.wall_s += state.wall_s
    merged.unfinished -= set(merged.results)
    return merged


class StateWriter:
    """Appends lines to a state file, flushed at once (a crash loses at most the case in progress)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry, sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
