"""Stage 3, bundle: unpack the built wheel, copy in the recipe's libraries, set RPATHs.

Files are streamed (zip member -> file, 1 MiB at a time), never loaded whole: the
cuda-assets payload is over half a gigabyte.  Every ELF edit goes through one
``ElfPatcher`` so each file is rewritten by patchelf exactly once.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import shutil
import stat
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .build import BuiltWheel
from .configure import Config
from .elf_patch import ElfPatcher
from .elf_read import ElfInfo, is_elf, read_elf
from .errors import BundleError

__all__ = ["SOURCE_LIB_DIR", "Origin", "Staged", "bundle", "unpack_wheel"]

_CHUNK = 1 << 20
#: Where torch's libraries sit in a torch wheel and below site-packages.
SOURCE_LIB_DIR = "torch/lib"


@dataclass(frozen=True)
class Origin:
    origin: str  # built | bundled | grafted
    source: str | None = None


@dataclass
class Staged:
    """The unpacked wheel being assembled, and where each ELF file came from."""

    root: Path
    dist_info: str
    origins: dict[str, Origin] = field(default_factory=dict)
    bundled: list[str] = field(default_factory=list)
    plugin: list[str] = field(default_factory=list)

    def path(self, rel: str) -> Path:
        return self.root / rel


def _safe_member(name: str) -> str:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or "\\" in name or not name:
        raise BundleError("unsafe member in the built wheel", name, "rebuild the wheel")
    return str(p)


def unpack_wheel(wheel: Path, dest: Path) -> str:
    """Extract ``wheel`` into ``dest`` (streaming); returns the .dist-info dir name."""
    dist_infos: set[str] = set()
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            rel = _safe_member(info.filename)
            top = rel.split("/", 1)[0]
            if top.endswith(".dist-info"):
                dist_infos.add(top)
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst, _CHUNK)
            mode = (info.external_attr >> 16) & 0o777
            os.chmod(target, 0o755 if mode & 0o111 else 0o644)
    if len(dist_infos) != 1:
        raise BundleError("the built wheel must have exactly one .dist-info", sorted(dist_infos), "rebuild it")
    return dist_infos.pop()


def _rewrite_origin_entry(entry: str, src_dir: str, dst_dir: str) -> str:
    """Re-express a source library's ``$ORIGIN`` entry from its new directory.

    A bare ``$ORIGIN`` stays: it names the libraries shipped beside this one,
    which are bundled beside it again.
    """
    for token in ("$ORIGIN", "${ORIGIN}"):
        if entry == token:
            return entry
        if entry.startswith(token):
            target = posixpath.normpath(posixpath.join(src_dir, entry[len(token):].lstrip("/")))
            rel = posixpath.relpath(target, dst_dir)
            return "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"
    return entry


def _copy_from_vendor(config: Config, name: str, dest: Path) -> str | None:
    """Stream one library out of the vendor torch; returns its source, None if absent."""
    vendor = config.vendor
    assert vendor is not None
    if vendor.is_wheel:
        with zipfile.ZipFile(vendor.path) as zf:
            member = f"{SOURCE_LIB_DIR}/{name}"
            try:
                info = zf.getinfo(member)
            except KeyError:
                return None
            with zf.open(info) as src, dest.open("wb") as dst:
                shutil.copyfileobj(src, dst, _CHUNK)
        os.chmod(dest, 0o755)
        return f"{vendor.path.name}:{member}"
    src_path = vendor.path / name
    if not src_path.is_file():
        return None
    with src_path.open("rb") as src, dest.open("wb") as dst:
        shutil.copyfileobj(src, dst, _CHUNK)
    os.chmod(dest, 0o755)
    return f"{vendor.source}:{name}"


def _library_rpath(config: Config, info: ElfInfo, directory: str) -> list[str]:
    """The recipe's RPATH for a bundled library, or the kept source entries followed by the missing ones.

    Keeping the source's own order means a library whose shipped RPATH already
    holds every wanted entry is left untouched: patchelf loads a file whole to
    rewrite it, and libtorch_cuda.so is ~470 MB.
    """
    spec = config.recipe.bundle
    if not spec.keep_source_rpath:
        return list(spec.rpath)
    kept = [_rewrite_origin_entry(entry, SOURCE_LIB_DIR, directory) for entry in (*info.rpath, *info.runpath)
            if any(fnmatch.fnmatch(entry, pat) for pat in spec.keep_source_rpath)]
    return list(dict.fromkeys([*kept, *spec.rpath]))


def _set_rpath_if_needed(patcher: ElfPatcher, path: Path, info: ElfInfo, entries: list[str]) -> None:
    """Queue an RPATH edit unless the file (whose headers are `info`) already has exactly these entries as DT_RPATH."""
    wanted = tuple(dict.fromkeys(entries))
    if info.runpath or info.rpath != wanted:
        patcher.set_rpath(path, wanted)


def bundle(config: Config, built: BuiltWheel, stage_root: Path, patcher: ElfPatcher,
           progress: Callable[[str], None] = lambda _: None) -> Staged:
    stage_root.mkdir(parents=True, exist_ok=True)
    progress(f"unpacking {built.path.name}")
    staged = Staged(stage_root, unpack_wheel(built.path, stage_root))
    for path in sorted(p for p in stage_root.rglob("*") if p.is_file()):
        rel = path.relative_to(stage_root).as_posix()
        if is_elf(path):
            staged.origins[rel] = Origin("built")
            if rel.startswith("torch_fl/") and "/" not in rel[len("torch_fl/"):] and rel.endswith(".so"):
                staged.plugin.append(rel)
    if not staged.plugin:
        raise BundleError("the built wheel has no plugin extension", "torch_fl/_C*.so",
                          "check the CMake install rules")

    recipe = config.recipe
    spec = recipe.bundle
    if spec.directory:
        target_dir = stage_root / spec.directory
        target_dir.mkdir(parents=True, exist_ok=True)
        wanted = [(n, True) for n in spec.libraries] + [(n, False) for n in spec.optional_libraries]
        copied: dict[str, str | None] = {}
        if spec.source != "build":
            # Inflating from the vendor wheel dominates; zlib releases the GIL, so the
            # libraries stream out side by side (largest first).
            progress(f"bundling {len(wanted)} libraries")
            with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
                futures = {n: pool.submit(_copy_from_vendor, config, n, stage_root / spec.directory / n)
                           for n, _ in wanted}
                copied = {n: f.result() for n, f in futures.items()}
        for name, required in wanted:
            rel = f"{spec.directory}/{name}"
            dest = stage_root / rel
            if spec.source == "build":
                if not dest.is_file():
                    if required:
                        raise BundleError("the built wheel lacks a library the recipe bundles", rel,
                                          "check the CMake install rules for the runtime library")
                    continue
                source = None
            else:
                source = copied[name]
                if source is None:
                    if required:
                        where = config.vendor.source if config.vendor else "?"
                        raise BundleError("the vendor torch lacks a library the recipe bundles",
                                          f"{name} in {where}", "pass the right --vendor-torch")
                    continue
                staged.origins[rel] = Origin("bundled", source)
            if not is_elf(dest):
                raise BundleError("a bundled library is not an ELF file", rel, "check the source")
            staged.bundled.append(rel)
            info = read_elf(dest)
            _set_rpath_if_needed(patcher, dest, info, _library_rpath(config, info, spec.directory))

    if spec.plugin_rpath:
        for rel in staged.plugin:
            current = read_elf(stage_root / rel)
            existing = current.runpath or current.rpath
            # CMake already gives the plugin the recipe's RPATH (cmake_config): then nothing changes.  A
            # plugin built elsewhere (--from-wheel) gets the recipe's entries in front of its own.
            plugin_rpath = list(dict.fromkeys([*spec.plugin_rpath, *existing]))
            _set_rpath_if_needed(patcher, stage_root / rel, current, plugin_rpath)

    progress("setting RPATHs")
    patcher.apply(on_file=lambda p: progress(f"patched {p.name}"))
    for rel in staged.bundled:
        mode = os.stat(stage_root / rel).st_mode
        os.chmod(stage_root / rel, stat.S_IMODE(mode) | 0o755)
    return staged
