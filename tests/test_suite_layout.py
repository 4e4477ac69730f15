"""The suite's own layout rules."""

from __future__ import annotations

import re
import subprocess
import sys
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


def test_shards_split_the_selection_into_disjoint_parts(tmp_path: Path) -> None:
    tests = Path(__file__).resolve().parent

    def collected(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               "--rootdir", str(tests.parent), str(tests / "test_suite_layout.py"), *args],
                              capture_output=True, text=True, cwd=tmp_path, timeout=120)

    def ids(done: subprocess.CompletedProcess[str]) -> list[str]:
        return [line for line in done.stdout.splitlines() if "::" in line]

    everything = ids(collected())
    parts = [ids(collected("--shard", f"{k}/3")) for k in range(3)]
    assert len(everything) > 3 and all(parts)
    assert sorted(sum(parts, [])) == sorted(everything)
    bad = collected("--shard", "3/3")
    assert bad.returncode == 4 and "give K/N with 0 <= K < N" in bad.stderr
