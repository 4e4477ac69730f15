"""The files being checked, wherever they are: inside a wheel, or installed in site-packages.

Both give: the list of files with sizes, their sha256, their first bytes, their ELF view, and the
path each has (or would have) once installed, which is what `$ORIGIN` expands to.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Protocol

from torch_fl_preflight.elf_capture import ElfCapture
from torch_fl_preflight.elf_reader import ElfInfo, is_elf_prefix, read_elf
from torch_fl_preflight.elf_source import FileSource, NotCaptured
from torch_fl_preflight.errors import ElfError, WheelError
from torch_fl_preflight.wheel_reader import Member, WheelArchive

# Wheel install schemes that land in site-packages (PEP 427 .data/<scheme>/ directories).
_SITE_SCHEMES = ("purelib", "platlib")


class Payload(Protocol):
    label: str

    def paths(self) -> list[str]: ...
    def size(self, path: str) -> int: ...
    def head(self, path: str, n: int) -> bytes: ...
    def elf(self, path: str) -> ElfInfo: ...
    def installed_path(self, path: str) -> str | None: ...


def install_relpath(member: str) -> str | None:
    """Where a wheel member lands relative to site-packages, or None outside it (scripts, headers, data)."""
    first, _, rest = member.partition("/")
    if first.endswith(".data"):
        scheme, _, inner = rest.partition("/")
        return inner if scheme in _SITE_SCHEMES and inner else None
    return member


class WheelPayload:
    def __init__(self, whl: WheelArchive, site_dir: str) -> None:
        self.whl = whl
        self.label = whl.path
        self.site_dir = site_dir
        self._elf: dict[str, ElfInfo] = {}

    def paths(self) -> list[str]:
        return list(self.whl.members)

    def size(self, path: str) -> int:
        return self.whl.members[path].size

    def head(self, path: str, n: int) -> bytes:
        return self.whl.head(path, n)

    # MemberScanner: parse each ELF member from the bytes kept while check_record hashed it.
    def start(self, member: Member) -> ElfCapture | None:
        return ElfCapture(f"{self.whl.path}:{member.name}", member.size)

    def finish(self, member: Member, sink: object) -> None:
        if isinstance(sink, ElfCapture) and sink.is_elf:
            self._elf[member.name] = self._parse(member.name, sink, second_pass=True)

    def _scan(self, name: str, ranges: tuple[tuple[int, int], ...] = ()) -> ElfInfo:
        cap = ElfCapture(f"{self.whl.path}:{name}", self.whl.members[name].size, ranges=ranges)
        self.whl.digest(name, cap)
        return self._parse(name, cap, second_pass=not ranges)

    def _parse(self, name: str, cap: ElfCapture, *, second_pass: bool) -> ElfInfo:
        src = cap.source()
        if src is None:
            raise ElfError(f"{name} is not an ELF file", "the wheel is corrupt; rebuild it")
        try:
            return read_elf(src)
        except NotCaptured:
            # Tables outside the kept ranges (beyond the front cap, before .dynamic): one more
            # pass over this member, keeping exactly the ranges .dynamic names. Never a third:
            # what two passes could not reach is not where the loader would find it either.
            planned = cap.planned_ranges()
            if second_pass and planned:
                return self._scan(name, planned)
            raise ElfError(
                f"{self.whl.path}:{name}: its program headers or dynamic tables lie outside its loadable segments",
                "the library is malformed; rebuild it",
            ) from None

    def elf(self, path: str) -> ElfInfo:
        if path not in self._elf:
            self._elf[path] = self._scan(path)
        return self._elf[path]

    def installed_path(self, path: str) -> str | None:
        rel = install_relpath(path)
        return os.path.normpath(os.path.join(self.site_dir, rel)) if rel is not None else None


class InstalledPayload:
    """An installed distribution: the files its RECORD lists, under its site-packages directory."""

    def __init__(self, site_dir: str, files: list[str], label: str) -> None:
        self.site_dir = site_dir
        self.label = label
        self._files = [f for f in files if install_relpath(f) is not None and not f.startswith("../")]
        self._elf: dict[str, ElfInfo] = {}

    def _abs(self, path: str) -> str:
        return os.path.join(self.site_dir, path)

    def paths(self) -> list[str]:
        return [f for f in self._files if os.path.isfile(self._abs(f))]

    def size(self, path: str) -> int:
        return os.path.getsize(self._abs(path))

    def head(self, path: str, n: int) -> bytes:
        try:
            with open(self._abs(path), "rb") as fh:
                return fh.read(n)
        except OSError as exc:
            raise WheelError(
                f"cannot read installed file {path} ({exc.strerror})", "reinstall torch_fl"
            ) from exc

    def digest(self, path: str) -> str:
        h = hashlib.sha256()
        with open(self._abs(path), "rb") as fh:
            for chunk in iter(lambda: fh.read(4 << 20), b""):
                h.update(chunk)
        return h.hexdigest()

    def elf(self, path: str) -> ElfInfo:
        if path not in self._elf:
            try:
                src = FileSource(self._abs(path))
            except OSError as exc:
                raise ElfError(f"cannot read {path} ({exc.strerror})", "reinstall torch_fl") from exc
            self._elf[path] = read_elf(src)
        return self._elf[path]

    def installed_path(self, path: str) -> str | None:
        return os.path.normpath(self._abs(path))


@dataclass(frozen=True)
class ElfMember:
    path: str  # wheel member / RECORD path
    installed: str  # absolute path after installation
    info: ElfInfo


def elf_members(payload: Payload) -> list[ElfMember]:
    """Every ELF file of the payload (by magic number, not by name), parsed."""
    out: list[ElfMember] = []
    for p in payload.paths():
        if payload.size(p) < 4 or not is_elf_prefix(payload.head(p, 4)):
            if p.endswith(".so") or ".so." in os.path.basename(p):
                raise ElfError(
                    f"{p} is named like a shared library but is not ELF", "the wheel is corrupt; rebuild it"
                )
            continue
        installed = payload.installed_path(p)
        if installed is None:
            continue
        out.append(ElfMember(p, installed, payload.elf(p)))
    return out
