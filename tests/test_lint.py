"""The three distributions pass the one ruff and mypy configuration (the root pyproject.toml)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.paths import REPO
from support.tools import require_tool

DISTRIBUTIONS = ("packaging", "preflight", "publish")
SOURCES = [f"{d}/src" for d in DISTRIBUTIONS]
HINT = "pip install -r ci/requirements-test.txt"


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_each_distribution_reads_the_root_configuration(dist: str) -> None:
    # A [tool.ruff] in a distribution's own pyproject.toml would silently win over the root's.
    ruff = require_tool("ruff", HINT)
    module = next((REPO / dist / "src").glob("*/__init__.py"))
    done = run(ruff, "check", "--show-settings", str(module))
    assert done.returncode == 0, done.stderr
    assert f"Settings path: \"{REPO / 'pyproject.toml'}\"" in done.stdout
    assert "[tool.mypy]" not in (REPO / dist / "pyproject.toml").read_text()


def test_ruff_passes() -> None:
    ruff = require_tool("ruff", HINT)
    done = run(ruff, "check", "--no-cache", "--output-format", "concise", *SOURCES)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_passes() -> None:
    mypy = require_tool("mypy", HINT)
    done = run(mypy)  # the packages and the search path come from [tool.mypy]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues found in" in done.stdout


def test_the_configuration_bites(tmp_path: Path) -> None:
    # The same tools and settings must fail a bad module, or the two tests above prove nothing.
    ruff, mypy = require_tool("ruff", HINT), require_tool("mypy", HINT)
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f(x):\n    return x\n")
    config = str(REPO / "pyproject.toml")
    done = run(ruff, "check", "--no-cache", "--config", config, "--output-format", "concise", str(bad), cwd=tmp_path)
    assert done.returncode == 1
    assert "F401" in done.stdout and "ANN001" in done.stdout
    done = run(mypy, "--config-file", config, "--no-incremental", str(bad), cwd=tmp_path)
    assert done.returncode == 1
    assert "Function is missing a type annotation" in done.stdout
