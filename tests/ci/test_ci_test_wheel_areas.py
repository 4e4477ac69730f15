"""ci/test PATHS builds the release wheels only for tests that install them."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO

CI_TEST = (REPO / "ci" / "test").read_text(encoding="utf-8")
WHEEL_FIXTURES = {"wheels", "stock_venv", "make_venv", "forked", "host"}  # tests/support/bootstrap_fixtures.py


def wheel_areas() -> list[str]:
    line = re.search(r"^WHEEL_AREAS=\((.*)\)$", CI_TEST, re.MULTILINE)
    assert line, "ci/test has no WHEEL_AREAS=(...) line"
    return line.group(1).split()


def test_every_test_that_reads_the_wheels_lies_in_a_listed_area() -> None:
    tests = REPO / "tests"
    readers = set()
    for path in tests.rglob("*.py"):
        if path.parent.name == "support":
            continue
        text = path.read_text(encoding="utf-8")
        uses = "FLAGOS_TEST_WHEEL_DIR" in text or any(
            {a.arg for a in node.args.args} & WHEEL_FIXTURES
            for node in ast.walk(ast.parse(text)) if isinstance(node, ast.FunctionDef))
        if uses:
            readers.add(path.relative_to(REPO).as_posix())
    assert readers
    outside = sorted(r for r in readers if not any(r.startswith(area) for area in wheel_areas()))
    assert not outside, f"add their folders to WHEEL_AREAS in ci/test: {outside}"


def needs_wheels(*args: str) -> bool:
    """ci/test's own needs_wheels, run on this environment's pytest."""
    function = re.search(r"^needs_wheels\(\) \{\n.*?^\}\n", CI_TEST, re.MULTILINE | re.DOTALL)
    assert function
    areas = f"WHEEL_AREAS=({' '.join(wheel_areas())})\n"
    venv = Path(sys.executable).parent.parent
    script = f"set -euo pipefail\n{areas}{function.group(0)}needs_wheels \"$@\"\n"
    done = subprocess.run(["bash", "-c", script, "ci-test", *args], env={"ROOT": str(REPO), "VENV": str(venv),
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 0


@pytest.mark.skipif(not (Path(sys.executable).parent / "pytest").exists(), reason="needs pytest's script beside python")
@pytest.mark.parametrize(("args", "expected"), [
    ((), True),                                                           # the whole suite
    (("tests/test_docs.py",), False),
    (("-q", "tests/test_docs.py", "tests/preflight/test_schema.py"), True),
    (("tests/test_docs.py", "-k", "no_test_is_called_this"), False),      # nothing selected
    (("tests/test_docs.py", "--no-such-option"), True),                   # pytest refuses: build, let the run say why
])
def test_needs_wheels(args: tuple[str, ...], expected: bool) -> None:
    assert needs_wheels(*args) is expected
