"""/etc/ld.so.cache, read directly: agrees with `ldconfig -p` on this host, and tolerates garbage."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from torch_fl_preflight import ld_cache

from support.tools import missing


def test_agrees_with_ldconfig() -> None:
    exe = shutil.which("ldconfig") or "/sbin/ldconfig"  # /sbin is often off a user's PATH
    try:
        out = subprocess.run([exe, "-p"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        missing("ldconfig (glibc) is not available")
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


# Two entries: 48-byte header, two 24-byte table rows (to 96), then the strings "liba.so" (96-103),
# "/a/liba.so" (104-114), "libb.so" (115-122), "/b/libb.so" (123-133); 134 bytes in all.
_A = {"liba.so": ["/a/liba.so"]}
_AB = {"liba.so": ["/a/liba.so"], "libb.so": ["/b/libb.so"]}


@pytest.mark.parametrize(("cut", "expected"), [
    (0, {}),     # empty file
    (10, {}),    # inside the magic
    (30, {}),    # inside the header: the entry count is not there yet
    (60, {}),    # inside the first table row
    (80, {}),    # inside the second row; no string is there yet
    (96, {}),    # the table whole, no string yet
    (114, {}),   # first value without its terminating NUL
    (115, _A),   # first entry's strings complete
    (133, _A),   # second value without its terminating NUL
    (134, _AB),  # the whole cache
])
def test_truncated_cache_yields_the_entries_whose_strings_are_whole(cut: int, expected: dict) -> None:
    data = _cache([("liba.so", "/a/liba.so"), ("libb.so", "/b/libb.so")])
    assert len(data) == 134
    assert ld_cache.parse_cache(data[:cut]) == expected
