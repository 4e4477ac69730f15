"""Stage 5, manifest: write torch_fl/compatibility.json and check it against the schema.

What was built and what is needed, never a guess: an unknown value is an absent
key.  The stage fills preflight's typed model of the manifest
(``torch_fl_preflight.compatibility``, the one model) and writes its ``to_json()``, validated
with jsonschema against preflight's schema (``torch_fl_preflight.schema``, the one copy) before
the wheel is written; an invalid manifest stops the build.
"""

from __future__ import annotations

import email.parser
import hashlib
import json
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from torch_fl_preflight import schema as preflight_schema
from torch_fl_preflight.compatibility import (
    Bundle,
    Companions,
    Compatibility,
    ElfRecord,
    Floors,
    Runtime,
    RuntimeDirectory,
    Sdk,
    SdkRoot,
    Torch,
    VendorTorch,
    Wheel,
)

from .bundle import Origin, Staged
from .configure import Config
from .elf_read import ElfInfo, is_elf, read_elf, version_floor
from .errors import ManifestError
from .repair import Repaired

__all__ = ["MANIFEST_PATH", "build_manifest", "load_schema", "sha256_file", "validate_manifest", "write_manifest"]

MANIFEST_PATH = "torch_fl/compatibility.json"
#: The extension key that marks a stand-in platform's wheel (a recipe with ``stand_in``).
STAND_IN = "x-stand-in"


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


def _elf_records(staged: Staged) -> tuple[list[ElfRecord], list[ElfInfo]]:
    records: list[ElfRecord] = []
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
        records.append(ElfRecord(
            path=rel,
            sha256=sha256_file(path),
            size=path.stat().st_size,
            soname=info.soname,
            needed=tuple(info.needed),
            rpath=tuple(info.rpath),
            runpath=tuple(info.runpath),
            origin=origin.origin,
            source=origin.source or None,
        ))
    return records, infos


def _sdk(config: Config) -> Sdk:
    spec = config.recipe.sdk
    if spec is None:
        return Sdk(name=config.recipe.platform, version=config.sdk_version or None)
    return Sdk(
        name=spec.name,
        version=config.sdk_version or None,
        root=SdkRoot(env=spec.env, default=spec.prefix) if spec.prefix else None,
        version_file=spec.version_file or None,
        version_pattern=(spec.version_pattern or None) if spec.version_file else None,
    )


def build_manifest(config: Config, staged: Staged, repaired: Repaired, filename: str) -> Compatibility:
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
    if config.torch.cxx11_abi is None:
        raise ManifestError("cannot tell the installed torch's C++ ABI", config.torch_lib / "libc10.so",
                            "reinstall torch")
    vendor = config.vendor
    return Compatibility(
        schema_version=preflight_schema.SCHEMA_VERSION,
        platform=recipe.platform,
        wheel=Wheel(name=name, version=version, tags=tuple(repaired.tags), filename=filename),
        bundle=Bundle(kind=recipe.kind, directory=recipe.bundle.directory),
        torch=Torch(version=config.torch.version, cxx11_abi=config.torch.cxx11_abi,
                    requirement=config.torch_requirement, git_version=config.torch.git_version),
        sdk=_sdk(config),
        requirements=tuple(config.requires_dist),
        floors=Floors(glibc=version_floor(infos, "GLIBC"), glibcxx=version_floor(infos, "GLIBCXX")),
        runtime=Runtime(
            directories=tuple(RuntimeDirectory(path=rd.path, env=rd.env, libraries=tuple(rd.libraries))
                              for rd in recipe.runtime),
            prefixes=tuple(recipe.prefixes) or None,
            system_libraries=tuple(recipe.system_libraries) or None,
        ),
        elf=tuple(records),
        vendor_torch=None if vendor is None else VendorTorch(
            version=vendor.info.version, source=vendor.source, git_version=vendor.info.git_version or None),
        companions=Companions(**config.companions),
        extensions={STAND_IN: True} if recipe.stand_in else {},
    )


def write_manifest(config: Config, staged: Staged, repaired: Repaired, filename: str) -> Compatibility:
    manifest = build_manifest(config, staged, repaired, filename)
    document = manifest.to_json()
    validate_manifest(document)
    target = staged.root / MANIFEST_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document, indent=2) + "\n")
    return manifest
