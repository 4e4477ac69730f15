"""Reading ELF files: what the manifest and the repair stage need to know.

Reading is kept apart from writing (``elf_patch``).  pyelftools seeks to the
dynamic segment and the version sections, so even a 1 GB libtorch is read in
a few kilobytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

__all__ = ["ElfInfo", "dynamic_strings", "is_elf", "read_elf", "version_floor"]

_ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class ElfInfo:
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    #: {needed library: {version names}} from .gnu.version_r, e.g. libc.so.6: GLIBC_2.17
    version_needs: dict[str, frozenset[str]]


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == _ELF_MAGIC
    except OSError:
        return False


def _split(value: str) -> tuple[str, ...]:
    return tuple(p for p in value.split(":") if p)


def read_elf(path: Path) -> ElfInfo:
    """Read the dynamic section and version needs of one ELF file.

    Raises ``ValueError`` when the file is not a readable ELF.
    """
    soname: str | None = None
    needed: list[str] = []
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    needs: dict[str, set[str]] = {}
    try:
        with path.open("rb") as f:
            elf = ELFFile(f)
            for seg in elf.iter_segments():
                if not isinstance(seg, DynamicSegment):
                    continue
                for tag in seg.iter_tags():
                    # pyelftools sets these attributes per tag kind; its stubs do not declare them.
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        needed.append(str(tag.needed))  # type: ignore[attr-defined]
                    elif kind == "DT_SONAME":
                        soname = str(tag.soname)  # type: ignore[attr-defined]
                    elif kind == "DT_RPATH":
                        rpath = _split(str(tag.rpath))  # type: ignore[attr-defined]
                    elif kind == "DT_RUNPATH":
                        runpath = _split(str(tag.runpath))  # type: ignore[attr-defined]
                # The loader uses the first PT_DYNAMIC only.
                break
            for sec in elf.iter_sections():
                if isinstance(sec, GNUVerNeedSection):
                    for verneed, auxes in sec.iter_versions():
                        names = needs.setdefault(str(verneed.name), set())
                        names.update(str(aux.name) for aux in auxes)
    except (ELFError, OSError, AssertionError) as exc:
        raise ValueError(f"{path}: not a readable ELF file ({exc})") from None
    return ElfInfo(soname, tuple(needed), rpath, runpath,
                   {k: frozenset(v) for k, v in needs.items()})


def dynamic_strings(path: Path) -> bytes | None:
    """The dynamic string table (.dynstr): every name the file imports or exports, and its
    DT_NEEDED/SONAME/RPATH strings. None when the file has none.

    Raises ``ValueError`` when the file is not a readable ELF.
    """
    try:
        with path.open("rb") as f:
            sec = ELFFile(f).get_section_by_name(".dynstr")
            return None if sec is None else bytes(sec.data())
    except (ELFError, OSError, AssertionError) as exc:
        raise ValueError(f"{path}: not a readable ELF file ({exc})") from None


_VERSION_RE = re.compile(r"^(GLIBC|GLIBCXX)_([0-9]+(?:\.[0-9]+)*)$")


def version_floor(infos: list[ElfInfo], family: str) -> str | None:
    """Highest ``GLIBC_x``/``GLIBCXX_x`` version any of the files needs."""
    best: tuple[int, ...] | None = None
    for info in infos:
        for names in info.version_needs.values():
            for name in names:
                m = _VERSION_RE.match(name)
                if m and m.group(1) == family:
                    v = tuple(int(p) for p in m.group(2).split("."))
                    if best is None or v > best:
                        best = v
    return ".".join(map(str, best)) if best else None
