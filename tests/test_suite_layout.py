"""The suite's own layout rules."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path


def test_test_module_basenames_are_unique() -> None:
    # pytest's default import mode imports test modules by basename; two equal
    # basenames in different folders stop the whole collection.
    tests = Path(__file__).resolve().parent
    names = Counter(p.name for p in tests.rglob("test_*.py"))
    assert not [name for name, count in names.items() if count > 1]


def test_no_module_imports_from_conftest() -> None:
    # Several folders have a conftest.py, all imported as `conftest`: an import from it
    # binds whichever folder's was imported first.  Shared helpers live in *_support.py.
    tests = Path(__file__).resolve().parent
    offenders = [str(p.relative_to(tests)) for p in tests.rglob("*.py")
                 if re.search(r"^\s*(from conftest import|import conftest\b)", p.read_text(), re.MULTILINE)]
    assert not offenders
