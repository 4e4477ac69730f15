"""Writing the final wheel: streamed, reproducible, compressed in parallel.

Why not ``zipfile``: it compresses one member at a time on one core, and the
cuda-assets payload is dominated by one library of several hundred megabytes.
Here each file is cut into fixed 4 MiB chunks that worker threads deflate
independently (zlib releases the GIL); each chunk is primed with the previous
32 KiB as its dictionary and ends with a sync flush, so the concatenation is one
valid deflate stream (the technique of pigz); chunks that sampling shows to be
incompressible are stored rather than deflated.  Chunk boundaries are fixed, so
the output depends only on the input bytes and ``SOURCE_DATE_EPOCH``: two runs
give byte-identical wheels.  Memory stays bounded by the chunks in flight.

The local header is written first with zero sizes and patched in place once the
member is done (the output is a regular, seekable file).  ZIP64 (APPNOTE 4.5.3)
where the 32-bit fields cannot hold a value: a member whose file is within 64 MiB
of 4 GiB gets the ZIP64 extra field in its local header (the header's size is
fixed before the data is written, so this is decided from the file's size, with
room for deflate's growth on incompressible data); the central directory takes
it for every size or offset past 4 GiB, and the ZIP64 end records come before
the classic one when offsets or the member count outgrow it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import struct
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .errors import WheelWriteError

__all__ = ["CHUNK", "record_line", "write_wheel"]

CHUNK = 4 << 20
_WINDOW = 32 << 10
_LIMIT32 = 0xFFFFFFFF
#: A member whose uncompressed size reaches this gets a ZIP64 local header: deflate's
#: stored blocks add 5 bytes per 64 KiB, so its compressed size may exceed the input's.
_ZIP64_FROM = _LIMIT32 - (64 << 20)


@dataclass
class _Entry:
    name: bytes
    offset: int
    crc: int
    csize: int
    usize: int
    method: int
    dostime: int
    dosdate: int
    mode: int


def _dos_datetime(epoch: int) -> tuple[int, int]:
    t = time.gmtime(max(epoch, 315532800))
    dosdate = ((t.tm_year - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday
    dostime = (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2)
    return dostime, dosdate


#: Sampling a chunk before deflating it: three 32 KiB probes at level 1.  About two
#: thirds of libtorch_cuda.so is compressed CUDA fatbin that deflate cannot shrink
#: (ratio 1.000) but spends as long on as on compressible code; such chunks go into
#: the stream as stored blocks (deflate's own format for incompressible data).
_PROBE = 32 << 10
_INCOMPRESSIBLE = 0.97


def _incompressible(data: bytes) -> bool:
    if len(data) < 4 * _PROBE:
        return False
    spots = (0, len(data) // 2, len(data) - _PROBE)
    raw = sum(len(data[o:o + _PROBE]) for o in spots)
    packed = sum(len(zlib.compress(data[o:o + _PROBE], 1)) for o in spots)
    return packed >= _INCOMPRESSIBLE * raw


def _deflate(data: bytes, dictionary: bytes | None, level: int, *, last: bool) -> bytes:
    if _incompressible(data):
        level = 0
    if dictionary and level > 0:
        c = zlib.compressobj(level, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, dictionary)
    else:
        c = zlib.compressobj(level, zlib.DEFLATED, -15, 9)
    out: bytes = c.compress(data) + c.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)
    return out


def record_line(name: str, digest: bytes, size: int) -> str:
    b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    return f"{name},sha256={b64},{size}"


def _order(names: Iterable[str], dist_info: str) -> list[str]:
    """Package files first, .dist-info last, RECORD at the very end (PEP 427)."""
    record = f"{dist_info}/RECORD"
    rest = sorted(n for n in names if n != record)
    return [n for n in rest if not n.startswith(dist_info + "/")] + \
           [n for n in rest if n.startswith(dist_info + "/")]


class _Writer:
    def __init__(self, out: BinaryIO, level: int, epoch: int, pool: ThreadPoolExecutor, inflight: int) -> None:
        self.out = out
        self.level = level
        self.dostime, self.dosdate = _dos_datetime(epoch)
        self.pool = pool
        self.inflight = inflight
        self.entries: list[_Entry] = []

    def _local_header(self, name: bytes, method: int, *, zip64: bool) -> int:
        offset = self.out.tell()
        extra = struct.pack("<HHQQ", 0x0001, 16, 0, 0) if zip64 else b""
        self.out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if zip64 else 20, 0x0800, method,
                                   self.dostime, self.dosdate, 0, 0, 0, len(name), len(extra)))
        self.out.write(name)
        self.out.write(extra)
        return offset

    def add(self, name: str, chunks: Iterable[bytes], mode: int, digest: bytes | None = None,
            size: int = 0) -> tuple[bytes, int]:
        """Write one member from its chunks; returns (sha256 digest, size).

        ``digest``: the member's sha256 when an earlier stage already computed it
        (the manifest hashes every ELF file); verify re-hashes the written wheel.
        ``size``: the member's expected size, which decides its local header's form.
        """
        bname = name.encode()
        method = 8 if self.level > 0 else 0
        zip64 = size >= _ZIP64_FROM
        offset = self._local_header(bname, method, zip64=zip64)
        start = self.out.tell()
        crc = 0
        usize = 0
        sha = hashlib.sha256()
        pending: deque[Future[bytes]] = deque()
        prev_tail = b""
        it = iter(chunks)
        chunk = next(it, b"")
        while True:
            nxt = next(it, None)
            last = nxt is None
            crc = zlib.crc32(chunk, crc)
            if digest is None:
                sha.update(chunk)
            usize += len(chunk)
            if method == 8:
                pending.append(self.pool.submit(_deflate, chunk, prev_tail, self.level, last=last))
                prev_tail = chunk[-_WINDOW:]
                while len(pending) > self.inflight:
                    self.out.write(pending.popleft().result())
            else:
                self.out.write(chunk)
            if nxt is None:
                break
            chunk = nxt
        while pending:
            self.out.write(pending.popleft().result())
        end = self.out.tell()
        csize = end - start
        if not zip64 and (usize > _LIMIT32 or csize > _LIMIT32):
            raise WheelWriteError("a wheel member grew past 4 GiB while it was written", name,
                                  "the file changed during the build; run it again")
        self.out.seek(offset + 14)
        if zip64:
            self.out.write(struct.pack("<III", crc, _LIMIT32, _LIMIT32))
            self.out.seek(offset + 30 + len(bname) + 4)
            self.out.write(struct.pack("<QQ", usize, csize))
        else:
            self.out.write(struct.pack("<III", crc, csize, usize))
        self.out.seek(end)
        self.entries.append(_Entry(bname, offset, crc, csize, usize, method, self.dostime,
                                   self.dosdate, mode))
        return digest or sha.digest(), usize

    def finish(self) -> None:
        cd_start = self.out.tell()
        for e in self.entries:
            attr = (0o100000 | e.mode) << 16
            # ZIP64 extra field: the values that do not fit, in this order (APPNOTE 4.5.3).
            wide = [v for v in (e.usize, e.csize, e.offset) if v >= _LIMIT32]
            extra = struct.pack(f"<HH{len(wide)}Q", 0x0001, 8 * len(wide), *wide) if wide else b""
            usize, csize, offset = (min(v, _LIMIT32) for v in (e.usize, e.csize, e.offset))
            version = 45 if wide else 20
            self.out.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, (3 << 8) | version, version, 0x0800,
                                       e.method, e.dostime, e.dosdate, e.crc, csize, usize,
                                       len(e.name), len(extra), 0, 0, 0, attr, offset))
            self.out.write(e.name)
            self.out.write(extra)
        cd_size = self.out.tell() - cd_start
        count = len(self.entries)
        if count >= 0xFFFF or cd_start >= _LIMIT32 or cd_size >= _LIMIT32:
            eocd64 = self.out.tell()
            self.out.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, (3 << 8) | 45, 45, 0, 0, count, count,
                                       cd_size, cd_start))
            self.out.write(struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1))
        self.out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(count, 0xFFFF), min(count, 0xFFFF),
                                   min(cd_size, _LIMIT32), min(cd_start, _LIMIT32), 0))


def _file_chunks(path: Path, on_chunk: Callable[[int], None]) -> Iterable[bytes]:
    with path.open("rb") as f:
        while True:
            data = f.read(CHUNK)
            if not data:
                return
            yield data
            on_chunk(len(data))


def write_wheel(root: Path, dist_info: str, dest: Path, *, level: int = 6, epoch: int = 315532800,
                workers: int | None = None, digests: dict[str, str] | None = None,
                progress: Callable[[str, int], None] = lambda _name, _n: None) -> None:
    """Write the tree at ``root`` as a wheel at ``dest``, regenerating RECORD.

    ``progress(member, nbytes)`` is called as each chunk of a member is read.
    """
    names = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()]
    for n in names:
        if (root / n).is_symlink():
            raise WheelWriteError("a symlink cannot go into a wheel", n, "copy the file instead")
    workers = workers or max(1, os.cpu_count() or 1)
    record_name = f"{dist_info}/RECORD"
    lines: list[str] = []
    with ThreadPoolExecutor(max_workers=workers) as pool, dest.open("wb") as out:
        w = _Writer(out, level, epoch, pool, inflight=2 * workers)
        for name in _order(names, dist_info):
            path = root / name
            mode = 0o755 if os.stat(path).st_mode & 0o111 else 0o644
            known = (digests or {}).get(name)
            chunks = _file_chunks(path, functools.partial(progress, name))
            digest, size = w.add(name, chunks, mode, bytes.fromhex(known) if known else None,
                                 size=path.stat().st_size)
            lines.append(record_line(name, digest, size))
        lines.append(f"{record_name},,")
        record = ("\n".join(lines) + "\n").encode()
        w.add(record_name, [record], 0o644)
        w.finish()
