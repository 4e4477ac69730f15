"""From measured cases to routes: flaggems only where it is correct and faster, per op, dtype and size bucket.

* A dtype of an op with any wrong or refused case stays off FlagGems at every size: a kernel wrong for some
  shapes is not trusted for the others.
* A bucket is faster when the median over its cases of FlagGems' median time (the provider's own cost per
  call included) times ``min_speedup`` is below the kernel device's.
* The faster buckets of a dtype make ranges: a run of faster buckets with no slower one measured between
  them is one range, from the low edge of its first bucket (never extended to smaller, unmeasured sizes,
  where per-call costs weigh more) to the high edge of its last, open above when the last is the largest
  bucket measured.  Dtypes with the same ranges share a line.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from torch_fl.flaggems.calibration.cases import bucket_range
from torch_fl.flaggems.size_rules import SizeRule

__all__ = ["Decision", "decide"]


@dataclass(frozen=True)
class Decision:
    op: str
    category: str
    """``faster`` (every measured size of its dtypes), ``faster-in-size``, ``wrong``, ``slower``, ``not-measured``."""
    reason: str
    rules: tuple[SizeRule, ...]
    """The calls routed to flaggems (empty: none)."""
    dtypes: dict[str, Any]
    """The evidence per dtype (``route_evidence.schema.json``)."""


def _ranges(buckets: dict[int, bool]) -> list[tuple[int, int | None]]:
    order = sorted(buckets)
    spans: list[tuple[int, int | None]] = []
    start: int | None = None
    for k, bucket in enumerate(order):
        if buckets[bucket] and start is None:
            start = bucket
        if start is not None and (not buckets[bucket] or k == len(order) - 1):
            last = bucket if buckets[bucket] else order[k - 1]
            high = None if buckets[bucket] and k == len(order) - 1 else bucket_range(last)[1]
            spans.append((bucket_range(start)[0], high))
            start = None
    return spans


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def decide(op: str, results: list[dict[str, Any]], min_speedup: float) -> Decision:
    """The route of ``op`` from its measured cases (``state`` result lines, skipped ones included)."""
    by_dtype: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        if "skipped" not in r:
            by_dtype[r["dtype"]].append(r)
    dtypes: dict[str, Any] = {}
    spans_by_dtype: dict[str, list[tuple[int, int | None]]] = {}
    wrong: list[str] = []
    best: tuple[float, str] | None = None
    for dtype, cases in sorted(by_dtype.items()):
        failure = next((f"{c['failure']} ({c['source']}, {c['numel']} elements)" for c in cases if not c["correct"]),
                       None)
        buckets: dict[int, dict[str, Any]] = {}
        for bucket in sorted({c["bucket"] for c in cases}):
            inside = [c for c in cases if c["bucket"] == bucket]
            timed = [c for c in inside if c.get("native_us") is not None]
            native = _median([c["native_us"] for c in timed])
            gems = _median([c["flaggems_us"] for c in timed])
            correct = all(c["correct"] for c in inside)
            faster = failure is None and native is not None and gems is not None and gems * min_speedup < native
            buckets[bucket] = {"numel": list(bucket_range(bucket)), "cases": len(inside), "correct": correct,
                               "native_us": native, "flaggems_us": gems, "routed": faster}
            if native and gems and (best is None or native / gems > best[0]):
                best = (native / gems, f"{dtype}, {bucket_range(bucket)[0]}+ elements")
        dtypes[dtype] = {"wrong": failure, "buckets": {str(b): v for b, v in buckets.items()}}
        if failure is not None:
            wrong.append(f"{dtype}: {failure}")
            continue
        spans = _ranges({b: v["routed"] for b, v in buckets.items()})
        if spans:
            spans_by_dtype[dtype] = spans
    rules = _rules(spans_by_dtype)
    if not by_dtype:
        reasons = [r["skipped"] for r in results]
        reason = next((r for r in reasons if r.startswith("not measured")), None)
        if reason is None:
            reason = (f"not measured: {reasons[0]}, in every call" if reasons
                      else "not measured: no OpInfo sample or workload call reached it")
        return Decision(op, "not-measured", reason, (), dtypes)
    ratio = f"best {best[0]:.3g}x the kernel device's speed ({best[1]})" if best else "no timing"
    if not rules:
        if len(wrong) == len(by_dtype):
            return Decision(op, "wrong", f"wrong: {wrong[0]}", (), dtypes)
        note = f"; wrong in {', '.join(w.split(':')[0] for w in wrong)}" if wrong else ""
        return Decision(op, "slower", f"slower: {ratio}{note}", (), dtypes)
    everywhere = all(r.min_numel <= 1 and r.max_numel is None for r in rules) and not wrong and set(
        spans_by_dtype) == set(by_dtype)
    kept = sorted(set(by_dtype) - set(spans_by_dtype))
    note = f"; kept off: {', '.join(kept)}" if kept else ""
    if everywhere:
        return Decision(op, "faster", f"correct and faster at every size measured ({ratio})", rules, dtypes)
    return Decision(op, "faster-in-size", f"correct, and faster where routed ({ratio}){note}", rules, dtypes)


def _rules(spans_by_dtype: dict[str, list[tuple[int, int | None]]]) -> tuple[SizeRule, ...]:
    grouped: dict[tuple[int, int | None], set[str]] = defaultdict(set)
    for dtype, spans in spans_by_dtype.items():
        for span in spans:
            grouped[span].add(dtype)
    return tuple(SizeRule(frozenset(dtypes), low if low > 1 else 0, high)
                 for (low, high), dtypes in sorted(grouped.items(), key=lambda item: (item[0][0], item[0][1] or 0)))
