"""What a torch build is, read from its files without importing it: version, git version, C++
ABI, CUDA version and the requirements it declares.

Three places hold a torch build: the environment the pipeline runs in (`installed_torch`), a
torch wheel (`read_torch_wheel`) and an installed torch's `torch/lib` directory
(`read_torch_dir`). ELF files are read through `elf_read`.
"""

from __future__ import annotations

import ast
import contextlib
import email.parser
import re
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .elf_read import dynamic_strings
from .errors import ConfigureError

__all__ = ["TorchInfo", "VendorTorch", "base_version", "installed_torch", "read_torch_dir", "read_torch_wheel"]


@dataclass(frozen=True)
class TorchInfo:
    """A torch build: the installed one or a vendor/CUDA one."""

    version: str
    git_version: str | None
    cxx11_abi: bool | None
    cuda: str | None = None


@dataclass(frozen=True)
class VendorTorch:
    """Where bundled libtorch pieces come from (forked-libtorch, cuda-assets)."""

    path: Path
    is_wheel: bool
    info: TorchInfo
    #: Requires-Dist of that torch (cuda-assets derives the runtime requirements).
    requires: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return self.path.name if self.is_wheel else f"torch/lib of torch {self.info.version}"


def _parse_version_py(text: str) -> dict[str, object]:
    """Read the literal assignments of torch/version.py without running it."""
    values: dict[str, object] = {}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return values
    for node in tree.body:
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if isinstance(target, ast.Name):
            with contextlib.suppress(ValueError):
                values[target.id] = ast.literal_eval(value)
    return values


def _cxx11_abi(libc10: Path) -> bool | None:
    """Whether libc10 was built with the C++11 std::string ABI.

    Its exported API takes std::string; with the new ABI those mangle as
    std::__cxx11::basic_string, so the presence of ``St7__cxx11`` in the dynamic
    string table decides it without importing torch.
    """
    try:
        strings = dynamic_strings(libc10)
    except ValueError:
        return None
    return None if strings is None else b"St7__cxx11" in strings


def _torch_from_files(version_py: str, libc10: Path | None) -> TorchInfo:
    v = _parse_version_py(version_py)
    version = v.get("__version__")
    if not isinstance(version, str):
        raise ConfigureError("cannot read torch's version", "torch/version.py", "reinstall torch")
    git = v.get("git_version")
    cuda = v.get("cuda")
    return TorchInfo(version, git if isinstance(git, str) else None,
                     _cxx11_abi(libc10) if libc10 else None, cuda if isinstance(cuda, str) else None)


def installed_torch() -> tuple[TorchInfo, Path]:
    """The torch installed in this interpreter's environment, and its torch/lib."""
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        raise ConfigureError("torch is not installed in the build environment", sys.executable,
                             "pip install torch==<version> first; the build uses no isolation") from None
    root = Path(str(dist.locate_file("torch")))
    version_py = root / "version.py"
    if not version_py.is_file():
        raise ConfigureError("torch installation has no torch/version.py", root, "reinstall torch")
    lib = root / "lib"
    info = _torch_from_files(version_py.read_text(), lib / "libc10.so")
    return info, lib


def base_version(version: str) -> str:
    """``2.13.0`` of ``2.13.0+cpu``."""
    try:
        return Version(version).base_version
    except InvalidVersion:
        raise ConfigureError("not a version", version, "check the torch build") from None


def _requires_from_metadata(text: str) -> tuple[str, ...]:
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    return tuple(msg.get_all("Requires-Dist") or ())


def read_torch_wheel(path: Path) -> VendorTorch:
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            vpy = next((n for n in names if n == "torch/version.py"), None)
            meta = next((n for n in names if re.match(r"^torch-[^/]+\.dist-info/METADATA$", n)), None)
            if vpy is None or meta is None:
                raise ConfigureError("not a torch wheel", path.name, "pass a torch-*.whl or a torch/lib directory")
            info = _torch_from_files(zf.read(vpy).decode(), None)
            requires = _requires_from_metadata(zf.read(meta).decode())
    except (zipfile.BadZipFile, OSError) as exc:
        raise ConfigureError("cannot read the torch wheel", path, f"download it again ({exc})") from None
    return VendorTorch(path, True, info, requires)


def read_torch_dir(lib_dir: Path) -> VendorTorch:
    lib_dir = lib_dir.resolve()
    version_py = lib_dir.parent / "version.py"
    if not version_py.is_file():
        raise ConfigureError("vendor torch directory has no ../version.py", lib_dir,
                             "pass the torch/lib directory of an installed torch, or its wheel")
    info = _torch_from_files(version_py.read_text(), lib_dir / "libc10.so")
    requires: tuple[str, ...] = ()
    for meta in lib_dir.parent.parent.glob("torch-*.dist-info/METADATA"):
        requires = _requires_from_metadata(meta.read_text())
    return VendorTorch(lib_dir, False, info, requires)
