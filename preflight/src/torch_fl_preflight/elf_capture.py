"""Keep, from a wheel member that is being hashed anyway, the parts of an ELF file the loader reads.

GNU ld puts .dynsym, .dynstr, the hash and version tables in the first PT_LOAD segment, at the
front; but .dynamic sits in the writable segment behind .text and .rodata, i.e. near the end of
a large library. One sequential pass keeps the first segment (up to `front_cap`) and the
PT_DYNAMIC range, so a 1 GB library inside a zip is inflated once, for its hash, not twice.

The front is capped (`front_cap`): libtorch_cpu.so links as one 340 MB R+E segment whose
tables fill only its first 8 MB. Tables beyond the cap and before .dynamic are missed; the
caller then streams the member again with `ranges=planned_ranges()` of this pass.

The header, program headers and dynamic entries are decoded by the parser (`elf_reader`), over
the bytes kept so far; a header the parser refuses stops the planning, and the parser reports it
again, with its reason, when `source()` is read.
"""

from __future__ import annotations

from torch_fl_preflight.elf_reader import (
    DT_GNU_HASH,
    DT_HASH,
    DT_STRTAB,
    DT_SYMTAB,
    DT_VERDEF,
    DT_VERNEED,
    DT_VERSYM,
    ELF_MAGIC,
    PT_DYNAMIC,
    PT_LOAD,
    ElfHeader,
    dynamic_entries,
    read_header,
    read_program_headers,
)
from torch_fl_preflight.elf_source import NotCaptured, SparseSource
from torch_fl_preflight.errors import ElfError

#: The tables .dynamic points at that the parser reads.
_TABLES = (DT_STRTAB, DT_SYMTAB, DT_HASH, DT_GNU_HASH, DT_VERSYM, DT_VERNEED, DT_VERDEF)
#: A PT_DYNAMIC larger than this is not kept (real ones are a few kilobytes).
_MAX_DYNAMIC = 16 << 20
#: How far past its start one table is kept, at most.
_MAX_TABLE = 64 << 20


class ElfCapture:
    """A sink for a member's bytes, in order (`feed`), that keeps the loader's parts (`source`)."""

    def __init__(
        self, name: str, size: int, front_cap: int = 32 << 20, ranges: tuple[tuple[int, int], ...] = ()
    ) -> None:
        self.name = name
        self.size = size
        self.front_cap = front_cap
        self._pos = 0
        self._front = bytearray()
        self._front_end: int | None = None  # known once the program headers are in
        self._header: ElfHeader | None = None
        self._dyn: tuple[int, int] | None = None
        self._dyn_buf = bytearray()
        self._dyn_upto = 0
        self._loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
        self._extra: list[tuple[int, int, bytearray]] = [(a, b, bytearray()) for a, b in ranges]
        self._planned_tables = False
        self.is_elf: bool | None = None

    def feed(self, chunk: bytes) -> None:
        start, end = self._pos, self._pos + len(chunk)
        self._pos = end
        if self.is_elf is False:
            return
        if self._front_end is None or start < self._front_end:
            limit = end if self._front_end is None else min(end, self._front_end)
            self._front += chunk[: max(0, limit - start)]
            if self._front_end is None:
                self._plan()
        if self._dyn is not None:
            d0, d1 = self._dyn
            lo, hi = max(start, d0, self._dyn_upto), min(end, d1)
            if lo < hi:
                self._dyn_buf += chunk[lo - start : hi - start]
                self._dyn_upto = hi
            if not self._planned_tables and self._dyn_upto >= d1:
                self._plan_tables(start)  # the current chunk is still at hand
        for r0, r1, buf in self._extra:
            lo, hi = max(start, r0 + len(buf)), min(end, r1)
            if lo < hi:
                buf.extend(chunk[lo - start : hi - start])

    def _plan_tables(self, held_from: int) -> None:
        """With .dynamic in hand, keep the tables it points at that still lie ahead in the stream.

        patchelf, when it grows .dynstr (a longer RPATH), moves .dynstr and the hash table into a
        new PT_LOAD at the end of the file, behind .dynamic; they are captured from here on.
        """
        self._planned_tables = True
        front = len(self._front)
        for start, stop in self.planned_ranges():
            if start >= front and start >= held_from:
                self._extra.append((start, stop, bytearray()))

    def planned_ranges(self) -> tuple[tuple[int, int], ...]:
        """File ranges of every table .dynamic points at (each to the end of its segment, capped)."""
        if self._header is None:
            return ()
        out = []
        for tag, val in dynamic_entries(self._dyn_buf, self._header):
            if tag not in _TABLES:
                continue
            for vaddr, off, filesz in self._loads:
                if vaddr <= val < vaddr + filesz:
                    start = val - vaddr + off
                    out.append((start, min(off + filesz, start + _MAX_TABLE, self.size)))
                    break
        return tuple(out)

    def _stop_planning(self) -> None:
        """Keep what is held: the parser reads the header again from it and says what is wrong."""
        self._front_end = len(self._front)

    def _plan(self) -> None:
        f = self._front
        if len(f) >= 4 and f[:4] != ELF_MAGIC:
            self.is_elf = False
            self._front = bytearray()
            return
        if len(f) < 4:
            return
        self.is_elf = True
        held = SparseSource(self.name, self.size, [(0, f)])
        try:
            header = self._header or read_header(held)
            self._header = header
            if header.table_end > self.front_cap:
                self._stop_planning()  # implausible; read_elf reports it
                return
            phdrs = read_program_headers(held, header)
        except NotCaptured:
            if len(f) >= self.front_cap:
                self._stop_planning()
            return  # the headers are not all in yet
        except ElfError:
            self._stop_planning()
            return
        front_end = header.table_end
        for p in phdrs:
            if p.p_type == PT_LOAD:
                self._loads.append((p.vaddr, p.offset, p.filesz))
                if p.offset == 0:
                    front_end = max(front_end, p.filesz)
            elif p.p_type == PT_DYNAMIC and p.filesz < _MAX_DYNAMIC:  # the last wins, as in read_elf
                self._dyn = (p.offset, p.offset + p.filesz)
        if self._dyn is not None and self._dyn[0] < len(f):  # the dynamic segment already streamed past
            d0, d1 = self._dyn
            self._dyn_buf += f[d0 : min(d1, len(f))]
            self._dyn_upto = min(d1, len(f))
        self._front_end = min(front_end, self.front_cap, self.size)
        del self._front[self._front_end :]

    def source(self) -> SparseSource | None:
        """The bytes kept, for `elf_reader.read_elf`; None when the member is not ELF."""
        if not self.is_elf:
            return None
        ranges: list[tuple[int, bytes | bytearray]] = [(0, self._front)]
        if self._dyn is not None and self._dyn_buf:
            ranges.append((self._dyn[0], self._dyn_buf))
        ranges += [(r0, buf) for r0, _r1, buf in self._extra if buf]
        return SparseSource(self.name, self.size, ranges)
