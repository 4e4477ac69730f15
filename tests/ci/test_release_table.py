"""ci/release-table: preflight's --markdown-table for the given wheels."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO

TABLE = REPO / "ci" / "release-table"


def run(args: list[str], path: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=path, RELEASE_VENV=os.devnull)
    return subprocess.run([str(TABLE), *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def test_no_wheel_is_usage_exit_2() -> None:
    done = run([], os.environ.get("PATH", ""))
    assert done.returncode == 2 and "no wheel given" in done.stderr


def test_without_preflight_names_the_fix(tmp_path: Path) -> None:
    bash = Path(shutil.which("bash") or "/bin/bash").parent
    path = os.pathsep.join([str(bash), "/usr/bin", "/bin"])
    if any((Path(d) / "torch-fl-preflight").exists() for d in path.split(os.pathsep)):
        pytest.skip("torch-fl-preflight is installed system-wide")
    done = run([str(tmp_path / "x.whl")], path)
    assert done.returncode == 2
    assert "torch-fl-preflight is not installed" in done.stderr and "pip install ./preflight" in done.stderr


def test_passes_the_wheels_to_preflight(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "torch-fl-preflight"
    fake.write_text(f"#!{sys.executable}\nimport sys\nprint('|args|', ' '.join(sys.argv[1:]))\n")
    fake.chmod(0o755)
    done = run(["--release", "a.whl", "b.whl"], f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    assert done.returncode == 0, done.stderr
    recipe_only = subprocess.run([str(REPO / "ci" / "generate-matrix"), "--recipe-only"], capture_output=True,
                                 text=True, timeout=60, check=True).stdout.split()
    assert recipe_only, "the tree has recipe-only platforms"
    listed = " ".join(f"--recipe-only {p}" for p in recipe_only)
    assert done.stdout.strip() == f"|args| --markdown-table --release {listed} --wheel a.whl b.whl"
