"""Read what the dynamic loader reads from an ELF file, and nothing else.

The loader needs the ELF header, the program headers, the PT_DYNAMIC segment and the tables it
points at (.dynsym, .dynstr, the hash tables, the symbol-version tables). Linkers place all of
these in the first read-only PT_LOAD segment, i.e. at the front of the file, so reading them never
needs the (possibly gigabyte-sized) rest of a library. Section headers live at the *end* of the
file and are never consulted.

Why our own parser rather than pyelftools: pyelftools wants a seekable stream of the whole file and
walks section headers; a wheel member would have to be inflated completely (about 1 GB for
libtorch_cuda.so) before its section table at the end can be read. Here a zip member is inflated
only up to the last byte the dynamic tables occupy, and symbol tables are decoded with
struct.iter_unpack in one pass. tests/preflight/test_elf_reader.py checks this reader against
pyelftools on real libraries.

Every offset read from the file is bounds-checked; malformed input raises ElfError, never
struct.error or IndexError.
"""

from __future__ import annotations

import array
import mmap
import os
import struct
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Protocol

from torch_fl_preflight.errors import ElfError

ELF_MAGIC = b"\x7fELF"

PT_LOAD = 1
PT_DYNAMIC = 2
PT_INTERP = 3

DT_NULL = 0
DT_NEEDED = 1
DT_HASH = 4
DT_STRTAB = 5
DT_SYMTAB = 6
DT_STRSZ = 10
DT_SYMENT = 11
DT_SONAME = 14
DT_RPATH = 15
DT_RUNPATH = 29
DT_GNU_HASH = 0x6FFFFEF5
DT_VERSYM = 0x6FFFFFF0
DT_VERDEF = 0x6FFFFFFC
DT_VERDEFNUM = 0x6FFFFFFD
DT_VERNEED = 0x6FFFFFFE
DT_VERNEEDNUM = 0x6FFFFFFF

STB_GLOBAL = 1
STB_WEAK = 2
STB_GNU_UNIQUE = 10
SHN_UNDEF = 0
STV_DEFAULT = 0
STV_PROTECTED = 3
VER_FLG_BASE = 0x1
VER_FLG_WEAK = 0x2
VERSYM_HIDDEN = 0x8000

# Bounds that no real shared library reaches; they keep a hostile header from making us allocate
# or loop without end.
MAX_PHNUM = 4096
MAX_DYNAMIC_ENTRIES = 1 << 16
MAX_SYMBOLS = 1 << 24
MAX_VERSION_ENTRIES = 1 << 16


class ByteSource(Protocol):
    """Random access to the first bytes of one file."""

    name: str
    size: int

    def read(self, offset: int, length: int) -> bytes | memoryview: ...


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
            raise ElfError(
                f"{self.name}: read of {length} bytes at offset {offset} past the end ({self.size} bytes)",
                "the file is truncated or corrupt; rebuild or re-download it",
            )
        return memoryview(self._map)[offset : offset + length]


class StreamPrefixSource:
    """A zip member (or any stream) inflated only as far as the reads need.

    `size` is the member's declared uncompressed size; reads beyond what the stream actually
    yields are reported as truncation.
    """

    CHUNK = 1 << 20

    def __init__(self, name: str, stream: IO[bytes], size: int) -> None:
        self.name = name
        self.size = size
        self._stream = stream
        self._buf = bytearray()
        self._eof = False

    def _fill(self, end: int) -> None:
        while len(self._buf) < end and not self._eof:
            try:
                chunk = self._stream.read(max(self.CHUNK, end - len(self._buf)))
            except (zlib.error, EOFError, OSError) as exc:
                raise ElfError(
                    f"{self.name}: cannot inflate ({exc})", "the wheel is corrupt; rebuild it"
                ) from exc
            if not chunk:
                self._eof = True
            self._buf += chunk

    def read(self, offset: int, length: int) -> bytes | memoryview:
        end = offset + length
        if offset < 0 or length < 0 or end > self.size:
            raise ElfError(
                f"{self.name}: read of {length} bytes at offset {offset} past the end ({self.size} bytes)",
                "the file is truncated or corrupt; rebuild it",
            )
        self._fill(end)
        if end > len(self._buf):
            raise ElfError(
                f"{self.name}: data ends at {len(self._buf)} bytes, before offset {end}",
                "the file is truncated; rebuild it",
            )
        return memoryview(self._buf)[offset:end]

    @property
    def bytes_read(self) -> int:
        return len(self._buf)


@dataclass(frozen=True)
class VersionNeed:
    """One DT_VERNEED entry: versions this object requires from `file` (a DT_NEEDED name)."""

    file: str
    versions: tuple[tuple[str, bool], ...]  # (version name, weak)


@dataclass(frozen=True)
class SymbolRef:
    """An undefined dynamic symbol the loader must bind."""

    name: str
    version: str | None
    version_file: str | None
    weak: bool


@dataclass(frozen=True)
class ElfInfo:
    path: str
    elf_class: int  # 32 or 64
    little_endian: bool
    machine: int
    elf_type: int
    interp: str | None
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    verneed: tuple[VersionNeed, ...]
    verdef: tuple[str, ...]  # version names defined, base (file) name excluded
    undefined: tuple[SymbolRef, ...]
    # defined dynamic symbols: name -> versions (None: unversioned); hidden versions prefixed "!"
    defined: dict[str, tuple[str | None, ...]] = field(repr=False, compare=False)
    bytes_read: int = field(default=0, compare=False)

    @property
    def abi_key(self) -> tuple[int, bool, int]:
        """The loader only accepts a dependency of the same class, byte order and machine."""
        return (self.elf_class, self.little_endian, self.machine)

    def defines(self, name: str, version: str | None) -> bool:
        """Would this object satisfy a reference to `name` (with `version`, or unversioned)?

        Versioned references bind to the exact version, hidden or not (old binaries bind to
        memcpy@GLIBC_2.2.5, which is hidden); unversioned references bind to any non-hidden
        definition (glibc dl-lookup.c, check_match).
        """
        versions = self.defined.get(name)
        if versions is None:
            return False
        if version is None:
            return any(v is None or not v.startswith("!") for v in versions)
        return version in versions or ("!" + version) in versions or None in versions


class _Reader:
    def __init__(self, src: ByteSource) -> None:
        self.src = src
        head = bytes(src.read(0, 16)) if src.size >= 16 else b""
        if head[:4] != ELF_MAGIC:
            raise ElfError(
                f"{src.name}: not an ELF file (starts with {head[:4]!r})",
                "remove it or replace it with a real shared library",
            )
        ei_class, ei_data = head[4], head[5]
        if ei_class not in (1, 2) or ei_data not in (1, 2):
            raise ElfError(
                f"{src.name}: unknown ELF class/byte order ({ei_class}/{ei_data})",
                "the file is corrupt; rebuild it",
            )
        self.is64 = ei_class == 2
        self.le = ei_data == 1
        self.bo = "<" if self.le else ">"
        self.addr = "Q" if self.is64 else "I"

    def unpack(self, fmt: str, offset: int) -> tuple[int, ...]:
        fmt = self.bo + fmt
        return struct.unpack(fmt, self.src.read(offset, struct.calcsize(fmt)))

    def cstr(self, table_off: int, table_size: int, index: int) -> str:
        if index >= table_size:
            raise ElfError(
                f"{self.src.name}: string index {index} outside the string table ({table_size})",
                "the file is corrupt; rebuild it",
            )
        data = self.src.read(table_off, table_size)
        window = 256
        while True:  # names are short; never copy the rest of a multi-megabyte table
            raw = bytes(data[index : index + window])
            end = raw.find(b"\0")
            if end >= 0:
                return raw[:end].decode("utf-8", "surrogateescape")
            if index + window >= table_size:
                raise ElfError(
                    f"{self.src.name}: unterminated string at {index}", "the file is corrupt; rebuild it"
                )
            window *= 4


def _bad(src: ByteSource, what: str) -> ElfError:
    return ElfError(f"{src.name}: {what}", "the ELF file is corrupt or truncated; rebuild it")


def read_elf(src: ByteSource, *, symbols: bool = True) -> ElfInfo:
    """Parse the dynamic view of one ELF object. `symbols=False` skips the symbol tables."""
    r = _Reader(src)
    a = r.addr
    if r.is64:
        (e_type, e_machine, _ver, _entry, e_phoff, _shoff, _flags, _ehsize, e_phentsize, e_phnum) = r.unpack(
            "HHIQQQIHHH", 16
        )
        ph_fmt = "IIQQQQQQ"
    else:
        (e_type, e_machine, _ver, _entry, e_phoff, _shoff, _flags, _ehsize, e_phentsize, e_phnum) = r.unpack(
            "HHIIIIIHHH", 16
        )
        ph_fmt = "IIIIIIII"
    if e_phnum > MAX_PHNUM or (e_phnum and e_phentsize < struct.calcsize(ph_fmt)):
        raise _bad(src, f"implausible program header table ({e_phnum} entries of {e_phentsize} bytes)")

    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    interp_at: tuple[int, int] | None = None
    for i in range(e_phnum):
        fields = r.unpack(ph_fmt, e_phoff + i * e_phentsize)
        if r.is64:
            p_type, _pflags, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _align = fields
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _pflags, _align = fields
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
        elif p_type == PT_INTERP:
            interp_at = (p_offset, p_filesz)

    interp = None
    if interp_at is not None:
        raw = bytes(src.read(interp_at[0], interp_at[1]))
        interp = raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")

    def to_offset(vaddr: int, size: int, what: str) -> int:
        for seg_vaddr, seg_off, seg_size in loads:
            if seg_vaddr <= vaddr and vaddr + size <= seg_vaddr + seg_size:
                off = vaddr - seg_vaddr + seg_off
                if off + size > src.size:
                    break
                return off
        raise _bad(src, f"{what} at address {vaddr:#x} (+{size}) lies outside the file's loaded segments")

    def without_dynamic_strings() -> ElfInfo:
        """An object with no dynamic string table: no SONAME, dependencies, paths or symbols."""
        return ElfInfo(
            src.name, 64 if r.is64 else 32, r.le, e_machine, e_type, interp,
            None, (), (), (), (), (), (), {}, _bytes_read(src),
        )

    if dynamic is None:
        return without_dynamic_strings()

    dyn_off, dyn_size = dynamic
    if dyn_off + dyn_size > src.size:
        raise _bad(
            src, f"dynamic segment at offset {dyn_off} (+{dyn_size}) is outside the file ({src.size} bytes)"
        )
    ent_fmt = r.bo + a + a
    ent_size = struct.calcsize(ent_fmt)
    count = min(dyn_size // ent_size, MAX_DYNAMIC_ENTRIES)
    entries: list[tuple[int, int]] = []
    for tag, val in struct.iter_unpack(ent_fmt, src.read(dyn_off, count * ent_size)):
        if tag == DT_NULL:
            break
        entries.append((tag, val))
    if r.is64:
        # tags are signed in the ABI; the OS-specific ones fit in 32 bits either way
        entries = [(t & 0xFFFFFFFF if t >> 32 in (0, 0xFFFFFFFF) else t, v) for t, v in entries]
    single: dict[int, int] = {}
    for tag, val in entries:
        single.setdefault(tag, val)

    if DT_STRTAB not in single or DT_STRSZ not in single:
        if any(t in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH) for t, _ in entries):
            raise _bad(src, "dynamic section names strings but has no string table")
        return without_dynamic_strings()
    strsz = single[DT_STRSZ]
    if strsz > src.size:
        raise _bad(src, f"string table size {strsz} exceeds the file size {src.size}")
    stroff = to_offset(single[DT_STRTAB], strsz, "dynamic string table")

    def s(idx: int) -> str:
        return r.cstr(stroff, strsz, idx)

    needed = tuple(s(v) for t, v in entries if t == DT_NEEDED)
    soname = s(single[DT_SONAME]) if DT_SONAME in single else None
    rpath = tuple(p for t, v in entries if t == DT_RPATH for p in s(v).split(":") if p)
    runpath = tuple(p for t, v in entries if t == DT_RUNPATH for p in s(v).split(":") if p)

    verneed, vna_names = _read_verneed(r, single, to_offset, s)
    verdef, vd_names = _read_verdef(r, single, to_offset, s)
    undefined: tuple[SymbolRef, ...] = ()
    defined: dict[str, tuple[str | None, ...]] = {}
    if symbols and DT_SYMTAB in single:
        undefined, defined = _read_symbols(r, single, to_offset, stroff, strsz, vna_names, vd_names)
    return ElfInfo(
        src.name,
        64 if r.is64 else 32,
        r.le,
        e_machine,
        e_type,
        interp,
        soname,
        needed,
        rpath,
        runpath,
        verneed,
        verdef,
        undefined,
        defined,
        _bytes_read(src),
    )


def _bytes_read(src: ByteSource) -> int:
    return getattr(src, "bytes_read", 0)


def _read_verneed(
    r: _Reader,
    single: dict[int, int],
    to_offset: _ToOffset,
    s: _Str,
) -> tuple[tuple[VersionNeed, ...], dict[int, tuple[str, str]]]:
    if DT_VERNEED not in single:
        return (), {}
    num = single.get(DT_VERNEEDNUM, 0)
    if num > MAX_VERSION_ENTRIES:
        raise _bad(r.src, f"implausible DT_VERNEEDNUM {num}")
    off = to_offset(single[DT_VERNEED], 16, "version-needed table")
    needs: list[VersionNeed] = []
    names: dict[int, tuple[str, str]] = {}
    seen = 0
    for _ in range(num):
        _vn_version, vn_cnt, vn_file, vn_aux, vn_next = r.unpack("HHIII", off)
        file = s(vn_file)
        versions: list[tuple[str, bool]] = []
        aux = off + vn_aux
        for _ in range(min(vn_cnt, MAX_VERSION_ENTRIES)):
            _hash, vna_flags, vna_other, vna_name, vna_next = r.unpack("IHHII", aux)
            name = s(vna_name)
            versions.append((name, bool(vna_flags & VER_FLG_WEAK)))
            names[vna_other] = (name, file)
            seen += 1
            if seen > MAX_VERSION_ENTRIES:
                raise _bad(r.src, "version-needed entries form a loop")
            if vna_next == 0:
                break
            aux += vna_next
        needs.append(VersionNeed(file, tuple(versions)))
        if vn_next == 0:
            break
        off += vn_next
    return tuple(needs), names


def _read_verdef(
    r: _Reader,
    single: dict[int, int],
    to_offset: _ToOffset,
    s: _Str,
) -> tuple[tuple[str, ...], dict[int, str]]:
    if DT_VERDEF not in single:
        return (), {}
    num = single.get(DT_VERDEFNUM, 0)
    if num > MAX_VERSION_ENTRIES:
        raise _bad(r.src, f"implausible DT_VERDEFNUM {num}")
    off = to_offset(single[DT_VERDEF], 20, "version-definition table")
    defs: list[str] = []
    names: dict[int, str] = {}
    for _ in range(num):
        _vd_version, vd_flags, vd_ndx, vd_cnt, _hash, vd_aux, vd_next = r.unpack("HHHHIII", off)
        if vd_cnt:
            (vda_name, _vda_next) = r.unpack("II", off + vd_aux)
            name = s(vda_name)
            names[vd_ndx] = name
            if not vd_flags & VER_FLG_BASE:
                defs.append(name)
        if vd_next == 0:
            break
        off += vd_next
    return tuple(defs), names


class _ToOffset(Protocol):
    def __call__(self, vaddr: int, size: int, what: str) -> int: ...


class _Str(Protocol):
    def __call__(self, idx: int) -> str: ...


def _symbol_count(r: _Reader, single: dict[int, int], to_offset: _ToOffset) -> int:
    """Number of .dynsym entries, from the hash tables (the section header is not read)."""
    if DT_HASH in single:
        off = to_offset(single[DT_HASH], 8, "SysV hash table")
        _nbucket, nchain = r.unpack("II", off)
        return int(nchain)
    if DT_GNU_HASH in single:
        off = to_offset(single[DT_GNU_HASH], 16, "GNU hash table")
        nbuckets, symoffset, bloom_size, _shift = r.unpack("IIII", off)
        if nbuckets > MAX_SYMBOLS or bloom_size > MAX_SYMBOLS:
            raise _bad(r.src, f"implausible GNU hash table ({nbuckets} buckets)")
        word = 8 if r.is64 else 4
        buckets_off = off + 16 + bloom_size * word
        buckets = array.array("I", bytes(r.src.read(buckets_off, nbuckets * 4)))
        if (sys.byteorder == "little") != r.le:
            buckets.byteswap()
        last = max(buckets, default=0)
        if last < symoffset:
            return int(symoffset)
        chain_off = buckets_off + nbuckets * 4
        idx = last
        while True:
            if idx - symoffset > MAX_SYMBOLS:
                raise _bad(r.src, "GNU hash chain does not terminate")
            (value,) = r.unpack("I", chain_off + (idx - symoffset) * 4)
            if value & 1:
                return int(idx + 1)
            idx += 1
    raise _bad(r.src, "dynamic symbol table without DT_HASH or DT_GNU_HASH")


def _read_symbols(
    r: _Reader,
    single: dict[int, int],
    to_offset: _ToOffset,
    stroff: int,
    strsz: int,
    vna_names: dict[int, tuple[str, str]],
    vd_names: dict[int, str],
) -> tuple[tuple[SymbolRef, ...], dict[str, tuple[str | None, ...]]]:
    count = _symbol_count(r, single, to_offset)
    if count > MAX_SYMBOLS:
        raise _bad(r.src, f"implausible symbol count {count}")
    fmt = r.bo + ("IBBHQQ" if r.is64 else "IIIBBH")
    entsize = struct.calcsize(fmt)
    if single.get(DT_SYMENT, entsize) != entsize:
        raise _bad(r.src, f"unexpected symbol entry size {single[DT_SYMENT]}")
    symoff = to_offset(single[DT_SYMTAB], count * entsize, "dynamic symbol table")
    raw = r.src.read(symoff, count * entsize)
    strtab = bytes(r.src.read(stroff, strsz))
    versym: array.array[int] | None = None
    if DT_VERSYM in single:
        vs_off = to_offset(single[DT_VERSYM], count * 2, "symbol version table")
        versym = array.array("H", bytes(r.src.read(vs_off, count * 2)))
        if (sys.byteorder == "little") != r.le:
            versym.byteswap()

    undefined: list[SymbolRef] = []
    defined: dict[str, list[str | None]] = {}
    find = strtab.find
    for i, ent in enumerate(_iter_syms(raw, fmt, r.is64)):
        st_name, st_info, st_other, st_shndx = ent
        if i == 0 or st_name == 0:
            continue
        bind = st_info >> 4
        if bind not in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE):
            continue
        if st_name >= strsz:
            raise _bad(r.src, f"symbol {i} names string {st_name} outside the string table ({strsz})")
        end = find(b"\0", st_name)
        if end < 0:
            raise _bad(r.src, f"symbol {i} name is unterminated")
        name = strtab[st_name:end].decode("utf-8", "surrogateescape")
        vs = versym[i] if versym is not None else 1
        idx = vs & 0x7FFF
        if st_shndx == SHN_UNDEF:
            ref = vna_names.get(idx) if idx >= 2 else None
            undefined.append(
                SymbolRef(name, ref[0] if ref else None, ref[1] if ref else None, bind == STB_WEAK)
            )
        elif (st_other & 3) in (STV_DEFAULT, STV_PROTECTED):
            # Index 1 is the base (global) version: glibc leaves it out of the names a versioned
            # reference is compared with, so such a reference binds to it as to an unversioned
            # definition (dl-version.c skips VER_FLG_BASE; dl-lookup.c, check_match).
            vname = vd_names.get(idx) if idx >= 2 else None
            if vname is not None and vs & VERSYM_HIDDEN:
                vname = "!" + vname
            defined.setdefault(name, []).append(vname)
    return tuple(undefined), {k: tuple(v) for k, v in defined.items()}


def _iter_syms(raw: bytes | memoryview, fmt: str, is64: bool) -> Iterator[tuple[int, int, int, int]]:
    if is64:
        for st_name, st_info, st_other, st_shndx, _value, _size in struct.iter_unpack(fmt, raw):
            yield st_name, st_info, st_other, st_shndx
    else:
        for st_name, _value, _size, st_info, st_other, st_shndx in struct.iter_unpack(fmt, raw):
            yield st_name, st_info, st_other, st_shndx


def is_elf_prefix(head: bytes) -> bool:
    return head[:4] == ELF_MAGIC


def read_elf_file(path: str, *, symbols: bool = True) -> ElfInfo:
    try:
        src = FileSource(path)
    except OSError as exc:
        raise ElfError(f"cannot read {path} ({exc.strerror})", "check the path and its permissions") from exc
    return read_elf(src, symbols=symbols)


class NotCaptured(Exception):
    """A read outside the ranges a capture kept; the caller falls back to a second, prefix-only pass."""


class SparseSource:
    """Byte ranges of a file kept while it streamed past (see ElfCapture)."""

    def __init__(self, name: str, size: int, ranges: list[tuple[int, bytes | bytearray]]) -> None:
        self.name = name
        self.size = size
        self._ranges = ranges
        self.bytes_read = sum(len(b) for _, b in ranges)

    def read(self, offset: int, length: int) -> bytes | memoryview:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ElfError(
                f"{self.name}: read of {length} bytes at offset {offset} past the end ({self.size} bytes)",
                "the file is truncated or corrupt; rebuild it",
            )
        for start, data in self._ranges:
            if start <= offset and offset + length <= start + len(data):
                return memoryview(data)[offset - start : offset - start + length]
        raise NotCaptured(offset, length)


class ElfCapture:
    """Keep, from a stream that is being hashed anyway, the parts of an ELF file the loader reads.

    GNU ld puts .dynsym, .dynstr, the hash and version tables in the first PT_LOAD segment, at the
    front; but .dynamic sits in the writable segment behind .text and .rodata, i.e. near the end of
    a large library. One sequential pass keeps the first segment (up to `front_cap`) and the
    PT_DYNAMIC range, so a 1 GB library inside a zip is inflated once, for its hash, not twice.

    The front is capped (`front_cap`): libtorch_cpu.so links as one 340 MB R+E segment whose
    tables fill only its first 8 MB. Tables beyond the cap and before .dynamic are missed; the
    caller then streams the member again with `ranges=planned_ranges()` of this pass.
    """

    def __init__(
        self, name: str, size: int, front_cap: int = 32 << 20, ranges: tuple[tuple[int, int], ...] = ()
    ) -> None:
        self.name = name
        self.size = size
        self.front_cap = front_cap
        self._pos = 0
        self._front = bytearray()
        self._front_end: int | None = None  # known once the program headers are in
        self._dyn: tuple[int, int] | None = None
        self._dyn_buf = bytearray()
        self._dyn_upto = 0
        self._loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
        self._extra: list[tuple[int, int, bytearray]] = [(a, b, bytearray()) for a, b in ranges]
        self._planned_tables = False
        self._is64 = True
        self._bo = "<"
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
        fmt = self._bo + ("qQ" if self._is64 else "iI")
        size = struct.calcsize(fmt)
        tables = (DT_STRTAB, DT_SYMTAB, DT_HASH, DT_GNU_HASH, DT_VERSYM, DT_VERNEED, DT_VERDEF)
        out = []
        for i in range(0, len(self._dyn_buf) - size + 1, size):
            tag, val = struct.unpack_from(fmt, self._dyn_buf, i)
            if tag == DT_NULL:
                break
            if tag & 0xFFFFFFFF not in tables:
                continue
            for vaddr, off, filesz in self._loads:
                if vaddr <= val < vaddr + filesz:
                    start = val - vaddr + off
                    out.append((start, min(off + filesz, start + (64 << 20), self.size)))
                    break
        return tuple(out)

    def _plan(self) -> None:
        f = self._front
        if len(f) >= 4 and f[:4] != ELF_MAGIC:
            self.is_elf = False
            self._front = bytearray()
            return
        if len(f) < 64:
            return
        self.is_elf = True
        is64, bo = f[4] == 2, "<" if f[5] == 1 else ">"
        self._is64, self._bo = is64, bo
        try:
            if is64:
                (phoff,) = struct.unpack_from(bo + "Q", f, 32)
                phentsize, phnum = struct.unpack_from(bo + "HH", f, 54)
            else:
                (phoff,) = struct.unpack_from(bo + "I", f, 28)
                phentsize, phnum = struct.unpack_from(bo + "HH", f, 42)
        except struct.error:
            self._front_end = len(f)
            return
        table_end = phoff + phentsize * min(phnum, MAX_PHNUM)
        if table_end > self.front_cap:
            self._front_end = len(f)  # implausible; read_elf reports it
            return
        if len(f) < table_end:
            return
        front_end = table_end
        for i in range(min(phnum, MAX_PHNUM)):
            at = phoff + i * phentsize
            try:
                if is64:
                    p_type, _fl, p_offset, _va, _pa, p_filesz = struct.unpack_from(bo + "IIQQQQ", f, at)
                else:
                    p_type, p_offset, _va, _pa, p_filesz = struct.unpack_from(bo + "IIIII", f, at)
            except struct.error:
                continue
            if p_type == PT_LOAD:
                vaddr = struct.unpack_from(bo + ("Q" if is64 else "I"), f, at + (16 if is64 else 8))[0]
                self._loads.append((vaddr, p_offset, p_filesz))
            if p_type == PT_LOAD and p_offset == 0:
                front_end = max(front_end, p_filesz)
            elif p_type == PT_DYNAMIC and p_filesz < (16 << 20):
                self._dyn = (p_offset, p_offset + p_filesz)
        if self._dyn is not None and self._dyn[0] < len(f):  # the dynamic segment already streamed past
            d0, d1 = self._dyn
            self._dyn_buf += f[d0 : min(d1, len(f))]
            self._dyn_upto = min(d1, len(f))
        self._front_end = min(front_end, self.front_cap, self.size)
        del self._front[self._front_end :]

    def source(self) -> SparseSource | None:
        if not self.is_elf:
            return None
        ranges: list[tuple[int, bytes | bytearray]] = [(0, self._front)]
        if self._dyn is not None and self._dyn_buf:
            ranges.append((self._dyn[0], self._dyn_buf))
        ranges += [(r0, buf) for r0, _r1, buf in self._extra if buf]
        return SparseSource(self.name, self.size, ranges)
