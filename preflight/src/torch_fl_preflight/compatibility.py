"""The typed model of ``torch_fl/compatibility.json``: one frozen dataclass per object of the schema.

This is the one model of the manifest.  torch-fl-build's manifest stage builds it and writes
``to_json()``; every check of preflight reads its attributes; the bootstrap's standard-library
subset (``torch_fl_bootstrap.manifest``) is held to it by a test.

Field names are the schema's property names (``compatibility.schema.json``), so a field is found
under the key of the same name.  A key the schema requires is a field without a default (``None``
where the schema allows ``null``); an optional key is a field that defaults to ``None``, and ``None``
means the key is absent, never ``null``.  Arrays are tuples.  ``from_json`` validates a document
against the schema before building anything, so the constructors below see only valid input.

One key is read more loosely than it is written: ``sdk.root.env`` may be absent or ``null`` with
the same meaning (no variable moves the prefix); it is read as ``None`` and written as ``null``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from torch_fl_preflight.schema import decode_manifest, validate_manifest

__all__ = [
    "EXTENSION_PREFIX",
    "Bundle",
    "Companions",
    "Compatibility",
    "ElfRecord",
    "Floors",
    "Runtime",
    "RuntimeDirectory",
    "Sdk",
    "SdkRoot",
    "Torch",
    "VendorTorch",
    "Wheel",
    "read_compatibility",
]

#: Top-level keys that start with this are extensions (the schema's patternProperties).
EXTENSION_PREFIX = "x-"


def _json_value(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _json_object(value)
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _json_value(v) for k, v in value.items()}
    return value


def _json_object(obj: Any) -> dict[str, Any]:
    """Every field under its own name; an optional field (one with a default) is left out when None."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is None and f.default is None:
            continue
        out[f.name] = _json_value(value)
    return out


def _strings(values: Any) -> tuple[str, ...]:
    return tuple(values)


def _optional_strings(values: Any) -> tuple[str, ...] | None:
    return None if values is None else tuple(values)


@dataclass(frozen=True)
class Wheel:
    """``wheel``: the wheel this manifest sits in."""

    name: str
    """Distribution name as in METADATA (``torch_fl``)."""
    version: str
    """PEP 440 version with the platform's local segment, e.g. ``2.13.0+host``."""
    tags: tuple[str, ...]
    """Expanded wheel tags (python-abi-platform), as in the WHEEL file."""
    filename: str
    """The wheel's file name."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Wheel:
        return cls(name=doc["name"], version=doc["version"], tags=_strings(doc["tags"]), filename=doc["filename"])


@dataclass(frozen=True)
class Bundle:
    """``bundle``: how the wheel's native pieces reach the loader (docs/architecture.md, Bundle kinds)."""

    kind: str
    """One of the bundle kinds (``torch_fl_preflight.kinds.KINDS``, the schema's enum)."""
    directory: str | None
    """Wheel-relative directory of the bundled libraries (``torch_fl/lib``); None when nothing is bundled."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Bundle:
        return cls(kind=doc["kind"], directory=doc["directory"])


@dataclass(frozen=True)
class Torch:
    """``torch``: the torch the plugin was compiled against."""

    version: str
    """``torch.__version__`` at build time, e.g. ``2.13.0+cpu``."""
    cxx11_abi: bool
    """``torch._C._GLIBCXX_USE_CXX11_ABI`` at build time."""
    requirement: str
    """The PEP 508 requirement on torch the wheel declares, e.g. ``torch==2.13.0``."""
    git_version: str | None = None
    """``torch.version.git_version`` at build time; None when that torch recorded none."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Torch:
        return cls(version=doc["version"], cxx11_abi=doc["cxx11_abi"], requirement=doc["requirement"],
                   git_version=doc.get("git_version"))


@dataclass(frozen=True)
class SdkRoot:
    """``sdk.root``: where the SDK lives on the target."""

    env: str | None
    """The environment variable that overrides the prefix, or None (read as None when absent)."""
    default: str
    """The default prefix, an absolute path."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> SdkRoot:
        return cls(env=doc.get("env"), default=doc["default"])


@dataclass(frozen=True)
class Sdk:
    """``sdk``: the vendor SDK the plugin was built with."""

    name: str
    """The SDK's name (the platform's name where there is no vendor SDK)."""
    version: str | None = None
    """The SDK version the plugin was built with; None means unknown, never "any"."""
    root: SdkRoot | None = None
    """Where the SDK lives on the target; None when the manifest does not say."""
    version_file: str | None = None
    """Path, relative to the SDK root, of a file that states the SDK version."""
    version_pattern: str | None = None
    """Regular expression with one group capturing the version inside ``version_file``; None: its first
    non-empty line."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Sdk:
        root = doc.get("root")
        return cls(name=doc["name"], version=doc.get("version"),
                   root=None if root is None else SdkRoot.from_json(root),
                   version_file=doc.get("version_file"), version_pattern=doc.get("version_pattern"))


@dataclass(frozen=True)
class VendorTorch:
    """``vendor_torch``: the vendor (forked-libtorch) or CUDA (cuda-assets) torch that supplied libraries."""

    version: str
    """That torch's version."""
    source: str
    """Where the libraries came from: a wheel file name or a description of the torch/lib directory."""
    git_version: str | None = None
    """That torch's git version; None when it recorded none."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> VendorTorch:
        return cls(version=doc["version"], source=doc["source"], git_version=doc.get("git_version"))


@dataclass(frozen=True)
class Companions:
    """``companions``: the companion releases the platform was validated with (manifests/companions.toml)."""

    flaggems: str | None = None
    """The FlagGems release the flaggems provider's routes are made for; None: not pinned."""
    flagtree: str | None = None
    """The FlagTree release; None: not pinned."""
    flagcx: str | None = None
    """The FlagCX release; None: not pinned."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Companions:
        return cls(flaggems=doc.get("flaggems"), flagtree=doc.get("flagtree"), flagcx=doc.get("flagcx"))

    def pins(self) -> dict[str, str]:
        """The recorded pins, by companion name (the JSON object)."""
        return _json_object(self)


@dataclass(frozen=True)
class Floors:
    """``floors``: the highest GLIBC_ / GLIBCXX_ versions any ELF file of the wheel needs."""

    glibc: str | None
    """e.g. ``2.28``; None when nothing needs glibc's versions."""
    glibcxx: str | None
    """e.g. ``3.4.30``; None when nothing needs libstdc++."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Floors:
        return cls(glibc=doc["glibc"], glibcxx=doc["glibcxx"])


@dataclass(frozen=True)
class RuntimeDirectory:
    """One of ``runtime.directories``: a directory the target must provide outside the wheel."""

    path: str
    """Absolute directory on the target at the SDK's default prefix, e.g. ``/opt/maca/lib``."""
    env: str | None
    """The variable that moves the SDK prefix (the directory moves with it), or None."""
    libraries: tuple[str, ...]
    """SONAMEs that must be found in this directory."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RuntimeDirectory:
        return cls(path=doc["path"], env=doc["env"], libraries=_strings(doc["libraries"]))


@dataclass(frozen=True)
class Runtime:
    """``runtime``: what the target must provide outside the wheel."""

    directories: tuple[RuntimeDirectory, ...]
    """The target-side runtime directories."""
    prefixes: tuple[str, ...] | None = None
    """Absolute prefixes an RPATH/RUNPATH entry may name; None: the parents of the directories."""
    system_libraries: tuple[str, ...] | None = None
    """SONAMEs the target's own system provides (the vendor driver, ``libcuda.so.1``); None: none."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Runtime:
        return cls(directories=tuple(RuntimeDirectory.from_json(d) for d in doc["directories"]),
                   prefixes=_optional_strings(doc.get("prefixes")),
                   system_libraries=_optional_strings(doc.get("system_libraries")))


@dataclass(frozen=True)
class ElfRecord:
    """One of ``elf``: an ELF file of the wheel as the manifest stage read it."""

    path: str
    """Wheel member path."""
    sha256: str
    """Hex digest of the file."""
    size: int
    """Size in bytes."""
    soname: str | None
    """DT_SONAME, or None when the file has none."""
    needed: tuple[str, ...]
    """DT_NEEDED entries, in order."""
    rpath: tuple[str, ...]
    """DT_RPATH entries, in order."""
    runpath: tuple[str, ...]
    """DT_RUNPATH entries, in order."""
    origin: str
    """``built`` (compiled from this repository), ``bundled`` (copied by the recipe) or ``grafted``
    (added by auditwheel repair)."""
    source: str | None = None
    """Where a bundled or grafted file came from; None for a built one."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ElfRecord:
        return cls(path=doc["path"], sha256=doc["sha256"], size=doc["size"], soname=doc["soname"],
                   needed=_strings(doc["needed"]), rpath=_strings(doc["rpath"]), runpath=_strings(doc["runpath"]),
                   origin=doc["origin"], source=doc.get("source"))


@dataclass(frozen=True)
class Compatibility:
    """``torch_fl/compatibility.json``: what a wheel was built from and what it needs on the target."""

    schema_version: int
    """The schema's version; preflight reads ``SCHEMA_VERSION`` only."""
    platform: str
    """The recipe name in bundlers/ the wheel was built from (host, cuda, metax, ...)."""
    wheel: Wheel
    """The wheel this manifest sits in."""
    bundle: Bundle
    """The bundle kind and directory."""
    torch: Torch
    """The torch the plugin was compiled against."""
    sdk: Sdk
    """The vendor SDK the plugin was built with."""
    requirements: tuple[str, ...]
    """The wheel's Requires-Dist as PEP 508 strings, extras' requirements included under their markers."""
    floors: Floors
    """glibc / libstdc++ version floors."""
    runtime: Runtime
    """What the target must provide outside the wheel."""
    elf: tuple[ElfRecord, ...]
    """One record per ELF file of the wheel."""
    vendor_torch: VendorTorch | None = None
    """The torch that supplied bundled libraries; None where none did."""
    companions: Companions | None = None
    """Pinned companion releases; None when the manifest has no companions object."""
    extensions: Mapping[str, Any] = field(default_factory=dict)
    """Top-level ``x-`` keys (``x-stand-in``), kept as they are: readers that do not know them ignore them."""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str = "compatibility.json") -> Compatibility:
        """The model of a parsed document; ManifestError (exit 2) when it is not schema-valid."""
        validate_manifest(doc, where)
        vendor, companions = doc.get("vendor_torch"), doc.get("companions")
        return cls(
            schema_version=doc["schema_version"],
            platform=doc["platform"],
            wheel=Wheel.from_json(doc["wheel"]),
            bundle=Bundle.from_json(doc["bundle"]),
            torch=Torch.from_json(doc["torch"]),
            sdk=Sdk.from_json(doc["sdk"]),
            requirements=_strings(doc["requirements"]),
            floors=Floors.from_json(doc["floors"]),
            runtime=Runtime.from_json(doc["runtime"]),
            elf=tuple(ElfRecord.from_json(r) for r in doc["elf"]),
            vendor_torch=None if vendor is None else VendorTorch.from_json(vendor),
            companions=None if companions is None else Companions.from_json(companions),
            extensions={k: v for k, v in doc.items() if k.startswith(EXTENSION_PREFIX)},
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON document (``json.dumps`` it); ``from_json(m.to_json()) == m``."""
        out = _json_object(self)
        extensions = out.pop("extensions")
        if any(not k.startswith(EXTENSION_PREFIX) for k in extensions):
            bad = sorted(k for k in extensions if not k.startswith(EXTENSION_PREFIX))
            raise ValueError(f"extension keys must start with {EXTENSION_PREFIX!r}: {bad}")
        out.update(extensions)
        return out

    def companion_pins(self) -> dict[str, str]:
        """The recorded companion pins by name; empty when there are none."""
        return {} if self.companions is None else self.companions.pins()


def read_compatibility(data: bytes, where: str) -> Compatibility:
    """Decode, schema-validate and model a compatibility.json; ManifestError (exit 2) on any problem."""
    return Compatibility.from_json(decode_manifest(data, where), where)

