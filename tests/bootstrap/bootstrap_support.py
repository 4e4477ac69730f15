"""What the bootstrap tests share besides fixtures (conftest.py): the source tree, the
bootstrap module loaded from it, a venv with one torch_fl wheel, the installed
torch's file hashes.  A module of its own name: test modules import from it,
never from conftest, which pytest may have bound to another folder's conftest.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


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


def site_packages(env_dir: Path) -> Path:
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
        return site_packages(self.root)

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
