"""Wheels written the way a build backend writes them: METADATA, WHEEL and a RECORD whose rows
hash every member (PEP 376/427), members with a fixed timestamp so equal inputs give equal bytes."""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

PY_TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"
EPOCH = (2020, 1, 1, 0, 0, 0)


def record_hash(data: bytes) -> str:
    """A RECORD row's hash field: `sha256=` and the urlsafe base64 digest without padding."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def record_row(name: str, data: bytes) -> str:
    return f"{name},{record_hash(data)},{len(data)}"


def metadata_text(name: str, version: str, requires: Sequence[str] = (), extra: str = "") -> str:
    """Core metadata: name, version, one Requires-Dist per requirement, then `extra` as given."""
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires) + extra)


def write_wheel(path: Path, files: Mapping[str, bytes | Path], *, name: str = "torch_fl", version: str,
                tag: str, requires: Sequence[str] = (), metadata: str | None = None,
                generator: str = "tests", date_time: tuple[int, int, int, int, int, int] = EPOCH) -> Path:
    """Write the wheel `path` holding `files` (bytes, or a file to read) plus its .dist-info.

    `metadata` replaces the generated METADATA text. ELF members are stored executable.
    """
    dist_info = f"{name}-{version}.dist-info"
    members = {k: (v.read_bytes() if isinstance(v, Path) else v) for k, v in files.items()}
    members[f"{dist_info}/METADATA"] = (metadata if metadata is not None
                                        else metadata_text(name, version, requires)).encode()
    members[f"{dist_info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: {generator}\nRoot-Is-Purelib: false\n"
                                     f"Tag: {tag}\n").encode()
    rows = [record_row(n, d) for n, d in members.items()] + [f"{dist_info}/RECORD,,"]
    members[f"{dist_info}/RECORD"] = ("\n".join(rows) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in members.items():
            info = zipfile.ZipInfo(member, date_time)
            info.external_attr = (0o100755 if data[:4] == b"\x7fELF" else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return path
