"""Where the system's dynamic loader looks last: /etc/ld.so.cache, then its built-in directories.

The cache is read directly (format: glibc elf/cache.c, "glibc-ld.so.cache1.1", optionally behind
the old "ld.so-1.7.0" table) instead of running `ldconfig -p`, whose output differs between
distributions. Without a readable cache, the directories listed in /etc/ld.so.conf are scanned.
"""

from __future__ import annotations

import glob
import os
import struct
from functools import lru_cache

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
CACHE_PATH = "/etc/ld.so.cache"
CONF_PATH = "/etc/ld.so.conf"


def default_dirs(machine: str) -> tuple[str, ...]:
    """glibc's trusted directories: the multiarch pair (Debian/Ubuntu), then lib64 or lib."""
    triplet = {
        "x86_64": "x86_64-linux-gnu",
        "aarch64": "aarch64-linux-gnu",
        "ppc64le": "powerpc64le-linux-gnu",
        "s390x": "s390x-linux-gnu",
    }.get(machine, f"{machine}-linux-gnu")
    cands = [f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    return tuple(d for d in cands if os.path.isdir(d))


def parse_cache(data: bytes) -> dict[str, list[str]]:
    """soname -> paths, in cache order. Malformed caches yield what could be read."""
    start = 0
    if data.startswith(OLD_MAGIC):
        (nlibs,) = struct.unpack_from("<I", data, 12)
        start = 16 + nlibs * 12
        start = (start + 7) & ~7
    if data[start : start + len(NEW_MAGIC)] != NEW_MAGIC:
        return {}
    if len(data) < start + 48:
        return {}
    (nlibs,) = struct.unpack_from("<I", data, start + 20)
    out: dict[str, list[str]] = {}
    entry = start + 48

    def cstr(off: int) -> str | None:
        if not 0 <= off < len(data):
            return None
        end = data.find(b"\0", off)
        return data[off:end].decode("utf-8", "surrogateescape") if end >= 0 else None

    for i in range(nlibs):
        at = entry + i * 24
        if at + 24 > len(data):
            break
        _flags, key, value, _osv, _hwcap = struct.unpack_from("<iIIIQ", data, at)
        # New-format string offsets count from the start of the new header (glibc dl-cache.c).
        k, v = cstr(start + key), cstr(start + value)
        if k and v:
            out.setdefault(k, []).append(v)
    return out


def _conf_dirs(path: str, depth: int = 0) -> list[str]:
    out: list[str] = []
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return out
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include ") and depth < 8:
            pattern = line.split(None, 1)[1]
            if not os.path.isabs(pattern):
                pattern = os.path.join(os.path.dirname(path), pattern)
            for inc in sorted(glob.glob(pattern)):
                out.extend(_conf_dirs(inc, depth + 1))
        elif line.startswith("/"):
            out.append(line)
    return out


@lru_cache(maxsize=4)
def system_cache(cache_path: str = CACHE_PATH) -> dict[str, list[str]]:
    try:
        with open(cache_path, "rb") as fh:
            parsed = parse_cache(fh.read(64 << 20))
    except OSError:
        parsed = {}
    if parsed:
        return parsed
    out: dict[str, list[str]] = {}
    for d in _conf_dirs(CONF_PATH):
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            if ".so" in n:
                out.setdefault(n, []).append(os.path.join(d, n))
    return out
