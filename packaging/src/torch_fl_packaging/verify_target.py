"""The target verify proves a wheel against, where the wheel's runtime comes from its requirements.

A cuda-assets wheel carries no CUDA runtime: the nvidia-*/cuda-toolkit packages it requires do, and
pip installs them beside it on the target.  The build runner has stock torch but not those packages,
and needs no GPU.  So verify makes a throw-away target: the build interpreter, plus what of the
wheel's requirements that interpreter does not satisfy, installed by pip itself
(``pip install --prefix``, which resolves against what is already installed, as ``pip install
<wheel>`` would) into the work directory and put on the interpreter's path with PYTHONPATH.
Nothing here re-implements resolution.

The wheels are downloaded once (``pip download``) into a cache outside any checkout,
``${XDG_CACHE_HOME:-~/.cache}/torch_fl/requirements``, from the recipe's index (the one the CUDA
torch wheel, and so the requirements, come from) or the caller's ``--index-url``; with
``--find-links`` and no ``--index-url`` nothing is downloaded (an air-gapped runner).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from torch_fl_preflight.host_checks import unmet_requirements
from torch_fl_preflight.host_env import HostEnv

from .errors import TargetError
from .pip_env import isolated_pip_env

__all__ = ["RequirementsTarget", "TargetSource", "cache_dir", "default_index",
           "make_target"]

#: pip settings kept from the caller's environment: how to reach an index, never which one.

@dataclass(frozen=True)
class TargetSource:
    """Where the requirements' wheels come from."""

    index_url: str | None = None
    """Index to download them from (``--index-url``); None: the recipe's default index."""
    find_links: tuple[str, ...] = ()
    """Directories or URLs of wheels (``--find-links``); alone, they are the only source."""
    default_index: str | None = None
    """The recipe's index (vendor_torch.index, or its index_env when set)."""

    @property
    def index(self) -> str | None:
        if self.find_links and self.index_url is None:
            return None  # the caller named the wheels: never download
        return self.index_url or self.default_index


@dataclass(frozen=True)
class RequirementsTarget:
    """The build interpreter plus the wheel's unmet requirements, installed where pip put them."""

    python: str
    prefix: Path
    site_dirs: tuple[Path, ...]
    installed: tuple[str, ...]
    """The wheel's requirements the interpreter did not satisfy, as pip was asked for them."""
    cache: Path
    cache_bytes: int
    """Size of the wheels in the cache after this run."""
    downloaded: bool
    """Whether pip download had to fill the cache in this run."""

    def environ(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with the target's site directories first on the interpreter's path."""
        paths = [str(p) for p in self.site_dirs]
        if base.get("PYTHONPATH"):
            paths.append(base["PYTHONPATH"])
        return {**base, "PYTHONPATH": os.pathsep.join(paths)}


def cache_dir() -> Path:
    """${XDG_CACHE_HOME:-~/.cache}/torch_fl/requirements: the downloaded wheels, shared by every build."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torch_fl" / "requirements"


def _pip(python: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, env=isolated_pip_env(),
                              check=False)
    except OSError as exc:
        raise TargetError("cannot run pip", python, f"pass --target-python a working interpreter ({exc})") from None


def _last_error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return ([ln for ln in lines if ln.startswith("ERROR")][-1:] or lines[-1:] or ["?"])[0][:300]


def _wheel_bytes(cache: Path) -> int:
    return sum(p.stat().st_size for p in cache.glob("*.whl")) if cache.is_dir() else 0


def make_target(python: str, requires: Sequence[Requirement], host: HostEnv, prefix: Path,
                source: TargetSource, *, cache: Path | None = None,
                progress: Callable[[str], None] = lambda _s: None) -> RequirementsTarget:
    """Install the requirements ``host`` (the interpreter ``python``) does not satisfy into ``prefix``."""
    cache = cache or cache_dir()
    specs = [str(req) for req, _problem in unmet_requirements(host, tuple(requires))]
    if not specs:
        return RequirementsTarget(python, prefix, (), (), cache, _wheel_bytes(cache), False)
    links = [a for link in (str(cache), *source.find_links) for a in ("--find-links", link)]
    install = ["install", "--prefix", str(prefix), "--no-index", *links, "--only-binary", ":all:",
               "--no-compile", "--no-warn-script-location", "--quiet", *specs]
    # Offline first: a cache filled by an earlier build (or the caller's --find-links) is enough.
    progress(f"pip install {len(specs)} requirement(s) into the verify target")
    proc = _pip(python, install)
    downloaded = False
    if proc.returncode != 0:
        if source.index is None:
            raise TargetError("the wheel's requirements are not all in --find-links", _last_error(proc),
                              "add their wheels there, or pass --index-url to download them")
        cache.mkdir(parents=True, exist_ok=True)
        progress(f"pip download {len(specs)} requirement(s) into {cache}")
        # --no-cache-dir: the cache directory is the cache; pip's own would hold every wheel twice.
        down = _pip(python, ["download", "--dest", str(cache), "--index-url", source.index, *links[2:],
                             "--only-binary", ":all:", "--no-cache-dir", "--quiet", *specs])
        if down.returncode != 0:
            raise TargetError("cannot download the wheel's requirements", f"{source.index}: {_last_error(down)}",
                              "pass --index-url or --find-links with their wheels")
        downloaded = True
        proc = _pip(python, install)
        if proc.returncode != 0:
            raise TargetError("pip cannot install the wheel's requirements into the verify target",
                              _last_error(proc), "check the requirements in the recipe's source wheel")
    site_dirs = tuple(sorted(d for d in prefix.glob("lib*/python*/site-packages") if d.is_dir()))
    if not site_dirs:
        raise TargetError("pip installed nothing under the target prefix", prefix,
                          f"run {python} -m pip install --prefix by hand to see why")
    return RequirementsTarget(python, prefix, site_dirs, tuple(specs), cache, _wheel_bytes(cache), downloaded)


def default_index(index: str | None, index_env: str | None) -> str | None:
    """The recipe's index, overridden by its environment variable where that is set."""
    return (os.environ.get(index_env) if index_env else None) or index
