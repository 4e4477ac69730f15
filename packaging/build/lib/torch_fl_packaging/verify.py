"""Stage 6, verify: prove the final wheel before it is moved into --out.

Always: every member's sha256/size matches RECORD, compatibility.json is
schema-valid, names every ELF member with the member's real sha256, and agrees
with METADATA and the file name.  Then, where ``torch-fl-preflight`` is
installed, it runs on the wheel as a release gate (``--release`` for real
platforms); its exit code decides.
"""

from __future__ import annotations

import base64
import csv
import email.parser
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from .configure import Config
from .errors import ManifestError, VerifyError
from .manifest import MANIFEST_PATH, load_schema, validate_manifest

__all__ = ["Verified", "check_wheel", "verify"]


@dataclass
class Verified:
    members: int
    elf_records: int
    preflight: str  # "passed" | "not installed" | "skipped"
    details: dict[str, Any] = field(default_factory=dict)


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def check_wheel(wheel: Path, schema: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    """Self-contained checks of a written wheel; raises VerifyError."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise VerifyError("the written wheel is not a readable zip", wheel.name, str(exc)) from None
    with zf:
        names = zf.namelist()
        records = [n for n in names if n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise VerifyError("the wheel must have one RECORD", records, "rewrite the wheel")
        dist_info = records[0].rsplit("/", 1)[0]
        rows = {row[0]: row for row in csv.reader(io.StringIO(zf.read(records[0]).decode())) if row}
        hashes: dict[str, str] = {}
        for info in zf.infolist():
            if info.filename == records[0]:
                continue
            row = rows.get(info.filename)
            if row is None:
                raise VerifyError("a member is missing from RECORD", info.filename, "rewrite the wheel")
            h = hashlib.sha256()
            size = 0
            with zf.open(info) as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
                    size += len(chunk)
            if row[1] != f"sha256={_b64(h.digest())}" or row[2] != str(size):
                raise VerifyError("a member does not match RECORD", info.filename, "rewrite the wheel")
            hashes[info.filename] = h.hexdigest()
        extra = set(rows) - set(names)
        if extra:
            raise VerifyError("RECORD lists files the wheel lacks", sorted(extra)[:3], "rewrite the wheel")
        try:
            manifest = json.loads(zf.read(MANIFEST_PATH))
        except KeyError:
            raise VerifyError("the wheel has no manifest", MANIFEST_PATH, "run the manifest stage") from None
        try:
            validate_manifest(manifest, schema)
        except ManifestError as exc:
            raise VerifyError(exc.problem, exc.value, exc.fix) from None
        meta = email.parser.Parser().parsestr(zf.read(f"{dist_info}/METADATA").decode(), headersonly=True)
        wheel_meta = email.parser.Parser().parsestr(zf.read(f"{dist_info}/WHEEL").decode(), headersonly=True)
        wheel_tags = wheel_meta.get_all("Tag") or []
        elf_members = {n for n in names if not n.endswith("/") and zf.open(n).read(4) == b"\x7fELF"}
    recorded = {r["path"]: r for r in manifest["elf"]}
    if set(recorded) != elf_members:
        raise VerifyError("manifest ELF records differ from the wheel's ELF files",
                          sorted(set(recorded) ^ elf_members)[:3], "rerun the manifest stage")
    for path, rec in recorded.items():
        if rec["sha256"] != hashes[path]:
            raise VerifyError("manifest sha256 differs from the member", path, "rerun the manifest stage")
    if sorted(wheel_tags) != sorted(manifest["wheel"]["tags"]):
        raise VerifyError("WHEEL tags differ from the manifest", f"{wheel_tags} vs {manifest['wheel']['tags']}",
                          "rerun the repair stage")
    if manifest["wheel"]["version"] != meta["Version"] or manifest["wheel"]["filename"] != wheel.name:
        raise VerifyError("manifest disagrees with the wheel's METADATA or file name",
                          f"{manifest['wheel']['version']} / {manifest['wheel']['filename']}", "rerun the pipeline")
    def norm(reqs: list[str]) -> list[str]:
        return sorted(str(Requirement(r)) for r in reqs)

    if norm(manifest["requirements"]) != norm(meta.get_all("Requires-Dist") or []):
        raise VerifyError("manifest requirements differ from METADATA", manifest["requirements"], "rerun the pipeline")
    return len(names), len(recorded), manifest


def _preflight_cmd() -> list[str] | None:
    exe = shutil.which("torch-fl-preflight") or shutil.which(
        "torch-fl-preflight", path=str(Path(sys.executable).parent))
    if exe:
        return [exe]
    try:
        import torch_fl_preflight  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "torch_fl_preflight"]


def verify(config: Config, wheel: Path, *, preflight: str = "auto") -> Verified:
    members, elf_records, _ = check_wheel(wheel, load_schema(config.source_dir))
    if preflight == "off":
        return Verified(members, elf_records, "skipped")
    cmd = _preflight_cmd()
    if cmd is None:
        if preflight == "require":
            raise VerifyError("torch-fl-preflight is not installed", "--preflight require",
                              "pip install ./preflight")
        return Verified(members, elf_records, "not installed")
    args = [*cmd, "--wheel", str(wheel), "--platform", config.recipe.platform,
            "--python", config.target_python]
    if not config.recipe.stand_in:
        # The release gate: provenance (SDK, vendor torch, companions) must be recorded.
        args.append("--release")
    env = dict(os.environ)
    sdk = config.recipe.sdk
    if sdk and sdk.env and config.sdk_root is not None:
        # This runner is the target too: point preflight's runtime checks at the SDK we built with.
        env[sdk.env] = str(config.sdk_root)
    proc = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        failed = [ln for ln in lines if ln.startswith("FAIL ")] or lines[-1:] or ["?"]
        raise VerifyError("torch-fl-preflight rejects the wheel", "; ".join(failed)[:400],
                          "fix what it names, then rebuild")
    return Verified(members, elf_records, "passed", {"preflight": " ".join(args[1:])})
