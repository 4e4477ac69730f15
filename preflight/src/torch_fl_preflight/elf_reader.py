"""Read what the dynamic loader reads from an ELF file, and nothing else: the parser.

The loader needs the ELF header, the program headers, the PT_DYNAMIC segment and the tables it
points at (.dynsym, .dynstr, the hash tables, the symbol-version tables). Linkers place all of
these in the first read-only PT_LOAD segment, i.e. at the front of the file, so reading them never
needs the (possibly gigabyte-sized) rest of a library. Section headers live at the *end* of the
file and are never consulted.

Why our own parser rather than pyelftools: pyelftools wants a seekable stream of the whole file and
walks section headers; a wheel member would have to be inflated completely (about 1 GB for
libtorch_cuda.so) before its section table at the end can be read. Here the bytes come from a
`elf_source.ByteSource` (a memory-mapped file, or the ranges `elf_capture.ElfCapture` kept while a
wheel member streamed past for its hash), and symbol tables are decoded with struct.iter_unpack
in one pass. tests/preflight/test_elf_reader.py checks this reader against pyelftools on real
libraries.

Every offset read from the file is bounds-checked; malformed input raises ElfError, never
struct.error or IndexError. The ELF header is checked the way glibc's loader checks it
(elf/dl-load.c, open_verify) before anything it points at is read, so a corrupt class or
byte-order byte is reported as such instead of being followed into garbage offsets.

One thing, a parser, kept in one file: header, program headers, dynamic section, version tables
and symbols are read in this order, each step bounded by the one before it.
"""

from __future__ import annotations

import array
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from torch_fl_preflight.elf_source import ByteSource, FileSource
from torch_fl_preflight.errors import ElfError

ELF_MAGIC = b"\x7fELF"

EV_CURRENT = 1
ET_EXEC = 2
ET_DYN = 3
#: e_ehsize and e_phentsize of each class (ELF32_Ehdr/Elf64_Ehdr, Elf32_Phdr/Elf64_Phdr).
EHDR_SIZE = {False: 52, True: 64}
PHDR_SIZE = {False: 32, True: 56}

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


def _bad(src: ByteSource, what: str) -> ElfError:
    return ElfError(f"{src.name}: {what}", "the ELF file is corrupt or truncated; rebuild it")


def _bad_header(src: ByteSource, what: str) -> ElfError:
    return ElfError(f"{src.name}: ELF header: {what}", "the ELF file is corrupt; rebuild or re-download it")


@dataclass(frozen=True)
class ElfHeader:
    """The fields of the ELF header the loader uses, checked against each other and the file size."""

    is64: bool
    little_endian: bool
    elf_type: int
    machine: int
    phoff: int
    phentsize: int
    phnum: int

    @property
    def byte_order(self) -> str:
        return "<" if self.little_endian else ">"

    @property
    def word(self) -> str:
        """struct code of an address or size of this class."""
        return "Q" if self.is64 else "I"

    @property
    def table_end(self) -> int:
        """Offset just past the program header table."""
        return self.phoff + self.phnum * self.phentsize


def read_header(src: ByteSource) -> ElfHeader:
    """The ELF header, refused the way glibc's loader refuses it (elf/dl-load.c, open_verify).

    A wrong class byte (a 64-bit library marked 32-bit) shifts every later field: e_ehsize and
    e_phentsize then stop matching the class, and e_version stops being 1 when the byte-order
    byte is wrong. Those are checked here, before any offset from the header is followed.
    """
    head = bytes(src.read(0, 16)) if src.size >= 16 else b""
    if head[:4] != ELF_MAGIC:
        raise ElfError(
            f"{src.name}: not an ELF file (starts with {head[:4]!r})",
            "remove it or replace it with a real shared library",
        )
    ei_class, ei_data, ei_version = head[4], head[5], head[6]
    if ei_class not in (1, 2) or ei_data not in (1, 2):
        raise _bad_header(src, f"unknown ELF class/byte order ({ei_class}/{ei_data})")
    if ei_version != EV_CURRENT:
        raise _bad_header(src, f"identification version {ei_version}, not {EV_CURRENT} (EI_VERSION)")
    is64, le = ei_class == 2, ei_data == 1
    bo = "<" if le else ">"
    fmt = bo + ("HHIQQQIHHH" if is64 else "HHIIIIIHHH")
    if src.size < EHDR_SIZE[is64]:
        raise _bad_header(src, f"the file ({src.size} bytes) is shorter than a {ei_class * 32}-bit ELF header "
                               f"({EHDR_SIZE[is64]} bytes): truncated")
    (e_type, e_machine, e_version, _entry, e_phoff, _shoff, _flags, e_ehsize, e_phentsize, e_phnum) = (
        struct.unpack(fmt, src.read(16, struct.calcsize(fmt))))
    if e_version != EV_CURRENT:
        raise _bad_header(src, f"e_version {e_version:#x}, not {EV_CURRENT}: the byte-order byte (EI_DATA) "
                               f"says {'little' if le else 'big'}-endian and does not match the file")
    if e_ehsize != EHDR_SIZE[is64]:
        raise _bad_header(src, f"e_ehsize {e_ehsize} is not the {EHDR_SIZE[is64]} bytes of a {ei_class * 32}-bit "
                               "header: the class byte (EI_CLASS) does not match the file")
    if e_phnum > MAX_PHNUM:
        raise _bad_header(src, f"implausible program header table ({e_phnum} entries of {e_phentsize} bytes)")
    if e_phnum and e_phentsize != PHDR_SIZE[is64]:
        raise _bad_header(src, f"e_phentsize {e_phentsize} is not the {PHDR_SIZE[is64]} bytes of a "
                               f"{ei_class * 32}-bit program header")
    if e_type in (ET_EXEC, ET_DYN) and not e_phnum:
        raise _bad_header(src, "a loadable object without program headers (e_phnum 0)")
    header = ElfHeader(is64, le, e_type, e_machine, e_phoff, e_phentsize, e_phnum)
    if e_phnum and header.table_end > src.size:
        raise _bad_header(src, f"program header table at offset {e_phoff} (+{e_phnum * e_phentsize} bytes) "
                               f"runs past the end of the file ({src.size} bytes): truncated or corrupt e_phoff")
    return header


@dataclass(frozen=True)
class ProgramHeader:
    p_type: int
    offset: int
    vaddr: int
    filesz: int


def read_program_headers(src: ByteSource, header: ElfHeader) -> tuple[ProgramHeader, ...]:
    """The program header table, in file order."""
    fmt = header.byte_order + ("IIQQQQQQ" if header.is64 else "IIIIIIII")
    raw = src.read(header.phoff, header.phnum * header.phentsize)
    out = []
    for fields in struct.iter_unpack(fmt, raw):
        if header.is64:
            p_type, _pflags, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _align = fields
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _pflags, _align = fields
        out.append(ProgramHeader(p_type, p_offset, p_vaddr, p_filesz))
    return tuple(out)


def dynamic_entries(raw: bytes | bytearray | memoryview, header: ElfHeader) -> list[tuple[int, int]]:
    """(tag, value) pairs of a PT_DYNAMIC segment up to DT_NULL; `raw` may end mid-entry."""
    fmt = header.byte_order + header.word * 2
    size = struct.calcsize(fmt)
    count = min(len(raw) // size, MAX_DYNAMIC_ENTRIES)
    entries: list[tuple[int, int]] = []
    for tag, val in struct.iter_unpack(fmt, raw[: count * size]):
        if tag == DT_NULL:
            break
        # tags are signed in the ABI; the OS-specific ones fit in 32 bits either way
        entries.append((tag & 0xFFFFFFFF if tag >> 32 in (0, 0xFFFFFFFF) else tag, val))
    return entries


class _Reader:
    def __init__(self, src: ByteSource, header: ElfHeader) -> None:
        self.src = src
        self.is64 = header.is64
        self.le = header.little_endian
        self.bo = header.byte_order

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


def read_elf(src: ByteSource, *, symbols: bool = True) -> ElfInfo:
    """Parse the dynamic view of one ELF object. `symbols=False` skips the symbol tables."""
    hdr = read_header(src)
    r = _Reader(src, hdr)
    phdrs = read_program_headers(src, hdr)
    loads = [(p.vaddr, p.offset, p.filesz) for p in phdrs if p.p_type == PT_LOAD]
    if hdr.elf_type in (ET_EXEC, ET_DYN) and not loads:
        raise _bad(src, "no loadable segment (PT_LOAD)")
    dynamic: tuple[int, int] | None = None
    interp_at: tuple[int, int] | None = None
    for p in phdrs:  # the last of each wins, as in glibc's loop over the program headers (dl-load.c)
        if p.p_type == PT_DYNAMIC:
            dynamic = (p.offset, p.filesz)
        elif p.p_type == PT_INTERP:
            interp_at = (p.offset, p.filesz)
    e_type, e_machine = hdr.elf_type, hdr.machine

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
    ent_size = 2 * struct.calcsize(hdr.word)
    count = min(dyn_size // ent_size, MAX_DYNAMIC_ENTRIES)
    entries = dynamic_entries(src.read(dyn_off, count * ent_size), hdr)
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
    for i, ent in enumerate(_iter_syms(raw, fmt, is64=r.is64)):
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


def _iter_syms(raw: bytes | memoryview, fmt: str, *, is64: bool) -> Iterator[tuple[int, int, int, int]]:
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
