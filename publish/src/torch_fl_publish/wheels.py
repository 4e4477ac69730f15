"""Inspect the wheels to publish: name, version, hashes and the core metadata the upload sends."""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import (
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

from torch_fl_publish.errors import PublishError

_CHUNK = 1 << 20
_MAX_METADATA = 16 << 20

# Core-metadata fields that may appear more than once; the legacy upload protocol
# sends each occurrence as its own form field of the same name.
MULTIPLE_USE = frozenset(
    {
        "classifier",
        "dynamic",
        "license_file",
        "obsoletes_dist",
        "platform",
        "project_url",
        "provides_dist",
        "provides_extra",
        "requires_dist",
        "requires_external",
        "supported_platform",
    }
)
# Form names where the protocol's spelling differs from the header's.
_FORM_NAME = {"classifier": "classifiers", "project_url": "project_urls"}


@dataclass(frozen=True)
class LocalWheel:
    """One wheel file given on the command line."""

    path: Path
    filename: str
    project: NormalizedName
    version: Version
    python_tag: str
    size: int
    sha256: str
    blake2_256: str
    metadata: tuple[tuple[str, str], ...]
    """Core metadata as upload form fields, in file order (multiple-use fields repeat)."""


def _hashes(path: Path) -> tuple[str, str, int]:
    sha = hashlib.sha256()
    blake = hashlib.blake2b(digest_size=32)
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            sha.update(chunk)
            blake.update(chunk)
            size += len(chunk)
    return sha.hexdigest(), blake.hexdigest(), size


def _read_metadata(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            found = [
                info
                for info in archive.infolist()
                if info.filename.count("/") == 1 and info.filename.endswith(".dist-info/METADATA")
            ]
            if len(found) != 1:
                raise PublishError(
                    "wheel needs exactly one .dist-info/METADATA",
                    f"{path.name}: {len(found)} found",
                    "rebuild the wheel",
                )
            if found[0].file_size > _MAX_METADATA:
                raise PublishError("METADATA is implausibly large", path.name, "rebuild the wheel")
            return archive.read(found[0]).decode("utf-8")
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError) as exc:
        raise PublishError("wheel is not a readable zip", f"{path.name}: {exc}", "rebuild the wheel") from None


def _form_fields(text: str) -> tuple[tuple[str, str], ...]:
    message = email.parser.Parser(policy=email.policy.compat32).parsestr(text)
    fields: list[tuple[str, str]] = []
    for header, value in message.items():
        key = header.lower().replace("-", "_")
        if key == "description":
            continue
        fields.append((_FORM_NAME.get(key, key), str(value)))
    body = message.get_payload()
    description = body if isinstance(body, str) and body.strip() else message.get("Description")
    if description:
        fields.append(("description", str(description)))
    return tuple(fields)


def inspect(path: Path) -> LocalWheel:
    """Read one wheel; raise ``PublishError`` when it cannot be published as it is."""
    if not path.is_file():
        raise PublishError("no such wheel", str(path), "pass the path of a built .whl file")
    try:
        name, version, _build, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise PublishError("not a wheel file name", path.name, f"{exc}") from None
    fields = _form_fields(_read_metadata(path))
    meta = dict(fields)
    meta_name, meta_version = meta.get("name", ""), meta.get("version", "")
    try:
        same_version = Version(meta_version) == version
    except ValueError:
        same_version = False
    if canonicalize_name(meta_name) != name or not same_version:
        raise PublishError(
            "METADATA disagrees with the file name",
            f"{path.name}: Name={meta_name!r} Version={meta_version!r}",
            "rebuild the wheel; never rename one",
        )
    sha256, blake2_256, size = _hashes(path)
    python_tag = min({tag.interpreter for tag in tags})
    return LocalWheel(path, path.name, name, version, python_tag, size, sha256, blake2_256, fields)


def inspect_all(paths: list[Path]) -> list[LocalWheel]:
    """Inspect every wheel; the same file name twice must be the same file."""
    seen: dict[str, LocalWheel] = {}
    for path in paths:
        wheel = inspect(path)
        earlier = seen.get(wheel.filename)
        if earlier is None:
            seen[wheel.filename] = wheel
        elif earlier.sha256 != wheel.sha256:
            raise PublishError(
                "two different wheels share one file name",
                f"{earlier.path} and {wheel.path}",
                "publish one of them",
            )
    return list(seen.values())
