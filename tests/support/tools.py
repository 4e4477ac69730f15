"""External tools a test needs (gcc, patchelf, auditwheel, actionlint, shellcheck, ...).

A developer's machine may lack one: the test is skipped, saying what to install. In CI (the
`CI` environment variable set, as GitHub Actions and .ci/run do) a missing tool is a broken CI
image, so the test fails instead of passing by skipping.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """True where `CI` is set to anything but an explicit no (GitHub Actions sets `CI=true`)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(reason: str) -> NoReturn:
    """Skip the calling test for a missing prerequisite; fail it in CI."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: a missing tool fails the test instead of skipping it)", pytrace=False)
    pytest.skip(reason)


def find_tool(name: str) -> str | None:
    """`name` beside this interpreter (a venv's console scripts) or on PATH."""
    beside = Path(sys.executable).with_name(name)
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def require_tool(name: str, hint: str = "") -> str:
    """The path of tool `name`; skips the test when it is missing, fails it in CI."""
    exe = find_tool(name)
    if exe is None:
        missing(f"{name} is not installed" + (f" ({hint})" if hint else ""))
    return exe
