"""The suite's own layout rules."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def test_test_module_basenames_are_unique() -> None:
    # pytest's default import mode imports test modules by basename; two equal
    # basenames in different folders stop the whole collection.
    tests = Path(__file__).resolve().parent
    names = Counter(p.name for p in tests.rglob("test_*.py"))
    assert not [name for name, count in names.items() if count > 1]
