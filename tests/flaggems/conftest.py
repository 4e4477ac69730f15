"""Fixtures for the flaggems provider on the host platform: a stand-in flag_gems package, and fresh interpreters.

The stand-in (standin_flag_gems.py) is written as ``flag_gems/__init__.py`` into a temporary folder that
only the subprocesses of these tests see on ``sys.path``; the provider reads it like the real package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="session", autouse=True)
def host_platform() -> None:
    import torch_fl

    if torch_fl.build_config.PLATFORM != "host":
        pytest.skip(f"the stand-in flag_gems computes on CPU kernel views (host platform), not on "
                    f"{torch_fl.build_config.PLATFORM}; tests/gpu/test_flaggems_cuda.py covers cuda")


@pytest.fixture(scope="session")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the stand-in ``flag_gems`` package."""
    root = tmp_path_factory.mktemp("standin")
    (root / "flag_gems").mkdir()
    shutil.copyfile(Path(__file__).with_name("standin_flag_gems.py"), root / "flag_gems" / "__init__.py")
    return root


RunPython = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_flagos(tmp_path: Path, standin: Path) -> RunPython:
    """Runs code in a fresh interpreter (outside the source tree) with the stand-in importable as ``flag_gems``
    (``with_flag_gems=False``: without it) and FLAGOS_* set as given."""

    def run(code: str, env: dict[str, str] | None = None, *, with_flag_gems: bool = True,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_", "PYTHONPATH"))}
        environ.update(env or {})
        if with_flag_gems:
            environ["PYTHONPATH"] = str(standin)
        result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=environ,
                                capture_output=True, text=True, timeout=300)
        if check and result.returncode != 0:
            raise AssertionError(f"subprocess failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    return run
