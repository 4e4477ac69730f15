"""Real ELF fixtures: small C shared libraries compiled with gcc, and their dynamic section read
back with pyelftools (a reader independent of the project's own, so tests never check a reader
against itself)."""

from __future__ import annotations

import io
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile

from support.tools import require_tool


def compile_c(out: Path, source: str, *, soname: str | None = None, libs: Sequence[str] = (),
              libdirs: Sequence[Path] = (), rpath: Sequence[str] = (), new_dtags: bool | None = True,
              as_needed: bool | None = None, version_script: str | None = None, opt: str = "-O0",
              extra: Sequence[str] = ()) -> Path:
    """Compile `source` into the shared library `out`.

    `libs` are linked by file name (`-l:libx.so.1`) from `libdirs`; `rpath` entries go into one
    DT_RUNPATH (`new_dtags=True`), one DT_RPATH (`False`) or whatever the linker defaults to (`None`).
    `as_needed=False` records every library in `libs` as DT_NEEDED, used or not (distributions
    differ in the linker's default, so a fixture that needs the entry says so).
    """
    gcc = require_tool("gcc", "apt-get install gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(out.suffix + ".c")
    src.write_text(source)
    cmd = [gcc, "-shared", "-fPIC", opt, "-o", str(out), str(src)]
    if soname:
        cmd.append(f"-Wl,-soname,{soname}")
    if as_needed is not None:
        cmd.append("-Wl,--as-needed" if as_needed else "-Wl,--no-as-needed")
    cmd += [f"-L{d}" for d in libdirs]
    cmd += [f"-l:{lib}" for lib in libs]
    if rpath:
        cmd.append("-Wl,-rpath," + ":".join(rpath))
        if new_dtags is not None:
            cmd.append("-Wl,--enable-new-dtags" if new_dtags else "-Wl,--disable-new-dtags")
    if version_script:
        vs = out.with_suffix(".map")
        vs.write_text(version_script)
        cmd.append(f"-Wl,--version-script={vs}")
    cmd += list(extra)
    subprocess.run(cmd, check=True, capture_output=True)
    return out


@dataclass(frozen=True)
class Dynamic:
    """An ELF file's dynamic section as pyelftools reads it; path lists split on ':'."""

    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]

    def record_fields(self) -> dict[str, object]:
        """The soname/needed/rpath/runpath fields of a compatibility.json ELF record."""
        return {"soname": self.soname, "needed": list(self.needed), "rpath": list(self.rpath),
                "runpath": list(self.runpath)}


def dynamic_of(elf: ELFFile) -> Dynamic:
    soname: str | None = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    for seg in elf.iter_segments():
        if seg.header.p_type != "PT_DYNAMIC":
            continue
        for tag in seg.iter_tags():
            kind = tag.entry.d_tag
            if kind == "DT_SONAME":
                soname = tag.soname
            elif kind == "DT_NEEDED":
                needed.append(tag.needed)
            elif kind == "DT_RPATH":
                rpath += [p for p in tag.rpath.split(":") if p]
            elif kind == "DT_RUNPATH":
                runpath += [p for p in tag.runpath.split(":") if p]
    return Dynamic(soname, tuple(needed), tuple(rpath), tuple(runpath))


def read_dynamic(source: Path | bytes) -> Dynamic:
    """The dynamic section of an ELF file on disk or in memory (pyelftools reads only what it needs)."""
    if isinstance(source, bytes):
        return dynamic_of(ELFFile(io.BytesIO(source)))
    with open(source, "rb") as fh:
        return dynamic_of(ELFFile(fh))
