"""Stage 5, manifest: write torch_fl/compatibility.json and check it against the schema.

What was built and what is needed, never a guess: an unknown value is an absent
key.  The file is validated with jsonschema against
preflight's schema (``torch_fl_preflight.schema``, the one copy) before the wheel
is written; an invalid manifest stops the build.
"""

from __future__ import annotations

import email.parser
import hashlib
import json
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from torch_fl_preflight import schema as preflight_schema

from .bundle import Origin, Staged
from .configure import Config
from .elf_read import ElfInfo, is_elf, read_elf, version_floor
from .errors import ManifestError
from .repair import Repaired

__all__ = ["MANIFEST_PATH", "build_manifest", "load_schema", "sha256_file", "validate_manifest", "write_manifest"]

MANIFEST_PATH = "torch_fl/compatibility.json"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_schema() -> dict[str, Any]:
    """The manifest schema, as the installed torch-fl-preflight ships it (the one copy)."""
    return preflight_schema.load_schema()


def validate_manifest(manifest: dict[str, Any]) -> None:
    errors = sorted(preflight_schema.validator().iter_errors(manifest), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        raise ManifestError("compatibility.json violates the schema", f"{where}: {err.message[:200]}",
                            "fix the recipe or the manifest stage")


def _metadata_requirements(staged: Staged) -> tuple[str, str, list[str]]:
    text = (staged.root / staged.dist_info / "METADATA").read_text()
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    return msg["Name"] or "", msg["Version"] or "", list(msg.get_all("Requires-Dist") or [])


def _elf_records(staged: Staged) -> tuple[list[dict[str, Any]], list[ElfInfo]]:
    records: list[dict[str, Any]] = []
    infos: list[ElfInfo] = []
    for path in sorted(p for p in staged.root.rglob("*") if p.is_file()):
        if not is_elf(path):
            continue
        rel = path.relative_to(staged.root).as_posix()
        try:
            info = read_elf(path)
        except ValueError as exc:
            raise ManifestError("an ELF file in the wheel cannot be read", rel, str(exc)) from None
        infos.append(info)
        origin = staged.origins.get(rel, Origin("built"))
        record: dict[str, Any] = {
            "path": rel,
            "sha256": sha256_file(path),
            "size": path.stat().st_size,
            "soname": info.soname,
            "needed": list(info.needed),
            "rpath": list(info.rpath),
            "runpath": list(info.runpath),
            "origin": origin.origin,
        }
        if origin.source:
            record["source"] = origin.source
        records.append(record)
    return records, infos


def build_manifest(config: Config, staged: Staged, repaired: Repaired, filename: str) -> dict[str, Any]:
    recipe = config.recipe
    name, version, requires = _metadata_requirements(staged)
    if version != config.wheel_version:
        raise ManifestError("METADATA version differs from the configured one",
                            f"{version} vs {config.wheel_version}", "rebuild the wheel with torch-fl-build")
    # Requires-Dist holds the extras' requirements too (under `extra == "<name>"` markers), so the
    # manifest's requirements are what pip reads, extras included.
    norm = sorted(str(Requirement(r)) for r in requires)
    if norm != sorted(str(Requirement(r)) for r in config.requires_dist):
        raise ManifestError("METADATA requirements differ from the configured ones",
                            f"{norm} vs {list(config.requires_dist)}", "rebuild the wheel with torch-fl-build")
    records, infos = _elf_records(staged)
    sdk: dict[str, Any] = {"name": recipe.sdk.name if recipe.sdk else recipe.platform}
    if config.sdk_version:
        sdk["version"] = config.sdk_version
    if recipe.sdk and recipe.sdk.prefix:
        sdk["root"] = {"env": recipe.sdk.env, "default": recipe.sdk.prefix}
    if recipe.sdk and recipe.sdk.version_file:
        sdk["version_file"] = recipe.sdk.version_file
        if recipe.sdk.version_pattern:
            sdk["version_pattern"] = recipe.sdk.version_pattern
    manifest: dict[str, Any] = {
        "schema_version": 1,
        "platform": recipe.platform,
        "wheel": {"name": name, "version": version, "tags": repaired.tags, "filename": filename},
        "bundle": {"kind": recipe.kind, "directory": recipe.bundle.directory},
        "torch": {
            "version": config.torch.version,
            "git_version": config.torch.git_version,
            "cxx11_abi": config.torch.cxx11_abi,
            "requirement": config.torch_requirement,
        },
        "sdk": sdk,
    }
    if config.vendor is not None:
        vt: dict[str, Any] = {"version": config.vendor.info.version, "source": config.vendor.source}
        if config.vendor.info.git_version:
            vt["git_version"] = config.vendor.info.git_version
        manifest["vendor_torch"] = vt
    manifest["companions"] = dict(config.companions)
    manifest["requirements"] = list(config.requires_dist)
    manifest["floors"] = {"glibc": version_floor(infos, "GLIBC"), "glibcxx": version_floor(infos, "GLIBCXX")}
    runtime: dict[str, Any] = {"directories": [
        {"path": rd.path, "env": rd.env, "libraries": list(rd.libraries)} for rd in recipe.runtime
    ]}
    if recipe.prefixes:
        runtime["prefixes"] = list(recipe.prefixes)
    if recipe.system_libraries:
        runtime["system_libraries"] = list(recipe.system_libraries)
    manifest["runtime"] = runtime
    if recipe.stand_in:
        manifest["x-stand-in"] = True
    manifest["elf"] = records
    if config.torch.git_version is None:
        del manifest["torch"]["git_version"]
    if config.torch.cxx11_abi is None:
        raise ManifestError("cannot tell the installed torch's C++ ABI", config.torch_lib / "libc10.so",
                            "reinstall torch")
    return manifest


def write_manifest(config: Config, staged: Staged, repaired: Repaired, filename: str) -> dict[str, Any]:
    manifest = build_manifest(config, staged, repaired, filename)
    validate_manifest(manifest)
    target = staged.root / MANIFEST_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
