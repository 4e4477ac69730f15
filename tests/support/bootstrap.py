"""What the bootstrap tests share besides fixtures (bootstrap_fixtures.py): the bootstrap package imported
from the source tree, a venv with one torch_fl wheel, the installed torch's file hashes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from support.paths import REPO

__all__ = ["REPO", "Venv", "load_bootstrap", "site_packages", "torch_tree_hashes"]

#: Where the bootstrap package's source lives (the wheel installs it at the top level).
BOOTSTRAP_SOURCE = REPO / "startup"


def load_bootstrap() -> ModuleType:
    """The ``torch_fl_bootstrap`` package of the source tree, imported normally (it never imports torch).

    The source tree's copy, not the one the test environment has installed with
    torch_fl: the tests are about the code in this checkout.
    """
    if str(BOOTSTRAP_SOURCE) not in sys.path:
        sys.path.insert(0, str(BOOTSTRAP_SOURCE))
    imported = sys.modules.get("torch_fl_bootstrap")
    if imported is not None and not str(imported.__file__).startswith(str(BOOTSTRAP_SOURCE)):
        # An `import torch` earlier in this session autoloaded the installed torch_fl, and with it
        # the installed bootstrap: set that copy aside, it has done its work in this process.
        for name in [n for n in sys.modules if n == "torch_fl_bootstrap" or n.startswith("torch_fl_bootstrap.")]:
            del sys.modules[name]
    import torch_fl_bootstrap

    return torch_fl_bootstrap


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
