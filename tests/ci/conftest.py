"""Fixtures for the release-CI tests: real wheels, a real authenticated pypiserver, the publish command."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from publish_support import PyPIServer, make_wheel

REPO = Path(__file__).resolve().parents[2]
PUBLISH_SRC = REPO / "ci" / "publish" / "src"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


def publish_env(server: PyPIServer | None, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TWINE_", "TORCH_FL_PUBLISH_")) and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    # No keyring lookups from tests: the null backend answers "no password" at once.
    env["PYTHON_KEYRING_BACKEND"] = "keyring.backends.null.Keyring"
    env["NO_PROXY"] = "127.0.0.1,localhost"
    if importlib.util.find_spec("torch_fl_publish") is None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PUBLISH_SRC), env.get("PYTHONPATH")]))
    if server is not None:
        env["TORCH_FL_PUBLISH_USERNAME"] = server.username
        env["TORCH_FL_PUBLISH_PASSWORD"] = server.password
    env.update(extra)
    return env


def run_publish(args: list[str], env: dict[str, str], timeout: float = 120) -> Run:
    done = subprocess.run(
        [sys.executable, "-m", "torch_fl_publish", *args],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def pypi(tmp_path: Path) -> Iterator[PyPIServer]:
    server = PyPIServer(tmp_path / "index")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def wheels(tmp_path: Path) -> list[Path]:
    """The wheels to publish: FLAGOS_TEST_WHEEL_DIR's, if given, else three built here."""
    given = os.environ.get("FLAGOS_TEST_WHEEL_DIR")
    if given:
        found = sorted(Path(given).glob("*.whl"))
        if found:
            return found
    out = tmp_path / "dist"
    return [
        make_wheel(out, version="2.13.0+host", payload_size=300_000),
        make_wheel(out, version="2.13.0+host.forked", payload_size=200_000),
        make_wheel(out, name="torch_fl_demo", version="2.13.0", tag="py3-none-any"),
    ]
