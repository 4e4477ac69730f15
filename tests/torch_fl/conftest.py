"""Fixtures for the plugin tests: the installed torch_fl, and fresh interpreters."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="session", autouse=True)
def installed_plugin() -> None:
    """The suite tests the installed wheel, never the source tree."""
    import torch_fl

    location = Path(torch_fl.__file__).resolve()
    assert "site-packages" in location.parts, f"torch_fl imported from {location}, not an installation"
    assert torch.flagos.device_count() == 2, "the suite expects FLAGOS_HOST_DEVICES unset (2 devices)"


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGOS_")}
    env.update(extra)
    return env


RunPython = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_python(tmp_path: Path) -> RunPython:
    """Runs code in a fresh interpreter (outside the source tree) with FLAGOS_* set as given."""

    def run(code: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=tmp_path,
            env=_clean_env(env or {}),
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"subprocess failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    return run
