"""Where the ELF reader's bytes come from: random access to the parts of one file it asks for.

Two sources, one per place a library can be: `FileSource` for a file on disk (memory-mapped, so
only the pages read are touched) and `SparseSource` for a wheel member, holding the byte ranges
`elf_capture.ElfCapture` kept while the member streamed past for its RECORD hash. A read outside
those ranges raises `NotCaptured`, which tells the caller to stream the member once more.
"""

from __future__ import annotations

import mmap
import os
from typing import Protocol

from torch_fl_preflight.errors import ElfError


class ByteSource(Protocol):
    """Random access to one file of `size` bytes."""

    name: str
    size: int

    def read(self, offset: int, length: int) -> bytes | memoryview: ...


def _past_end(name: str, offset: int, length: int, size: int) -> ElfError:
    return ElfError(
        f"{name}: read of {length} bytes at offset {offset} past the end ({size} bytes)",
        "the file is truncated or corrupt; rebuild or re-download it",
    )


class FileSource:
    """A file on disk, memory-mapped so that only the pages we touch are read."""

    def __init__(self, path: str) -> None:
        self.name = path
        with open(path, "rb") as fh:
            self.size = os.fstat(fh.fileno()).st_size
            self._map: mmap.mmap | None = (
                mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None
            )

    def read(self, offset: int, length: int) -> bytes | memoryview:
        if offset < 0 or length < 0 or offset + length > self.size or self._map is None:
            raise _past_end(self.name, offset, length, self.size)
        return memoryview(self._map)[offset : offset + length]


class NotCaptured(Exception):  # noqa: N818 - a signal to stream the member again, not an error
    """A read outside the ranges a capture kept; the caller streams the member again for them."""


class SparseSource:
    """Byte ranges of a file of `size` bytes, kept while it streamed past (see ElfCapture)."""

    def __init__(self, name: str, size: int, ranges: list[tuple[int, bytes | bytearray]]) -> None:
        self.name = name
        self.size = size
        self._ranges = ranges
        self.bytes_read = sum(len(b) for _, b in ranges)

    def read(self, offset: int, length: int) -> bytes | memoryview:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise _past_end(self.name, offset, length, self.size)
        for start, data in self._ranges:
            if start <= offset and offset + length <= start + len(data):
                return memoryview(data)[offset - start : offset - start + length]
        raise NotCaptured(offset, length)
