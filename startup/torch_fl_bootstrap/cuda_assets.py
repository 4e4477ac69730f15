"""``cuda-assets``: load the bundled CUDA pieces of libtorch, and what they need, before torch loads.

What they need from outside the wheel comes first: torch's own libraries from
the installed ``torch/lib`` (the pieces keep the CUDA torch wheel's RPATH, which
looks for them beside themselves) and the CUDA runtime from the installed
``nvidia``/``cuda-toolkit`` packages (``nvidia/<component>/lib`` of CUDA 12,
``nvidia/cu13/lib`` of CUDA 13).  Then the bundled libraries, ``RTLD_GLOBAL``,
dependencies first (ordered from the manifest's DT_NEEDED records).  PyTorch
caches its CUDA hooks when its libraries initialise, so ``libtorch_cuda.so``
must be in the process before ``torch/_C`` is.
"""

from __future__ import annotations

import os
import sys

from torch_fl_bootstrap import installed_torch
from torch_fl_bootstrap.errors import BootstrapError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from torch_fl_bootstrap.manifest import Library, Manifest

#: The NVIDIA driver's SONAMEs: the target system provides them, never a wheel.
_DRIVER = ("libcuda.so.1", "libcuda.so")
#: Loaded before torch or PyTorch keeps its stub CUDA hooks.
_CUDA_CORE = ("libtorch_cuda.so", "libc10_cuda.so")


def load_order(records: list[Library]) -> list[Library]:
    """Bundled records, every library after the bundled libraries it needs (DT_NEEDED), else in manifest order."""
    by_name = {rec.name: rec for rec in records}
    ordered: list[Library] = []
    state: dict[str, int] = {}  # 1: visiting, 2: placed

    def visit(rec: Library) -> None:
        if state.get(rec.name):
            return  # placed, or a cycle (the loader resolves those itself)
        state[rec.name] = 1
        for dep in rec.needed:
            if dep in by_name:
                visit(by_name[dep])
        state[rec.name] = 2
        ordered.append(rec)

    for rec in records:
        visit(rec)
    return ordered


def _nvidia_lib_dirs(pkg: str, torch_dir: str | None) -> list[str]:
    """Library directories of the installed nvidia/cuda-toolkit packages, this installation's first."""
    roots = [os.path.dirname(pkg)]
    if torch_dir:
        roots.append(os.path.dirname(torch_dir))
    roots += [p for p in sys.path if p]
    dirs: list[str] = []
    seen: set[str] = set()
    for root in roots:
        nvidia = os.path.join(root, "nvidia")
        real = os.path.realpath(nvidia)
        if real in seen or not os.path.isdir(nvidia):
            continue
        seen.add(real)
        # CUDA 13: nvidia/cu13/lib holds the whole toolkit; CUDA 12: nvidia/<component>/lib.
        for comp in sorted(os.listdir(nvidia)):
            lib = os.path.join(nvidia, comp, "lib")
            if os.path.isdir(lib):
                dirs.append(lib)
    return dirs


def missing_dependency(message: str) -> str | None:
    """The library a failed dlopen could not find, read from dlerror()'s message; None for other failures."""
    # dlerror(): "<name>: cannot open shared object file: No such file or directory"
    head, sep, _ = message.partition(": cannot open shared object file")
    return os.path.basename(head.strip()) if sep else None


class _NeedsDriverError(Exception):
    """A library (or one it needs) links the NVIDIA driver, which is not installed."""


def preload(pkg: str, manifest: Manifest) -> None:
    """Load the bundled CUDA libraries and their outside dependencies ``RTLD_GLOBAL``; raises BootstrapError."""
    import contextlib
    import ctypes

    torch_dir, _ = installed_torch.find_exact(manifest)
    bundled = manifest.bundled_files(pkg)
    index: dict[str, str] = {}
    # torch's own libraries first: the bundled CUDA libraries keep the CUDA torch wheel's
    # RPATH, which finds libc10.so and libtorch_cpu.so only next to them, so they are
    # loaded from the installed torch/lib before the libraries that need them.
    for d in (os.path.join(torch_dir, "lib"), *_nvidia_lib_dirs(pkg, torch_dir)):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            if ".so" in name:
                index.setdefault(name, os.path.join(d, name))
    loaded: dict[str, Any] = {}

    def load(path: str, depth: int = 0) -> None:
        # A library whose dependency sits in another package's directory (CUDA 12:
        # cusparse needs nvjitlink, without an RPATH to it) fails to load; load
        # that dependency from the nvidia packages first, then retry.
        while True:
            try:
                loaded[path] = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                missing = missing_dependency(str(exc))
                if missing in _DRIVER:
                    raise _NeedsDriverError(path) from None
                if depth < 16 and missing and missing in index and index[missing] not in loaded:
                    load(index[missing], depth + 1)
                    continue
                reqs = ", ".join(r for r in manifest.requirements if not r.startswith("torch"))
                raise BootstrapError(
                    f"{manifest.label} cannot load {path}: {exc}. The CUDA runtime comes from the nvidia "
                    f"packages the wheel requires ({reqs or 'see its METADATA'}); install them: "
                    f"pip install torch_fl=={manifest.wheel_version}") from None
            else:
                return

    bundled_names = {rec.soname for rec, _ in bundled}
    for rec, _ in bundled:
        for dep in rec.needed:
            if dep not in bundled_names and dep in index:
                with contextlib.suppress(_NeedsDriverError):  # it links the driver itself: see below
                    load(index[dep])
    paths = {rec.path: path for rec, path in bundled}
    for rec in load_order([rec for rec, _ in bundled]):
        try:
            load(paths[rec.path])
        except _NeedsDriverError:
            # Without a driver PyTorch still imports: it loads the pieces that link the driver
            # (the NVRTC glue) on demand and then reports the driver missing.  The core pair
            # must load now, or the CUDA hooks are the stub ones.
            if os.path.basename(rec.path) in _CUDA_CORE:
                raise BootstrapError(
                    f"{manifest.label} cannot load {paths[rec.path]} without the NVIDIA driver "
                    f"({' or '.join(_DRIVER)} is not installed); install the NVIDIA driver") from None
