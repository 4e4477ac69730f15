"""Release mode (``--tag vX.Y.Z``): refuse a wheel whose version is not the tag's, or that fails preflight.

The gate runs on every wheel before anything is uploaded, and one refused
wheel stops the whole release: a release lane never holds part of a release.
Where the platform recipes are at hand (``bundlers/``), a wheel must also belong
to the lane: its manifest's platform publishes to ``--lane``, and stand-ins
(``stand_in = true``) are never released.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from torch_fl_publish.errors import PublishError
from torch_fl_publish.wheels import LocalWheel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the 3.10 runners
    import tomli as tomllib

MANIFEST = "torch_fl/compatibility.json"
_MAX_MANIFEST = 32 << 20

PREFLIGHT = "torch-fl-preflight"
PREFLIGHT_TIMEOUT = 600.0


def parse_tag(tag: str) -> Version:
    """``v2.13.0`` -> ``Version("2.13.0")``; a local segment has no place in a tag."""
    text = tag[1:] if tag.startswith("v") else ""
    try:
        version = Version(text)
    except InvalidVersion:
        version = None
    if version is None or version.local is not None:
        raise PublishError("not a release tag", tag, "tags look like v2.13.0 (v, then a PEP 440 version)")
    return version


@dataclass(frozen=True)
class Refusal:
    wheel: LocalWheel
    reason: str


def check_version(wheel: LocalWheel, tag_version: Version) -> Refusal | None:
    """The wheel's version without its local segment (``2.13.0`` of ``2.13.0+host``) must be the tag's."""
    public = Version(wheel.version.public)
    if public != tag_version:
        return Refusal(wheel, f"version {public} (of {wheel.version}) differs from tag v{tag_version}")
    return None


def _manifest_platform(wheel: LocalWheel) -> str | None:
    """The ``platform`` the wheel's own manifest records; ``None`` without one (preflight refuses those)."""
    try:
        with zipfile.ZipFile(wheel.path) as archive:
            info = archive.getinfo(MANIFEST)
            if info.file_size > _MAX_MANIFEST:
                return None
            document = json.loads(archive.read(info))
    except (KeyError, zipfile.BadZipFile, OSError, ValueError):
        return None
    platform = document.get("platform") if isinstance(document, dict) else None
    return platform if isinstance(platform, str) else None


def check_lane(wheel: LocalWheel, lane: str, bundlers: Path) -> Refusal | None:
    """The wheel's platform must publish to ``lane`` (its recipe's ``index_lane``) and not be a stand-in."""
    platform = _manifest_platform(wheel)
    if platform is None:
        return None
    recipe = bundlers / f"{platform}.toml"
    try:
        data = tomllib.loads(recipe.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Refusal(wheel, f"platform {platform} has no recipe in {bundlers}")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PublishError("cannot read a platform recipe", f"{recipe}: {exc}", "fix the recipe") from None
    if data.get("stand_in", False):
        return Refusal(wheel, f"platform {platform} is a stand-in, never released")
    wheel_table = data.get("wheel")
    expected = wheel_table.get("index_lane") if isinstance(wheel_table, dict) else None
    if expected != lane:
        return Refusal(wheel, f"platform {platform} publishes to lane {expected}, not {lane}")
    return None


def find_preflight() -> str:
    found = shutil.which(PREFLIGHT)
    if found is None:
        raise PublishError(
            "release mode needs torch-fl-preflight, which is not installed",
            PREFLIGHT,
            "pip install ./preflight (or the torch-fl-preflight distribution) into this environment",
        )
    return found


def _failed_checks(document: Any) -> list[str]:
    """The ids of failed checks in preflight's JSON, read defensively (any shape it may take)."""
    failed: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            state = str(node.get("status", node.get("result", node.get("outcome", "")))).lower()
            if "id" in node and state in {"fail", "failed", "error"}:
                failed.append(str(node["id"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    return sorted(set(failed))


def check_preflight(wheel: LocalWheel, executable: str) -> Refusal | None:
    """Run ``torch-fl-preflight --release --wheel W --json``; exit 0 passes, anything else refuses."""
    command = [executable, "--release", "--wheel", str(wheel.path), "--json"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PREFLIGHT_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return Refusal(wheel, f"preflight did not finish within {PREFLIGHT_TIMEOUT:.0f}s")
    except OSError as exc:
        raise PublishError(
            "cannot run torch-fl-preflight", f"{executable}: {exc.strerror}", "reinstall torch-fl-preflight"
        ) from None
    if done.returncode == 0:
        return None
    try:
        document = json.loads(done.stdout)
    except ValueError:
        document = None
    failed = _failed_checks(document)
    error = document.get("error") if isinstance(document, dict) else None
    if failed:
        reason = "preflight --release failed: " + ", ".join(failed)
    elif isinstance(error, str) and error:
        reason = f"preflight --release: {error[:300]}"
    else:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        reason = f"preflight --release exited {done.returncode}: {last[:300]}"
    return Refusal(wheel, reason)


def gate(wheels: list[LocalWheel], tag: str, lane: str, bundlers: Path | None) -> list[Refusal]:
    """Every refusal for a release of ``wheels`` under ``tag`` to ``lane`` (an empty list means go)."""
    tag_version = parse_tag(tag)
    executable = find_preflight()
    refusals = []
    for wheel in wheels:
        refusal = (
            check_version(wheel, tag_version)
            or (check_lane(wheel, lane, bundlers) if bundlers is not None else None)
            or check_preflight(wheel, executable)
        )
        if refusal is not None:
            refusals.append(refusal)
    return refusals
