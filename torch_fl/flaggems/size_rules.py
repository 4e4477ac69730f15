"""Per-shape routes of provider ``flaggems``: ``op = flaggems if <condition>`` in a routing file.

A condition names the dtypes and element counts of the calls FlagGems runs; every other call of the op
runs on the kernel device's own kernel (provider ``cuda`` or ``host``)::

    _softmax = flaggems if dtype in float32,bfloat16 and numel >= 8192
    mul.Tensor = flaggems if dtype in float16 and numel >= 4096 and numel < 1048576
    abs = flaggems if numel >= 65536

Clauses are joined by ``and``: ``dtype in D1,D2,...``, ``numel >= N``, ``numel < N``; several ``if`` lines
for one op mean "any of them".  The size of a call is its largest tensor argument's element count (a list
of tensors counts as their total, ``out=`` included) and its dtype the first tensor argument's:
``call_size`` computes both, for the kernels at call time and for the calibration that writes the rules.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["SizeRule", "SizeRuleError", "call_size", "compile_rules", "dtype_name", "parse"]

_Tensor = torch.Tensor
_UNBOUNDED = sys.maxsize


class SizeRuleError(ValueError):
    """A condition that cannot be parsed (the routing file names the line)."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype(name: str) -> torch.dtype:
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise SizeRuleError(f"unknown dtype {name!r} (write torch's name without 'torch.': float32, bfloat16)")
    return value


@dataclass(frozen=True)
class SizeRule:
    """One ``if`` line: the calls of an op that go to FlagGems."""

    dtypes: frozenset[str] | None = None
    """dtype names (``float32``); None: every dtype."""
    min_numel: int = 0
    """Smallest element count routed (inclusive)."""
    max_numel: int | None = None
    """Element count from which the call goes back to the kernel device (exclusive); None: no bound."""

    def matches(self, dtype: torch.dtype, numel: int) -> bool:
        if self.dtypes is not None and dtype_name(dtype) not in self.dtypes:
            return False
        return self.min_numel <= numel and (self.max_numel is None or numel < self.max_numel)

    def __str__(self) -> str:
        clauses = []
        if self.dtypes is not None:
            clauses.append(f"dtype in {','.join(sorted(self.dtypes))}")
        if self.min_numel:
            clauses.append(f"numel >= {self.min_numel}")
        if self.max_numel is not None:
            clauses.append(f"numel < {self.max_numel}")
        return " and ".join(clauses)


_CLAUSE = re.compile(r"^(?:dtype\s+in\s+(?P<dtypes>[\w, ]+?)|numel\s*(?P<cmp>>=|<)\s*(?P<n>\d+))$")


def parse(condition: str) -> SizeRule:
    """``dtype in float32 and numel >= 8192`` -> SizeRule; raises SizeRuleError with what is wrong."""
    dtypes: frozenset[str] | None = None
    low, high = 0, None
    clauses = [c.strip() for c in re.split(r"\band\b", condition)]
    if not condition.strip() or any(not c for c in clauses):
        raise SizeRuleError(f"expected 'dtype in D1,D2', 'numel >= N' or 'numel < N' joined by 'and', got {condition!r}")
    for clause in clauses:
        m = _CLAUSE.match(clause)
        if m is None:
            raise SizeRuleError(f"cannot read {clause!r}: expected 'dtype in D1,D2', 'numel >= N' or 'numel < N'")
        if m["dtypes"] is not None:
            names = [n.strip() for n in m["dtypes"].split(",") if n.strip()]
            for name in names:
                _dtype(name)
            dtypes = frozenset(names) if dtypes is None else dtypes & frozenset(names)
        elif m["cmp"] == ">=":
            low = max(low, int(m["n"]))
        else:
            high = int(m["n"]) if high is None else min(high, int(m["n"]))
    if high is not None and high <= low:
        raise SizeRuleError(f"{condition!r} matches no call (numel >= {low} and numel < {high})")
    return SizeRule(dtypes, low, high)


def compile_rules(rules: Iterable[SizeRule]) -> Mapping[torch.dtype | None, tuple[tuple[int, int], ...]]:
    """The rules as ``dtype -> ((low, high), ...)`` ranges for the kernel's per-call check; ``None`` holds the
    ranges of rules for every dtype."""
    table: dict[torch.dtype | None, list[tuple[int, int]]] = {}
    for rule in rules:
        span = (rule.min_numel, _UNBOUNDED if rule.max_numel is None else rule.max_numel)
        for key in [None] if rule.dtypes is None else [_dtype(n) for n in sorted(rule.dtypes)]:
            table.setdefault(key, []).append(span)
    every = table.get(None, [])
    return {key: tuple(spans + (every if key is not None else [])) for key, spans in table.items()}


def call_size(args: Iterable[Any], kwargs: Mapping[str, Any] | None = None) -> tuple[torch.dtype | None, int]:
    """(the first tensor argument's dtype, the largest tensor argument's element count) of a call."""
    dtype = None
    largest = 0
    for values in (args, kwargs.values() if kwargs else ()):
        for a in values:
            if isinstance(a, _Tensor):
                n = a.numel()
                if dtype is None:
                    dtype = a.dtype
            elif isinstance(a, (list, tuple)) and a and isinstance(a[0], _Tensor):
                n = 0
                for t in a:
                    if isinstance(t, _Tensor):
                        n += t.numel()
                        if dtype is None:
                            dtype = t.dtype
            else:
                continue
            if n > largest:
                largest = n
    return dtype, largest
