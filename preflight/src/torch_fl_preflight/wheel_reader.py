"""Open a wheel without trusting it: every member is vetted before anything is inflated.

Refused up front (WheelError, exit 2): not a zip, duplicate names, names that would escape the
install root (absolute, `..`, backslashes, NUL), symlinks and other non-regular members, and
members whose declared size or compression ratio is implausible (zip bombs). Corrupt data (bad
CRC, truncated streams) is reported when a member is read.
"""

from __future__ import annotations

import hashlib
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO, Protocol

from torch_fl_preflight.errors import WheelError

# A libtorch_cuda.so is about 1.3 GB uncompressed; 8 GiB per member and 16 GiB per wheel leave
# room while refusing absurd declarations before a byte is inflated.
MAX_MEMBER_SIZE = 8 << 30
MAX_TOTAL_SIZE = 16 << 30
# Shared libraries compress 3-6x, text and JSON up to ~20x; a run of zeros deflates ~1000x.
MAX_RATIO = 100
RATIO_FLOOR = 1 << 20  # small members may compress well without being suspicious
HASH_CHUNK = 4 << 20
READ_CHUNK = 1 << 20
PARALLEL_MIN = 1 << 20
_HASHER: list[ThreadPoolExecutor] = []


def _hasher() -> ThreadPoolExecutor:
    if not _HASHER:
        _HASHER.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="preflight-sha256"))
    return _HASHER[0]


class Sink(Protocol):
    def feed(self, chunk: bytes) -> None: ...


@dataclass(frozen=True)
class Member:
    name: str
    size: int
    compressed: int
    crc: int


class WheelArchive:
    """A vetted wheel. Use as a context manager."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
        except FileNotFoundError as exc:
            raise WheelError(f"no such wheel ({path})", "pass the path of an existing .whl file") from exc
        except IsADirectoryError as exc:
            raise WheelError(
                f"{path} is a directory, not a wheel file", f"pass the .whl files in it, e.g. --wheel {path}/*.whl"
            ) from exc
        except (zipfile.BadZipFile, NotImplementedError, OSError, ValueError, EOFError) as exc:
            raise WheelError(
                f"{path} is not a readable zip archive ({exc})",
                "the download or build is truncated or corrupt; fetch or build it again",
            ) from exc
        try:
            self.members = self._vet()
        except WheelError:
            self._zip.close()
            raise

    def __enter__(self) -> WheelArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def _vet(self) -> dict[str, Member]:
        members: dict[str, Member] = {}
        total = 0
        for info in self._zip.infolist():
            name = info.filename
            _check_name(name)
            if name in members:
                raise WheelError(
                    f"duplicate member {name!r}", "rebuild the wheel; a zip must name each file once"
                )
            mode = info.external_attr >> 16
            if info.create_system == 3 and mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                kind = "symlink" if stat.S_ISLNK(mode) else "special file"
                raise WheelError(
                    f"member {name!r} is a {kind}",
                    "wheels must hold regular files only; rebuild without links",
                )
            if info.is_dir():
                continue
            if info.file_size > MAX_MEMBER_SIZE:
                raise WheelError(
                    f"member {name!r} declares {info.file_size} bytes (limit {MAX_MEMBER_SIZE})",
                    "refusing to inflate it; this is not a plausible torch_fl wheel",
                )
            if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
                ratio = info.file_size // max(info.compress_size, 1)
                raise WheelError(
                    f"member {name!r} compresses {ratio}:1 ({info.file_size} bytes)",
                    "refusing to inflate a likely zip bomb; rebuild the wheel",
                )
            total += info.file_size
            if total > MAX_TOTAL_SIZE:
                raise WheelError(
                    f"members declare more than {MAX_TOTAL_SIZE} bytes in total",
                    "refusing to inflate; this is not a plausible torch_fl wheel",
                )
            members[name] = Member(name, info.file_size, info.compress_size, info.CRC)
        return members

    def open(self, name: str) -> IO[bytes]:
        try:
            return self._zip.open(name)
        except (zipfile.BadZipFile, zlib.error, NotImplementedError, OSError) as exc:
            raise WheelError(
                f"cannot open member {name!r} ({exc})", "the wheel is corrupt; rebuild it"
            ) from exc

    def read(self, name: str, limit: int) -> bytes:
        m = self.members.get(name)
        if m is None:
            raise WheelError(f"wheel has no {name}", "rebuild the wheel with torch-fl-build")
        if m.size > limit:
            raise WheelError(
                f"{name} declares {m.size} bytes (limit {limit})",
                "refusing to read it; the file is not plausible",
            )
        with self.open(name) as fh:
            data = _guarded(lambda: fh.read(limit + 1), name)
        if len(data) > limit:
            raise WheelError(f"{name} inflates past {limit} bytes", "the wheel is corrupt; rebuild it")
        return data

    def head(self, name: str, length: int) -> bytes:
        with self.open(name) as fh:
            return _guarded(lambda: fh.read(length), name)

    def digest(self, name: str, sink: Sink | None = None) -> tuple[str, int]:
        """sha256 hex and length of a member, inflated once, in chunks, with its CRC-32 checked.

        `sink.feed` sees every chunk, so other readers (the ELF capture) share this single pass.
        The sha256 and the CRC of a chunk are computed on a helper thread while the next chunk
        inflates: zlib and hashlib release the GIL on large buffers, so on two cores the pass
        costs about the inflate alone (libtorch_cuda.so, 470 MB: inflate ~0.8 s, sha256 ~0.35 s,
        CRC ~0.1 s).
        """
        h = hashlib.sha256()
        crc = 0
        n = 0
        pending: Future[int] | None = None

        def absorb(chunk: bytes, crc: int) -> int:
            h.update(chunk)
            return zlib.crc32(chunk, crc)

        declared = self._zip.getinfo(name).file_size
        for chunk in self._inflate(name):
            if pending is not None:
                crc = pending.result()
            n += len(chunk)
            if n > declared:  # a header that understates the size: stop before inflating the rest
                raise WheelError(
                    f"member {name!r} inflates past its declared {declared} bytes",
                    "refusing a likely zip bomb; the wheel is damaged or hostile",
                )
            pending = _hasher().submit(absorb, chunk, crc) if len(chunk) >= PARALLEL_MIN else None
            if pending is None:
                crc = absorb(chunk, crc)
            if sink is not None:
                sink.feed(chunk)
        if pending is not None:
            crc = pending.result()
        info = self._zip.getinfo(name)
        if n != info.file_size or crc != info.CRC:
            raise WheelError(
                f"member {name!r} is corrupt (Bad CRC-32 or length: {n} bytes, CRC {crc:08x}, "
                f"the zip says {info.file_size} bytes, {info.CRC:08x})",
                "the wheel is damaged; fetch or build it again",
            )
        return h.hexdigest(), n

    def _inflate(self, name: str) -> Iterator[bytes]:
        """The member's data, chunk by chunk, read straight from its local entry.

        zipfile's reader works in small steps and computes the CRC inline; reading the deflate
        stream directly lets the CRC move to the hashing thread. Other compressions go through
        zipfile unchanged.
        """
        info = self._zip.getinfo(name)
        if info.compress_type != zipfile.ZIP_DEFLATED or info.flag_bits & 0x1:
            with self.open(name) as fh:
                while chunk := _guarded(lambda: fh.read(HASH_CHUNK), name):
                    yield chunk
            return
        with open(self.path, "rb") as raw:
            raw.seek(info.header_offset)
            head = raw.read(30)
            if len(head) != 30 or head[:4] != b"PK\x03\x04":
                raise WheelError(
                    f"member {name!r} has no local header at {info.header_offset}",
                    "the wheel is damaged; fetch or build it again",
                )
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            raw.seek(info.header_offset + 30 + name_len + extra_len)
            left = info.compress_size
            d = zlib.decompressobj(-zlib.MAX_WBITS)
            try:
                while left > 0:
                    data = raw.read(min(left, READ_CHUNK))
                    if not data:
                        raise WheelError(
                            f"member {name!r} is truncated", "the wheel is damaged; fetch or build it again"
                        )
                    left -= len(data)
                    out = d.decompress(data, HASH_CHUNK)
                    while out:
                        yield out
                        out = d.decompress(d.unconsumed_tail, HASH_CHUNK) if d.unconsumed_tail else b""
                tail = d.flush()
            except zlib.error as exc:
                raise WheelError(
                    f"member {name!r} cannot be inflated ({exc})",
                    "the wheel is damaged; fetch or build it again",
                ) from exc
            if tail:
                yield tail

    def files(self) -> Iterator[Member]:
        return iter(self.members.values())


def _guarded(fn: Callable[[], bytes], name: str) -> bytes:
    try:
        return fn()
    except zipfile.BadZipFile as exc:
        raise WheelError(
            f"member {name!r} is corrupt ({exc})", "the wheel is damaged; fetch or build it again"
        ) from exc
    except (zlib.error, EOFError, OSError) as exc:
        raise WheelError(
            f"member {name!r} cannot be inflated ({exc})", "the wheel is damaged; fetch or build it again"
        ) from exc


def _check_name(name: str) -> None:
    if not name or "\0" in name or "\\" in name:
        raise WheelError(
            f"member name {name!r} is not a plain relative path",
            "rebuild the wheel; member names use forward slashes only",
        )
    p = PurePosixPath(name)
    if name.startswith("/") or p.is_absolute():
        raise WheelError(
            f"member {name!r} is an absolute path", "refusing a wheel that writes outside its install root"
        )
    if ".." in p.parts:
        raise WheelError(
            f"member {name!r} climbs out with '..'", "refusing a wheel that writes outside its install root"
        )
    if len(name) > 2 and name[1] == ":":
        raise WheelError(
            f"member {name!r} names a drive", "refusing a wheel that writes outside its install root"
        )
