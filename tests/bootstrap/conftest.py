"""Fixtures of the bootstrap tests: the real host and host-forked wheels, each in a fresh stock-torch venv.

The wheels are built once per session by ``torch-fl-build`` (or taken from
``FLAGOS_TEST_WHEEL_DIR``, the directory ``ci/build-wheel`` fills).  One venv
holding only stock torch is made per session and copied per wheel kind
(creating one costs half a minute; a copy of its site-packages is a fresh one
just the same).  ``host-forked`` is a STAND-IN: its "vendor" core libraries are
copies of the stock torch+cpu ones, re-RPATHed as a vendor fork would be.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCAL_VERSION = {"host": "host", "host-forked": "host.forked"}


def load_bootstrap() -> ModuleType:
    """torch_fl/_bootstrap.py from the source tree, without importing torch_fl (whose __init__ imports torch)."""
    name = "_bootstrap_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "torch_fl" / "_bootstrap.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


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


def torch_tree_hashes(site: Path) -> dict[str, str]:
    """sha256 of every file of the installed torch (package, its .dist-info, functorch, torchgen)."""
    out: dict[str, str] = {}
    roots = [site / "torch", site / "functorch", site / "torchgen", *site.glob("torch-*.dist-info")]
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                h = hashlib.sha256()
                with path.open("rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                out[str(path.relative_to(site))] = h.hexdigest()
    return out


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


def _site(env_dir: Path) -> Path:
    return env_dir / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


@dataclass
class Venv:
    """A fresh stock-torch venv with one torch_fl wheel installed."""

    kind: str
    root: Path
    wheel: Path
    cache: Path
    torch_hashes: dict[str, str]

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site(self) -> Path:
        return _site(self.root)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FLAGOS_", "PYTHON", "TORCH_DEVICE_BACKEND_AUTOLOAD", "VIRTUAL_ENV"))}
        env["FLAGOS_CACHE_DIR"] = str(self.cache)
        env.update(extra)
        return env

    def run(self, code: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            check: bool = True, python_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.python), *python_args, "-c", textwrap.dedent(code), *args],
                              capture_output=True, text=True, env=env or self.env(),
                              cwd=cwd or self.root, timeout=600)
        if check and proc.returncode != 0:
            raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}")
        return proc

    def manifest(self) -> dict:
        return json.loads((self.site / "torch_fl" / "compatibility.json").read_text())

    def bundled(self) -> list[Path]:
        m = self.manifest()
        return [self.site / r["path"] for r in m["elf"] if r["origin"] == "bundled"]


def _make_venv(kind: str, wheel: Path, stock: Path, base: Path) -> Venv:
    root = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    shutil.copytree(_site(stock), _site(root), dirs_exist_ok=True, symlinks=True)
    hashes = torch_tree_hashes(_site(root))
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
            made[kind] = _make_venv(kind, wheels[kind], stock_venv, tmp_path_factory.mktemp(f"venv-{kind}"))
        return made[kind]

    return get


@pytest.fixture(scope="session")
def forked(make_venv: Callable[[str], Venv]) -> Venv:
    return make_venv("host-forked")


@pytest.fixture(scope="session")
def host(make_venv: Callable[[str], Venv]) -> Venv:
    return make_venv("host")
