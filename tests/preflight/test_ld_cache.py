"""/etc/ld.so.cache, read directly: agrees with `ldconfig -p` on this host, and tolerates garbage."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from torch_fl_preflight import ld_cache


def test_agrees_with_ldconfig() -> None:
    exe = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        out = subprocess.run([exe, "-p"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("ldconfig not available")
    theirs: dict[str, set[str]] = {}
    for line in out.splitlines()[1:]:
        if "=>" in line:
            left, path = line.rsplit("=>", 1)
            theirs.setdefault(left.split()[0], set()).add(path.strip())
    with open(ld_cache.CACHE_PATH, "rb") as fh:
        mine = ld_cache.parse_cache(fh.read())
    assert theirs and {k: set(v) for k, v in mine.items()} == theirs


def _cache(entries: list[tuple[str, str]]) -> bytes:
    strings = b""
    offsets = []
    header = 48
    table = 24 * len(entries)
    for key, value in entries:
        k = header + table + len(strings)
        strings += key.encode() + b"\0"
        v = header + table + len(strings)
        strings += value.encode() + b"\0"
        offsets.append((k, v))
    out = ld_cache.NEW_MAGIC + struct.pack("<II", len(entries), len(strings)) + b"\0" * 20
    for k, v in offsets:
        out += struct.pack("<iIIIQ", 0x0303, k, v, 0, 0)
    return out + strings


def test_parses_a_synthetic_cache() -> None:
    data = _cache([("libfoo.so.1", "/opt/foo/libfoo.so.1"), ("libfoo.so.1", "/lib/libfoo.so.1")])
    assert ld_cache.parse_cache(data) == {"libfoo.so.1": ["/opt/foo/libfoo.so.1", "/lib/libfoo.so.1"]}


@pytest.mark.parametrize("cut", [0, 10, 30, 60, 80])
def test_truncated_cache_yields_what_it_can(cut: int) -> None:
    data = _cache([("liba.so", "/a/liba.so")])
    assert ld_cache.parse_cache(data[:cut]) in ({}, {"liba.so": ["/a/liba.so"]})
