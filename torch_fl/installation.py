"""What was installed: this torch_fl's distribution metadata and its ``compatibility.json``.

A wheel made by ``torch-fl-build`` carries ``torch_fl/compatibility.json`` (platform, bundle kind,
companion pins, ...) and declares its optional extras in METADATA; a development install
(``pip install --no-build-isolation -e .`` or ``.``) has neither manifest nor extras.  Advice that
names an install command reads them here, so that it names only what this wheel offers.

Standard library only: ``python -m torch_fl`` reads it even where the plugin fails to load.
"""

from __future__ import annotations

import importlib.metadata
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FLAGGEMS_EXTRA", "Installation", "flaggems_install_advice", "installation"]

DISTRIBUTION = "torch_fl"
MANIFEST = Path(__file__).with_name("compatibility.json")
#: The optional extra that installs the flaggems provider's companions, where a platform's recipe declares it.
FLAGGEMS_EXTRA = "flaggems"


@dataclass(frozen=True)
class Installation:
    version: str | None
    """The installed distribution's version; None when torch_fl runs from files pip did not install."""
    extras: tuple[str, ...] = ()
    """The optional extras its METADATA declares (``Provides-Extra``)."""
    manifest: dict[str, Any] | None = None
    """``compatibility.json``; None for a development install, which has none."""
    manifest_error: str | None = None
    """Why ``compatibility.json`` exists but cannot be read."""
    location: str = field(default=str(Path(__file__).parent))
    """The package directory."""

    @property
    def platform(self) -> str | None:
        return None if self.manifest is None else str(self.manifest.get("platform"))

    @property
    def bundle_kind(self) -> str | None:
        return None if self.manifest is None else str((self.manifest.get("bundle") or {}).get("kind"))

    def companion(self, name: str) -> str | None:
        pins = (self.manifest or {}).get("companions") or {}
        value = pins.get(name)
        return None if value is None else str(value)


def installation() -> Installation:
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version, extras = None, ()
    else:
        version = dist.version
        extras = tuple(dist.metadata.get_all("Provides-Extra") or ())
    manifest = error = None
    try:
        manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        error = f"{MANIFEST}: {exc}"
    return Installation(version, extras, manifest, error)


def flaggems_install_advice(platform: str) -> str:
    """How to install FlagGems for this torch_fl: its extra where the wheel has one, else FlagGems itself.

    Only the platforms whose recipe declares the ``flaggems`` extra (cuda) have it; naming it
    elsewhere sends pip after an extra the wheel lacks (pip only warns and installs nothing).
    """
    inst = installation()
    if FLAGGEMS_EXTRA in inst.extras:
        return f"pip install 'torch_fl[{FLAGGEMS_EXTRA}]'"
    pin = inst.companion(FLAGGEMS_EXTRA)
    release = f"flag-gems=={pin}" if pin else "flag-gems"
    return (f"the torch_fl wheel of platform {platform} has no {FLAGGEMS_EXTRA} extra: pip install '{release}' "
            f"(a FlagGems build that supports this platform's kernel device)")
