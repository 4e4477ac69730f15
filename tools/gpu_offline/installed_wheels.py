"""Wheels the target machine already has installed: left out of the payload, rebuilt there.

A wheel the target has installed at the same version need not be carried: only its .dist-info
(METADATA, WHEEL, RECORD: a few kB) travels, and the wheel is rebuilt there from the installed files,
each checked against the sha256 the original wheel's RECORD gives.  Only wheels tagged py3-none-* /
py2.py3-none-* (the nvidia-* and cuda-toolkit ones): their files do not depend on the Python version.

Where pip put a file follows from its path in the wheel (the wheel spec's install scheme; pip's
``operations/install/wheel.py``): a plain path and ``<name>.data/purelib|platlib/`` are under
site-packages; ``<name>.data/data/`` is under the installation prefix (a venv's root, ``/usr/local``)
or, for ``pip install --target``, under the target folder itself.  ``.data/scripts/`` files are
rewritten by pip (their ``#!python`` line) and ``.data/headers/`` go to a per-Python include folder:
wheels with those stay in the payload.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import re
import shutil
import zipfile
from pathlib import Path

from failures import CheckFailed, UsageError

# Schemes whose installed files are byte-identical to the wheel's and found from site-packages alone.
REBUILDABLE_SCHEMES = ("purelib", "platlib", "data")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _scheme(path: str) -> str | None:
    """`data` for `pkg-1.0.data/data/share/x`; None for a path outside `.data/`."""
    first, _, rest = path.partition("/")
    return rest.partition("/")[0] if first.endswith(".data") else None


def rebuildable(wheel: zipfile.ZipFile) -> bool:
    """Whether every file of the wheel can be found, unchanged, where pip installed it."""
    return all(_scheme(n) in (None, *REBUILDABLE_SCHEMES) for n in wheel.namelist())


def omit_installed(wheelhouse: Path, freeze: Path, records: Path, omitted: Path) -> list[str]:
    """Move the wheels the target has installed (its `pip list --format=freeze`) out of the wheelhouse,
    keeping their .dist-info under `records`; returns their file names."""
    have: set[tuple[str, str]] = set()
    for line in freeze.read_text(encoding="utf-8").splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            have.add((_norm(name), version.strip()))
    moved: list[str] = []
    records.mkdir(parents=True, exist_ok=True)
    omitted.mkdir(parents=True, exist_ok=True)
    for whl in sorted(wheelhouse.glob("*.whl")):
        parts = whl.name[:-4].split("-")
        if len(parts) < 5 or (_norm(parts[0]), parts[1]) not in have or parts[-2] != "none" \
                or parts[-3] not in ("py3", "py2.py3"):
            continue
        with zipfile.ZipFile(whl) as src:
            if not rebuildable(src):
                continue
            with zipfile.ZipFile(records / (whl.name + ".dist-info.zip"), "w") as dst:
                for info in src.infolist():
                    if info.filename.split("/", 1)[0].endswith(".dist-info"):
                        dst.writestr(info, src.read(info))
        shutil.move(str(whl), str(omitted / whl.name))
        moved.append(whl.name)
    return moved


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def default_prefix(site: Path) -> Path | None:
    """The installation prefix of `site` when it has the `<prefix>/lib*/pythonX.Y/site-packages`
    (or Debian's `dist-packages`) shape, else None."""
    if site.name in ("site-packages", "dist-packages") and site.parent.name.startswith("python") \
            and site.parent.parent.name.startswith("lib"):
        return site.parents[2]
    return None


def installed_candidates(path: str, site: Path, prefix: Path | None) -> list[Path]:
    """Where pip may have put the wheel member `path`, most likely first."""
    scheme = _scheme(path)
    if scheme is None:
        return [site / path]
    inner = path.split("/", 2)[2]
    if scheme in ("purelib", "platlib"):
        return [site / inner]
    if scheme == "data":
        # A prefix install (venv, system) puts them under the prefix; `pip install --target` under the target.
        return [root / inner for root in (prefix, site) if root is not None]
    return []


def _installed_file(name: str, path: str, digest: str, site: Path, prefix: Path | None) -> tuple[bytes, int]:
    """The installed bytes and mode of the wheel member `path`, checked against its RECORD hash."""
    candidates = installed_candidates(path, site, prefix)
    if not candidates:
        raise CheckFailed(f"{name}: {path} is rewritten by pip at install time, so the wheel cannot be rebuilt"
                          " — carry the wheel itself (pack without --target-has)")
    found = [c for c in candidates if c.is_file()]
    for candidate in found:
        data = candidate.read_bytes()
        if not digest or _record_hash(data) == digest:
            return data, candidate.stat().st_mode
    if found:
        raise CheckFailed(f"{name}: the installed {path} ({found[0]}) differs from the wheel's — carry the wheel"
                          " itself (pack without --target-has)")
    where = " or ".join(str(c.parent) for c in candidates)
    raise CheckFailed(f"{name}: {path} is not installed in {where} — carry the wheel itself (pack without"
                      " --target-has) or name the installation prefix with --prefix")


def rebuild(records: Path, site: Path, out: Path, prefix: Path | None = None) -> list[str]:
    """Each omitted wheel again, from the machine's installed files (`site`, and `prefix` for the data
    scheme, by default derived from `site`); refused when one file is missing or differs."""
    prefix = prefix if prefix is not None else default_prefix(site)
    built: list[str] = []
    for rec in sorted(records.glob("*.whl.dist-info.zip")):
        name = rec.name[: -len(".dist-info.zip")]
        with zipfile.ZipFile(rec) as src:
            meta = {i.filename: src.read(i) for i in src.infolist()}
        record = next((d for f, d in meta.items() if f.endswith(".dist-info/RECORD")), None)
        if record is None:
            raise UsageError(f"{rec.name} holds no RECORD — pack again")
        target = out / name
        tmp = out / (name + ".tmp")
        out.mkdir(parents=True, exist_ok=True)
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as dst:
                for row in csv.reader(record.decode().splitlines()):
                    path, digest = (row + ["", ""])[:2]
                    if not path or path.split("/", 1)[0].endswith(".dist-info"):
                        continue
                    data, mode = _installed_file(name, path, digest, site, prefix)
                    info = zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0))
                    info.external_attr = (mode & 0o777) << 16  # pip keeps the executable bits
                    dst.writestr(info, data)
                for path, data in meta.items():
                    dst.writestr(path, data)
        except CheckFailed:
            tmp.unlink(missing_ok=True)
            raise
        tmp.rename(target)
        built.append(name)
    return built
