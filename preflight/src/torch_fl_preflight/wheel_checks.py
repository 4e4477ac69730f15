"""Wheel checks: RECORD hashes, and file name, WHEEL tags and METADATA agreeing with each other."""

from __future__ import annotations

import base64
import csv
import email.parser
import io
import os
from dataclasses import dataclass
from typing import Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, parse_tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from torch_fl_preflight.errors import WheelError
from torch_fl_preflight.report import SubjectReport
from torch_fl_preflight.wheel_reader import Member, Sink, WheelArchive

MAX_METADATA_BYTES = 1 << 20
MAX_RECORD_BYTES = 8 << 20


@dataclass(frozen=True)
class WheelMetadata:
    filename: str
    name: str  # as in METADATA
    version: Version
    filename_tags: frozenset[Tag]
    wheel_tags: frozenset[Tag]
    requires_dist: tuple[Requirement, ...]
    dist_info: str  # the .dist-info directory name

    @property
    def package_dir(self) -> str:
        return canonicalize_name(self.name).replace("-", "_")


def parse_metadata_text(text: str, where: str) -> tuple[str, str, tuple[Requirement, ...]]:
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    name, version = msg.get("Name"), msg.get("Version")
    if not name or not version:
        raise WheelError(f"{where} lacks Name or Version", "rebuild the wheel")
    reqs: list[Requirement] = []
    for raw in msg.get_all("Requires-Dist") or []:
        try:
            reqs.append(Requirement(str(raw)))
        except InvalidRequirement as exc:
            raise WheelError(f"{where} has an invalid Requires-Dist ({raw!r})", "rebuild the wheel") from exc
    return str(name), str(version), tuple(reqs)


def read_wheel_metadata(whl: WheelArchive) -> WheelMetadata:
    filename = os.path.basename(whl.path)
    try:
        _name, _version, _build, fname_tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise WheelError(
            f"file name {filename!r} is not a wheel name ({exc})",
            "keep the name torch-fl-build gave it: name-version-python-abi-platform.whl",
        ) from exc
    dist_infos = {n.split("/", 1)[0] for n in whl.members if n.split("/", 1)[0].endswith(".dist-info")}
    if len(dist_infos) != 1:
        raise WheelError(
            f"wheel has {len(dist_infos)} .dist-info directories ({sorted(dist_infos)})",
            "rebuild the wheel; it must hold exactly one",
        )
    dist_info = dist_infos.pop()
    name, version, reqs = parse_metadata_text(
        whl.read(f"{dist_info}/METADATA", MAX_METADATA_BYTES).decode("utf-8", "replace"), "METADATA"
    )
    wheel_msg = email.parser.Parser().parsestr(
        whl.read(f"{dist_info}/WHEEL", MAX_METADATA_BYTES).decode("utf-8", "replace"), headersonly=True
    )
    wheel_tags: set[Tag] = set()
    for t in wheel_msg.get_all("Tag") or []:
        try:
            wheel_tags |= parse_tag(str(t).strip())
        except ValueError as exc:
            raise WheelError(f"WHEEL has an invalid Tag {t!r}", "rebuild the wheel") from exc
    try:
        parsed_version = Version(version)
    except ValueError as exc:
        raise WheelError(f"METADATA Version {version!r} is not PEP 440", "rebuild the wheel") from exc
    # A name or version that disagrees with the file name is a failed check (check_identity),
    # not unusable input.
    return WheelMetadata(
        filename, name, parsed_version, frozenset(fname_tags), frozenset(wheel_tags), reqs, dist_info
    )


def check_identity(meta: WheelMetadata, report: SubjectReport) -> None:
    _n, fname_version, _b, _t = parse_wheel_filename(meta.filename)
    fname_name = parse_wheel_filename(meta.filename)[0]
    problems = []
    if canonicalize_name(meta.name) != fname_name:
        problems.append(f"METADATA Name {meta.name!r} vs file name {fname_name!r}")
    if meta.version != fname_version:
        problems.append(f"METADATA Version {meta.version} vs file name {fname_version}")
    if meta.filename_tags != meta.wheel_tags:
        problems.append(
            f"WHEEL tags {sorted(map(str, meta.wheel_tags))} vs file name "
            f"{sorted(map(str, meta.filename_tags))}"
        )
    if canonicalize_name(meta.dist_info.removesuffix(".dist-info").rsplit("-", 1)[0]) != canonicalize_name(
        meta.name
    ):
        problems.append(f".dist-info directory {meta.dist_info!r} does not name {meta.name}")
    if problems:
        report.fail("wheel.identity", "; ".join(problems), "rebuild the wheel; do not rename wheel files")
    else:
        report.ok(
            "wheel.identity",
            f"file name, WHEEL and METADATA agree ({meta.name} {meta.version}, "
            f"{len(meta.wheel_tags)} tag(s))",
        )


def _record_hash(b64: str) -> str:
    pad = "=" * (-len(b64) % 4)
    return base64.urlsafe_b64decode(b64 + pad).hex()


def parse_record(text: str) -> dict[str, tuple[str | None, str | None, int | None]]:
    """path -> (algorithm, hex digest, size); entries without a hash have None."""
    out: dict[str, tuple[str | None, str | None, int | None]] = {}
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if len(row) != 3:
            raise WheelError(f"RECORD row has {len(row)} fields ({row[:3]!r})", "rebuild the wheel")
        path, hash_field, size_field = row
        algo = digest = None
        if hash_field:
            algo, _, b64 = hash_field.partition("=")
            try:
                digest = _record_hash(b64)
            except ValueError as exc:
                raise WheelError(f"RECORD hash for {path!r} is not base64", "rebuild the wheel") from exc
        try:
            size = int(size_field) if size_field else None
        except ValueError as exc:
            raise WheelError(
                f"RECORD size for {path!r} is not a number ({size_field!r})", "rebuild the wheel"
            ) from exc
        out[path] = (algo, digest, size)
    return out


class MemberScanner(Protocol):
    """Sees each member while it is hashed (one inflation pass per member)."""

    def start(self, member: Member) -> Sink | None: ...
    def finish(self, member: Member, sink: Sink | None) -> None: ...


def check_record(
    whl: WheelArchive, meta: WheelMetadata, report: SubjectReport, scanner: MemberScanner | None = None
) -> dict[str, str]:
    """Hash every member against RECORD. Returns member -> sha256 hex (reused by the manifest checks)."""
    record_name = f"{meta.dist_info}/RECORD"
    record = parse_record(whl.read(record_name, MAX_RECORD_BYTES).decode("utf-8", "replace"))
    digests: dict[str, str] = {}
    bad: list[str] = []
    unsigned = {record_name, f"{meta.dist_info}/RECORD.jws", f"{meta.dist_info}/RECORD.p7s"}
    for m in whl.files():
        sink = scanner.start(m) if scanner is not None else None
        sha, size = whl.digest(m.name, sink)
        if scanner is not None:
            scanner.finish(m, sink)
        digests[m.name] = sha
        if m.name in unsigned:
            continue
        entry = record.get(m.name)
        if entry is None:
            bad.append(f"{m.name}: not listed in RECORD")
        elif entry[0] != "sha256" or entry[1] is None:
            bad.append(f"{m.name}: RECORD gives no sha256 (has {entry[0]!r})")
        elif entry[1] != sha:
            bad.append(f"{m.name}: sha256 {sha[:16]}… but RECORD says {entry[1][:16]}…")
        elif entry[2] is not None and entry[2] != size:
            bad.append(f"{m.name}: {size} bytes but RECORD says {entry[2]}")
    bad.extend(f"{path}: listed in RECORD but missing from the wheel"
               for path in record if path not in whl.members and path not in unsigned)
    if bad:
        report.fail(
            "wheel.record",
            f"{len(bad)} member(s) disagree with RECORD",
            "the wheel was modified after it was built; fetch or build it again",
            tuple(bad),
        )
    else:
        report.ok("wheel.record", f"all {len(digests)} members match RECORD (sha256)")
    return digests
