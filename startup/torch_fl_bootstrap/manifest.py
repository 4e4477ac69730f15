"""The wheel's ``torch_fl/compatibility.json``, read into the small typed record the bootstrap works from.

Only the fields the bootstrap uses are read; the whole document is
``manifests/compatibility.schema.json``'s, which preflight checks before install.  The typed
model of the whole document is preflight's (``torch_fl_preflight.compatibility``); this package
cannot import it (standard library only), so a test holds these fields' names, types and values
to that model.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from torch_fl_bootstrap.errors import BootstrapError
from torch_fl_bootstrap.kinds import KINDS

# typing costs milliseconds to import, and this runs on every `import torch`:
# the annotations are strings (see the __future__ import), checked by mypy only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MANIFEST = "compatibility.json"


@dataclass(frozen=True)
class Library:
    """One ELF record of the manifest."""

    path: str
    """Wheel member path, e.g. ``torch_fl/vendor_torch/libc10.so``."""
    soname: str | None
    """DT_SONAME, or None when the file has none."""
    needed: tuple[str, ...]
    """DT_NEEDED entries, in order."""
    origin: str
    """``built`` (compiled here), ``bundled`` (copied by the recipe) or ``grafted`` (auditwheel)."""

    @property
    def name(self) -> str:
        """The name the loader knows it by: its SONAME, else its file name."""
        return self.soname or os.path.basename(self.path)


@dataclass(frozen=True)
class RuntimeDirectory:
    """A directory the target must provide outside the wheel (``runtime.directories``)."""

    path: str
    """Absolute directory at the SDK's default prefix, e.g. ``/usr/local/Ascend/lib64``."""
    env: str | None
    """The variable that moves the SDK prefix (the directory moves with it), or None."""
    libraries: tuple[str, ...]
    """SONAMEs that must be in that directory."""


@dataclass(frozen=True)
class Manifest:
    """What the bootstrap reads of one installed wheel's ``compatibility.json``."""

    path: str
    """The file it was read from (its hash keys the forked-libtorch view)."""
    kind: str
    """``bundle.kind``: a name of the kinds table (``kinds.py``)."""
    platform: str
    """The recipe's platform name, e.g. ``host-forked``."""
    wheel_version: str
    """The torch_fl version of the wheel, e.g. ``2.13.0+host.forked``."""
    bundle_directory: str | None
    """Wheel-relative directory of the bundled libraries, or None when nothing is bundled."""
    torch_requirement: str
    """The wheel's requirement on torch, e.g. ``torch==2.13.0``."""
    requirements: tuple[str, ...]
    """All of the wheel's Python requirements."""
    libraries: tuple[Library, ...]
    """One record per ELF file in the wheel."""
    sdk_name: str
    """The vendor SDK's name (``host`` where there is none)."""
    sdk_root: str | None
    """The SDK's default prefix on the target, or None."""
    runtime_prefixes: tuple[str, ...]
    """Further prefixes a runtime directory may sit under (moved by its variable like the SDK root)."""
    runtime_directories: tuple[RuntimeDirectory, ...]
    """What the target must provide outside the wheel."""

    @property
    def label(self) -> str:
        return f"torch_fl {self.wheel_version}"

    @property
    def reinstall(self) -> str:
        """The command that puts this wheel's files back."""
        return f"pip install --force-reinstall --no-deps torch_fl=={self.wheel_version}"

    def bundled_files(self, pkg: str) -> list[tuple[Library, str]]:
        """(record, installed path) of every bundled library; raises when one is missing."""
        if not self.bundle_directory:
            return []
        site = os.path.dirname(pkg)
        out = []
        for lib in self.libraries:
            if lib.origin != "bundled" or os.path.dirname(lib.path) != self.bundle_directory:
                continue
            path = os.path.join(site, *lib.path.split("/"))
            if not os.path.isfile(path):
                raise BootstrapError(
                    f"{self.label} is missing its bundled library {lib.path} (listed in torch_fl/{MANIFEST}; "
                    f"looked for {path}); reinstall it: {self.reinstall}")
            out.append((lib, path))
        return out


def from_document(path: str, doc: Any) -> Manifest:
    """The record of a parsed manifest; KeyError, TypeError or ValueError when a field the bootstrap reads is
    missing or of the wrong shape."""
    if doc.get("schema_version") != 1:
        raise BootstrapError(f"{path} has schema_version {doc.get('schema_version')!r}, which this torch_fl "
                             f"does not read; reinstall torch_fl: pip install --force-reinstall --no-deps torch_fl")
    sdk = doc.get("sdk") or {}
    runtime = doc["runtime"]
    kind = str(doc["bundle"]["kind"])
    if kind not in KINDS:
        raise ValueError(f"bundle.kind {kind!r} is none of {', '.join(KINDS)}")
    return Manifest(
        path=path,
        kind=kind,
        platform=str(doc.get("platform", "?")),
        wheel_version=str(doc["wheel"]["version"]),
        bundle_directory=doc["bundle"].get("directory"),
        torch_requirement=str(doc["torch"]["requirement"]),
        requirements=tuple(doc.get("requirements", ())),
        libraries=tuple(Library(str(rec["path"]), rec.get("soname"), tuple(rec.get("needed", ())),
                                str(rec.get("origin", ""))) for rec in doc["elf"]),
        sdk_name=str(sdk.get("name", "vendor")),
        sdk_root=(sdk.get("root") or {}).get("default"),
        runtime_prefixes=tuple(runtime.get("prefixes", ())),
        runtime_directories=tuple(RuntimeDirectory(str(rd["path"]), rd.get("env"), tuple(rd["libraries"]))
                                  for rd in runtime["directories"]),
    )


def load(pkg: str) -> Manifest | None:
    """``compatibility.json`` of the torch_fl package directory ``pkg``; None for a development build."""
    path = os.path.join(pkg, MANIFEST)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        # `pip install .` / editable builds have no manifest: only torch-fl-build writes it.
        return None
    try:
        return from_document(path, json.loads(data))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BootstrapError(f"torch_fl's {path} is damaged ({exc.__class__.__name__}: {exc}); "
                             f"reinstall torch_fl: pip install --force-reinstall --no-deps torch_fl") from None
