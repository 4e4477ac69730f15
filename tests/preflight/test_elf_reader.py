"""elf_reader against pyelftools on real libraries, and its refusals on broken ones."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

from torch_fl_preflight import ld_cache
from torch_fl_preflight.elf_capture import ElfCapture
from torch_fl_preflight.elf_reader import read_elf, read_elf_file
from torch_fl_preflight.elf_source import FileSource, NotCaptured
from torch_fl_preflight.errors import ElfError

import _preflight_builders as B
from support.elf import compile_c

pytestmark = pytest.mark.compile


def _system_lib(name: str) -> str:
    paths = ld_cache.system_cache().get(name)
    if not paths:
        pytest.skip(f"{name} not in this host's loader cache")
    return paths[0]


def _oracle(path: str) -> dict[str, object]:
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        dyn = elf.get_section_by_name(".dynamic")
        tags = list(dyn.iter_tags()) if dyn else []
        dynsym = elf.get_section_by_name(".dynsym")
        undefined, defined = set(), set()
        for sym in dynsym.iter_symbols() if dynsym else []:
            # pyelftools names binding 10 (GNU_UNIQUE, used by libstdc++) STB_LOOS
            if not sym.name or sym["st_info"]["bind"] not in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE", "STB_LOOS"):
                continue
            if sym["st_shndx"] == "SHN_UNDEF":
                undefined.add(sym.name)
            elif sym["st_other"]["visibility"] in ("STV_DEFAULT", "STV_PROTECTED"):
                defined.add(sym.name)
        verneed = {}
        for sec in elf.iter_sections():
            if isinstance(sec, GNUVerNeedSection):
                for vn, auxes in sec.iter_versions():
                    verneed[vn.name] = sorted(a.name for a in auxes)
        return {
            "soname": next((t.soname for t in tags if t.entry.d_tag == "DT_SONAME"), None),
            "needed": [t.needed for t in tags if t.entry.d_tag == "DT_NEEDED"],
            "runpath": [p for t in tags if t.entry.d_tag == "DT_RUNPATH" for p in t.runpath.split(":")],
            "rpath": [p for t in tags if t.entry.d_tag == "DT_RPATH" for p in t.rpath.split(":")],
            "undefined": undefined, "defined": defined, "verneed": verneed,
        }


def _compare(path: str) -> None:
    mine = read_elf_file(path)
    ref = _oracle(path)
    assert mine.soname == ref["soname"]
    assert list(mine.needed) == ref["needed"]
    assert list(mine.runpath) == ref["runpath"]
    assert list(mine.rpath) == ref["rpath"]
    assert {s.name for s in mine.undefined} == ref["undefined"]
    assert set(mine.defined) == ref["defined"]
    assert {v.file: sorted(n for n, _ in v.versions) for v in mine.verneed} == ref["verneed"]


def test_matches_pyelftools_on_fixture_libraries(natives: B.Natives) -> None:
    for p in (natives.plugin, natives.runtime, natives.dep, natives.needs_glibcxx99, natives.abs_rpath,
              natives.torch_lib / "libtorch_cpu.so"):
        _compare(str(p))


@pytest.mark.parametrize("name", ["libc.so.6", "libstdc++.so.6", "libm.so.6"])
def test_matches_pyelftools_on_system_libraries(name: str) -> None:
    _compare(_system_lib(name))


def test_symbol_versions_bind_like_the_loader() -> None:
    libc = read_elf_file(_system_lib("libc.so.6"))
    assert "GLIBC_2.2.5" in libc.verdef or "GLIBC_2.17" in libc.verdef
    assert libc.defines("printf", None)
    assert not libc.defines("printf", "GLIBC_9.99")
    assert not libc.defines("fl_no_such_symbol", None)


def test_rpath_and_runpath_are_told_apart(natives: B.Natives, tmp_path: Path) -> None:
    rp = compile_c(tmp_path / "librp.so", "int x(void){return 1;}\n", rpath=["$ORIGIN/a", "/opt/b"], new_dtags=False)
    info = read_elf_file(str(rp))
    assert info.rpath == ("$ORIGIN/a", "/opt/b") and info.runpath == ()
    assert read_elf_file(str(natives.runtime)).runpath == ("$ORIGIN",)


def test_capture_keeps_only_what_the_loader_reads(tmp_path: Path) -> None:
    """A library with 4 MB of data between its tables and .dynamic: one streamed pass keeps the
    first segment and the dynamic segment, a small fraction of the file."""
    big = compile_c(tmp_path / "libbig.so", "static const char pad[4<<20] = {1};\n"
                    "const char *p(void){return pad;}\nint q(void){return 2;}\n", soname="libbig.so")
    data = big.read_bytes()
    cap = ElfCapture("libbig.so", len(data))
    for i in range(0, len(data), 65536):
        cap.feed(data[i : i + 65536])
    src = cap.source()
    assert src is not None
    info = read_elf(src)
    assert info.soname == "libbig.so" and "q" in info.defined
    assert src.bytes_read < len(data) // 8
    ref = read_elf_file(str(big))
    assert (info.needed, info.defined, info.verneed) == (ref.needed, ref.defined, ref.verneed)


def test_capture_of_non_elf_yields_nothing() -> None:
    cap = ElfCapture("x", 10)
    cap.feed(b"# python\n\n")
    assert cap.source() is None


def _patched(src: Path, dst: Path, edit: object) -> str:
    data = bytearray(src.read_bytes())
    edit(data)  # type: ignore[operator]
    dst.write_bytes(bytes(data))
    return str(dst)


def _phdrs(data: bytearray) -> list[tuple[int, int]]:
    """(offset of the program header, p_type) for a 64-bit little-endian ELF."""
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    return [(phoff + i * phentsize, struct.unpack_from("<I", data, phoff + i * phentsize)[0]) for i in range(phnum)]


def _set_dynamic_offset(data: bytearray, value: int) -> None:
    for at, ptype in _phdrs(data):
        if ptype == 2:  # PT_DYNAMIC: p_offset at +8
            struct.pack_into("<Q", data, at + 8, value)


def _set_strtab_addr(data: bytearray, value: int) -> None:
    for at, ptype in _phdrs(data):
        if ptype == 2:
            off, = struct.unpack_from("<Q", data, at + 8)
            size, = struct.unpack_from("<Q", data, at + 32)
            for e in range(off, off + size, 16):
                tag, = struct.unpack_from("<q", data, e)
                if tag == 5:  # DT_STRTAB
                    struct.pack_into("<Q", data, e + 8, value)


@pytest.mark.parametrize(("name", "edit", "match"), [
    ("truncated-header", lambda d: d.__delitem__(slice(40, None)), "past the end|truncated"),
    ("truncated-phdrs", lambda d: d.__delitem__(slice(100, None)), "past the end|truncated"),
    ("dynamic-offset-outside", lambda d: _set_dynamic_offset(d, 1 << 40), "outside the file"),
    ("strtab-outside", lambda d: _set_strtab_addr(d, 1 << 40), "outside the file's loaded segments"),
    ("not-elf", lambda d: d.__setitem__(slice(0, 4), b"MZ\x90\x00"), "not an ELF file"),
    ("bad-class", lambda d: d.__setitem__(4, 7), "unknown ELF class"),
    ("huge-phnum", lambda d: struct.pack_into("<H", d, 56, 0xFFFF), "implausible program header"),
    # Header fields that point everything after them astray: each is named, none is followed.
    ("64-bit-marked-32-bit", lambda d: d.__setitem__(4, 1), "ELF header: e_ehsize .*EI_CLASS"),
    ("little-endian-marked-big", lambda d: d.__setitem__(5, 2), "ELF header: e_version .*EI_DATA"),
    ("ident-version", lambda d: d.__setitem__(6, 0), "ELF header: identification version 0"),
    ("phoff-outside", lambda d: struct.pack_into("<Q", d, 32, 1 << 40), "ELF header: .* past the end .* e_phoff"),
    ("phnum-outside", lambda d: struct.pack_into("<H", d, 56, 4000), "ELF header: .* past the end .* e_phoff"),
    ("phentsize", lambda d: struct.pack_into("<H", d, 54, 32), "ELF header: e_phentsize 32"),
    ("no-phdrs", lambda d: struct.pack_into("<H", d, 56, 0), "ELF header: .* without program headers"),
])
def test_broken_elf_raises_elferror(natives: B.Natives, tmp_path: Path, name: str, edit: object,
                                    match: str) -> None:
    path = _patched(natives.runtime, tmp_path / f"{name}.so", edit)
    with pytest.raises(ElfError, match=match):
        read_elf(FileSource(path))
    # Streamed as a wheel member, the capture keeps what the parser needs to say the same.
    data = Path(path).read_bytes()
    cap = ElfCapture(name, len(data))
    for i in range(0, len(data), 1000):
        cap.feed(data[i : i + 1000])
    src = cap.source()
    if name == "not-elf":
        assert src is None  # not ELF by its magic: the wheel checks treat it as a plain file
        return
    assert src is not None
    with pytest.raises(ElfError, match=match):
        read_elf(src)


def test_section_headers_are_never_read(natives: B.Natives, tmp_path: Path) -> None:
    """The loader ignores e_shoff, and so does the reader: a section table off the end is no error."""
    path = _patched(natives.runtime, tmp_path / "shoff.so", lambda d: struct.pack_into("<Q", d, 40, 1 << 40))
    assert read_elf(FileSource(path)).needed == read_elf_file(str(natives.runtime)).needed


def test_empty_file_is_not_elf(tmp_path: Path) -> None:
    (tmp_path / "empty.so").write_bytes(b"")
    with pytest.raises(ElfError, match="not an ELF"):
        read_elf_file(str(tmp_path / "empty.so"))


def test_second_pass_keeps_exactly_the_planned_tables(natives: B.Natives) -> None:
    """When the front cap cuts the tables off (libtorch_cpu.so is one 340 MB segment), the first
    pass still yields .dynamic; a second pass keeps the ranges it names."""
    data = natives.plugin.read_bytes()
    first = ElfCapture("plugin", len(data), front_cap=1024)
    first.feed(data)
    src = first.source()
    assert src is not None
    with pytest.raises(NotCaptured):
        read_elf(src)
    second = ElfCapture("plugin", len(data), front_cap=1024, ranges=first.planned_ranges())
    for i in range(0, len(data), 4096):
        second.feed(data[i : i + 4096])
    src2 = second.source()
    assert src2 is not None
    info, ref = read_elf(src2), read_elf_file(str(natives.plugin))
    assert (info.needed, info.runpath, info.defined, info.undefined) == (ref.needed, ref.runpath, ref.defined,
                                                                          ref.undefined)
