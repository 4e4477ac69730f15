"""Helpers of the pipeline tests (imported by name: a `conftest` import would
resolve to whichever of the suite's conftest modules was loaded last)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from support.paths import REPO
from torch_fl_packaging.torch_info import installed_torch

BUNDLERS = REPO / "bundlers"
SDK_VERSION = {"metax": "3.8.1", "dcu": "26.04", "ppu": "1.5.2", "ascend": "8.2.0", "gcu": "3.4.5",
               "musa": "4.2.0", "tsingmicro": "2.1.0", "kunlunxin": "5.0.21", "bpu": "3.2.1"}


def torch_base() -> str:
    from packaging.version import Version

    return Version(installed_torch()[0].version).base_version


def build_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict:
        return json.loads(self.stdout)


def run_build(args: list[str], *, env: dict[str, str] | None = None, cwd: Path = REPO) -> Result:
    """Run torch-fl-build as a user would: a subprocess of this environment."""
    exe = shutil.which("torch-fl-build", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "torch_fl_packaging.main"]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env or build_env(), cwd=cwd,
                          timeout=900)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def checkout_copy(dest: Path) -> Path:
    """The files git tracks or would track (untracked, not ignored), copied to `dest`: another checkout."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest
