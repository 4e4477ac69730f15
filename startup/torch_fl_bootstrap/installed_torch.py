"""The installed torch, found and checked without importing it (the bundle kinds that ship libtorch pieces)."""

from __future__ import annotations

import os

from torch_fl_bootstrap.errors import BootstrapError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from torch_fl_bootstrap.manifest import Manifest


def find() -> tuple[str, str | None]:
    """(torch package directory, torch.__version__) as installed on sys.path, found without importing it."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise BootstrapError("torch is not installed in this environment; torch_fl needs it: pip install torch")
    torch_dir = os.path.realpath(next(iter(spec.submodule_search_locations)))
    version = None
    try:
        with open(os.path.join(torch_dir, "version.py"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("__version__"):
                    version = line.split("=", 1)[1].strip().split("#")[0].strip().strip("'\"")
                    break
    except OSError:
        pass
    return torch_dir, version


def check_exact(manifest: Manifest, torch_dir: str, version: str | None) -> None:
    """cuda-assets and forked-libtorch bundle libtorch pieces: only the exact torch they came from works."""
    requirement = manifest.torch_requirement.replace(" ", "")
    if not requirement.startswith("torch=="):
        return
    pinned = requirement[len("torch=="):]
    if version is None or version.split("+")[0] != pinned.split("+")[0]:
        raise BootstrapError(
            f"{manifest.label} needs torch=={pinned} exactly (its bundled {manifest.kind} libraries are built for "
            f"that torch), but torch {version or '(unknown version)'} is installed in {torch_dir}; install it: "
            f"pip install torch=={pinned}")


def find_exact(manifest: Manifest) -> tuple[str, str | None]:
    """``find()``, then ``check_exact``: the installed torch a bundle of libtorch pieces can be used with."""
    torch_dir, version = find()
    check_exact(manifest, torch_dir, version)
    return torch_dir, version
