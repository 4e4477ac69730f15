"""Session fixtures of the real host and host-forked wheels, each in a fresh stock-torch venv.

A plugin of the whole suite (tests/conftest.py), so that every area using them (the bootstrap tests, the
compile workers' tests) shares one set of venvs: each holds a copy of torch (about 0.9 GB).

The wheels are built once per session by ``torch-fl-build`` (or taken from
``FLAGOS_TEST_WHEEL_DIR``, the directory ``ci/build-wheel`` fills).  One venv
holding only stock torch is made per session and copied per wheel kind
(creating one costs half a minute; a copy of its site-packages is a fresh one
just the same).  ``host-forked`` is a STAND-IN: its "vendor" core libraries are
copies of the stock torch+cpu ones, re-RPATHed as a vendor fork would be.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.bootstrap import REPO, Venv, site_packages, torch_tree_hashes

LOCAL_VERSION = {"host": "host", "host-forked": "host.forked"}


def _compiler_busy() -> bool:
    return subprocess.run(["pgrep", "-f", "cc1plus|ninja"], capture_output=True).returncode == 0


def _build(platform: str, out: Path) -> None:
    # The machine is shared: never compile alongside another build.
    deadline = time.monotonic() + 900
    while _compiler_busy() and time.monotonic() < deadline:
        time.sleep(5)
    exe = shutil.which("torch-fl-build", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "torch_fl_packaging.main"]
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("SOURCE_DATE_EPOCH", "1700000000")
    proc = subprocess.run([*cmd, "--platform", platform, "--out", str(out)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    given = os.environ.get("FLAGOS_TEST_WHEEL_DIR")
    out = Path(given) if given else tmp_path_factory.mktemp("bootstrap-wheels")
    found: dict[str, Path] = {}
    for platform, local in LOCAL_VERSION.items():
        matches = sorted(out.glob(f"torch_fl-*+{local}-*.whl"))
        if not matches:
            if given:
                pytest.fail(f"FLAGOS_TEST_WHEEL_DIR={given} holds no torch_fl-*+{local}-*.whl")
            _build(platform, out)
            matches = sorted(out.glob(f"torch_fl-*+{local}-*.whl"))
        found[platform] = matches[-1]
    return found


@pytest.fixture(scope="session")
def stock_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding only stock torch (the version of this environment's torch)."""
    from importlib.metadata import version

    torch_version = version("torch").split("+")[0]
    env_dir = tmp_path_factory.mktemp("stock") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--ignore-installed", "--prefix", str(env_dir), f"torch=={torch_version}"], check=True, timeout=900)
    return env_dir


def venv_with_wheel(kind: str, wheel: Path, stock: Path, base: Path) -> Venv:
    """A copy of the stock-torch venv ``stock`` under ``base``, with ``wheel`` installed (no dependencies)."""
    root = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    shutil.copytree(site_packages(stock), site_packages(root), dirs_exist_ok=True, symlinks=True)
    hashes = torch_tree_hashes(site_packages(root))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--ignore-installed", "--prefix", str(root), str(wheel)], check=True, timeout=600)
    cache = base / "cache"
    return Venv(kind, root, wheel, cache, hashes)


@pytest.fixture(scope="session")
def make_venv(wheels: dict[str, Path], stock_venv: Path,
              tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Venv]:
    made: dict[str, Venv] = {}

    def get(kind: str) -> Venv:
        if kind not in made:
            made[kind] = venv_with_wheel(kind, wheels[kind], stock_venv, tmp_path_factory.mktemp(f"venv-{kind}"))
        return made[kind]

    return get


@pytest.fixture(scope="session")
def forked(make_venv: Callable[[str], Venv]) -> Venv:
    return make_venv("host-forked")


@pytest.fixture(scope="session")
def host(make_venv: Callable[[str], Venv]) -> Venv:
    return make_venv("host")
