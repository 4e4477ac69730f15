"""The suite's own layout rules."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from support.tools import require_tool


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


def test_the_repository_root_is_defined_once() -> None:
    # Shared helpers live in tests/support/; an area that needs the root imports support.paths.REPO.
    tests = Path(__file__).resolve().parent
    offenders = [str(p.relative_to(tests)) for p in tests.rglob("*.py")
                 if p.parent.name != "support" and re.search(r"^REPO\s*=", p.read_text(), re.MULTILINE)]
    assert not offenders


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception),
                                             ("false", pytest.skip.Exception)])
def test_a_missing_tool_fails_in_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch, ci: str,
                                                        outcome: type[BaseException]) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="no-such-tool-for-the-suite is not installed"):
        require_tool("no-such-tool-for-the-suite")
    assert require_tool("sh")  # a present tool is returned whatever CI says
