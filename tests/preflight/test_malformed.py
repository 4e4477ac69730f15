"""Malformed input: each case exits 2 with one line on stderr, no traceback, within a second.

Every broken wheel is made by script from the good host wheel.
"""

from __future__ import annotations

import json
import re
import struct
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from torch_fl_preflight.main import main

import _preflight_builders as B

pytestmark = pytest.mark.compile

Maker = Callable[[Path, B.Natives, Path], Path]


def _rebuild(natives: B.Natives, out: Path, change: Callable[[dict[str, bytes]], None],
             manifest_from_good: bool = True, **spec_kw: object) -> Path:
    """A wheel whose RECORD is correct for its (changed) members: only the content is broken."""
    files = B.host_wheel_files(natives)
    spec = B.WheelSpec(files, **spec_kw)  # type: ignore[arg-type]
    if manifest_from_good:
        spec.manifest_override = B.manifest_for(files, tags=[spec.tag], filename=spec.filename,
                                                requirements=spec.requirements)
    change(files)
    return B.write_wheel(out, spec)


def truncated_zip(good: Path, natives: B.Natives, out: Path) -> Path:
    data = good.read_bytes()
    p = out / good.name
    p.write_bytes(data[: len(data) // 2])
    return p


def bad_crc(good: Path, natives: B.Natives, out: Path) -> Path:
    p = out / good.name
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(p, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            stored = zipfile.ZipInfo(info.filename, info.date_time)
            stored.external_attr = info.external_attr
            zout.writestr(stored, data, zipfile.ZIP_STORED)
    raw = bytearray(p.read_bytes())
    needle = natives.dep.read_bytes()[64:128]  # stored verbatim, so findable
    at = raw.find(needle)
    assert at > 0
    raw[at + 10] ^= 0xFF
    p.write_bytes(bytes(raw))
    return p


def _add_member(good: Path, out: Path, info: zipfile.ZipInfo, data: bytes) -> Path:
    p = out / good.name
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as zout:
        for i in zin.infolist():
            zout.writestr(i, zin.read(i.filename))
        zout.writestr(info, data)
    return p


def _named(name: str) -> Maker:
    def make(good: Path, natives: B.Natives, out: Path) -> Path:
        info = zipfile.ZipInfo("placeholder")
        info.filename = name  # bypass ZipInfo's own normalisation, as a hostile tool would
        return _add_member(good, out, info, b"x")
    return make


def symlink_member(good: Path, natives: B.Natives, out: Path) -> Path:
    info = zipfile.ZipInfo("torch_fl/lib/libc.so.6")
    info.create_system = 3
    info.external_attr = (0o120777) << 16
    return _add_member(good, out, info, b"/lib/x86_64-linux-gnu/libc.so.6")


def zip_bomb(good: Path, natives: B.Natives, out: Path, size: int = 64 << 20) -> Path:
    info = zipfile.ZipInfo("torch_fl/zeros.bin")
    info.compress_type = zipfile.ZIP_DEFLATED
    return _add_member(good, out, info, bytes(size))


def lying_size(good: Path, natives: B.Natives, out: Path) -> Path:
    """A member whose headers claim 1000 bytes while its stream inflates to 32 MB."""
    p = zip_bomb(good, natives, out, size=32 << 20)
    raw = bytearray(p.read_bytes())
    name = b"torch_fl/zeros.bin"
    at = 0
    while True:
        at = raw.find(b"PK\x01\x02", at)
        assert at >= 0
        n_len = struct.unpack_from("<H", raw, at + 28)[0]
        if raw[at + 46 : at + 46 + n_len] == name:
            struct.pack_into("<I", raw, at + 24, 1000)  # uncompressed size, central directory
            local = struct.unpack_from("<I", raw, at + 42)[0]
            struct.pack_into("<I", raw, local + 22, 1000)  # and in the local header
            break
        at += 4
    p.write_bytes(bytes(raw))
    return p


def so_not_elf(good: Path, natives: B.Natives, out: Path) -> Path:
    return _rebuild(natives, out, lambda f: f.__setitem__("torch_fl/lib/libflagos_dep.so", b"#!/bin/sh\necho hi\n"))


def truncated_elf(good: Path, natives: B.Natives, out: Path) -> Path:
    return _rebuild(natives, out, lambda f: f.__setitem__("torch_fl/lib/libflagos_dep.so",
                                                          f["torch_fl/lib/libflagos_dep.so"][:300]))


def _dynamic_outside(data: bytes) -> bytes:
    b = bytearray(data)
    phoff, = struct.unpack_from("<Q", b, 32)
    phentsize, phnum = struct.unpack_from("<HH", b, 54)
    for i in range(phnum):
        at = phoff + i * phentsize
        if struct.unpack_from("<I", b, at)[0] == 2:
            struct.pack_into("<Q", b, at + 8, len(b) + 4096)
    return bytes(b)


def dynamic_offsets_outside(good: Path, natives: B.Natives, out: Path) -> Path:
    return _rebuild(natives, out, lambda f: f.__setitem__("torch_fl/lib/libflagos_dep.so",
                                                          _dynamic_outside(f["torch_fl/lib/libflagos_dep.so"])))


def _dep_edited(edit: Callable[[bytearray], None]) -> Maker:
    """The wheel with libflagos_dep.so (64-bit, little-endian) changed by `edit`, RECORD matching."""
    def change(files: dict[str, bytes]) -> None:
        data = bytearray(files["torch_fl/lib/libflagos_dep.so"])
        edit(data)
        files["torch_fl/lib/libflagos_dep.so"] = bytes(data)

    def make(good: Path, natives: B.Natives, out: Path) -> Path:
        return _rebuild(natives, out, change)
    return make


def _manifest(raw: bytes) -> Maker:
    def make(good: Path, natives: B.Natives, out: Path) -> Path:
        files = B.host_wheel_files(natives)
        spec = B.WheelSpec(files, with_manifest=False)
        files["torch_fl/compatibility.json"] = raw
        return B.write_wheel(out, spec)
    return make


def _manifest_edit(edit: Callable[[dict[str, object]], None]) -> Maker:
    def make(good: Path, natives: B.Natives, out: Path) -> Path:
        with zipfile.ZipFile(good) as z:
            doc = json.loads(z.read("torch_fl/compatibility.json"))
        edit(doc)
        return _manifest(json.dumps(doc).encode())(good, natives, out)
    return make


def huge_manifest(good: Path, natives: B.Natives, out: Path) -> Path:
    files = B.host_wheel_files(natives)
    spec = B.WheelSpec(files, with_manifest=False)
    files["torch_fl/compatibility.json"] = b'{"schema_version": 1, "pad": "' + b"ab" * (25 << 20) + b'"}'
    return B.write_wheel(out, spec)


def no_manifest(good: Path, natives: B.Natives, out: Path) -> Path:
    return B.write_wheel(out, B.WheelSpec(B.host_wheel_files(natives), with_manifest=False))


def not_a_wheel_name(good: Path, natives: B.Natives, out: Path) -> Path:
    p = out / "torch_fl.whl"
    p.write_bytes(good.read_bytes())
    return p


CASES: dict[str, tuple[Maker, str]] = {
    "truncated-zip": (truncated_zip, "not a readable zip"),
    "bad-crc": (bad_crc, "corrupt|Bad CRC"),
    "dotdot-member": (_named("../x"), "climbs out"),
    "nested-dotdot-member": (_named("torch_fl/../../x"), "climbs out"),
    "absolute-member": (_named("/x"), "absolute path"),
    "backslash-member": (_named("torch_fl\\..\\x"), "not a plain relative path"),
    "symlink-member": (symlink_member, "symlink"),
    "zip-bomb": (zip_bomb, "zip bomb"),
    "lying-size": (lying_size, "inflates past its declared"),
    "so-not-elf": (so_not_elf, "not ELF"),
    "truncated-elf": (truncated_elf, "past the end|truncated"),
    "dynamic-offsets-outside": (dynamic_offsets_outside, "outside the file"),
    # A 64-bit library whose header says 32-bit (EI_CLASS) or big-endian (EI_DATA), or whose
    # program header table lies past its end (e_phoff, e_phnum).
    "elf-class-byte": (_dep_edited(lambda d: d.__setitem__(4, 1)), "ELF header: .*EI_CLASS"),
    "elf-data-byte": (_dep_edited(lambda d: d.__setitem__(5, 2)), "ELF header: .*EI_DATA"),
    "elf-phoff-outside": (_dep_edited(lambda d: struct.pack_into("<Q", d, 32, 1 << 40)), "ELF header: .*e_phoff"),
    "elf-phnum-outside": (_dep_edited(lambda d: struct.pack_into("<H", d, 56, 4000)), "ELF header: .*e_phoff"),
    "invalid-json": (_manifest(b'{"schema_version": 1,'), "not valid JSON"),
    "json-array": (_manifest(b"[1, 2]"), "not an object"),
    "deep-json": (_manifest(b"[" * 50000 + b"]" * 50000), "not valid JSON|nests too deeply"),
    "schema-violation": (_manifest_edit(lambda d: d["sdk"].__setitem__("version", "latest")), "violates the schema"),
    "wrong-types": (_manifest_edit(lambda d: d["elf"][0].__setitem__("size", "big")), "violates the schema"),
    "missing-key": (_manifest_edit(lambda d: d.pop("bundle")), "violates the schema"),
    "future-schema": (_manifest_edit(lambda d: d.__setitem__("schema_version", 2)), "schema_version 2"),
    "manifest-50MB": (huge_manifest, "limit|compresses"),
    "no-manifest": (no_manifest, "has no torch_fl/compatibility.json"),
    "not-a-wheel-name": (not_a_wheel_name, "not a wheel name"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_input_exits_2_with_one_line(case: str, host_wheel: Path, natives: B.Natives,
                                               tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    maker, needle = CASES[case]
    whl = maker(host_wheel, natives, tmp_path)
    capsys.readouterr()
    start = time.perf_counter()
    code = main(["--wheel", str(whl)])
    elapsed = time.perf_counter() - start
    out, err = capsys.readouterr()
    assert code == 2, (case, out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and " — " in lines[0]
    assert re.search(needle, lines[0]), lines[0]
    assert elapsed < 1.0, f"{case} took {elapsed:.2f}s"


def test_malformed_input_in_a_fresh_process(host_wheel: Path, natives: B.Natives, tmp_path: Path) -> None:
    whl = truncated_elf(host_wheel, natives, tmp_path)
    r = B.run_preflight(["--wheel", str(whl), "--json"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    doc = json.loads(r.stdout)
    assert doc["version"] == 1 and doc["ok"] is False and "truncated" in doc["error"] or "past" in doc["error"]
    r = B.run_preflight(["--wheel", str(whl), "--debug"])
    assert r.returncode == 2 and "Traceback" in r.stderr
