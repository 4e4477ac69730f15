"""Companion pins, and the optional extras of the wheel made from them (part of configure).

``manifests/companions.toml`` is the one source of the companion versions (FlagGems, FlagTree,
FlagCX) a platform's wheel is made for.  Configure reads them here; the manifest stage records
them in ``compatibility.json`` (``companions``); a recipe's ``[[extras]]`` turn one of them into
an optional extra of the wheel: ``torch_fl[flaggems]`` requires ``flag-gems==<pin>`` plus the
requirements copied from the vendor/CUDA torch's METADATA (the ``triton`` that torch release was
made with), so the wheel's METADATA, its manifest and preflight all read the same pin.
"""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .errors import ConfigureError
from .recipe import COMPANIONS, Recipe
from .torch_info import VendorTorch

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["COMPANIONS_FILE", "companion_pins", "extra_requirements", "requires_dist"]

COMPANIONS_FILE = "manifests/companions.toml"
#: The value that says a companion is not used on a platform (it then has no pin).
NOT_USED = "none"


def _pin(value: object, table: str, key: str) -> str:
    """A pin is a released version (PEP 440), never a placeholder such as latest, unknown, * or x.y."""
    text = str(value).strip()
    try:
        canonical = str(Version(text))
    except InvalidVersion:
        canonical = None
    if canonical != text:
        # Written as PEP 440 normalizes it (no "v5"), so the pin reads the same in compatibility.json (whose
        # schema takes only that form), in Requires-Dist and in the version pip reports as installed.
        raise ConfigureError(f"{COMPANIONS_FILE}: {table}.{key} is not a released version", value,
                             f'pin the version the platform is validated with, e.g. {key} = "{canonical or "1.2.0"}" '
                             f'(or "{NOT_USED}" where it is not used)')
    return text


def companion_pins(source_dir: Path, platform: str) -> dict[str, str]:
    """The platform's pins: ``[default]`` overridden by its ``[<platform>]`` table, "none" dropped."""
    path = source_dir / COMPANIONS_FILE
    if not path.is_file():
        raise ConfigureError("companion pins not found", path, f"restore {COMPANIONS_FILE}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigureError(f"{COMPANIONS_FILE} is not valid TOML", exc, "fix it") from None
    for table, values in data.items():
        if not isinstance(values, dict):
            raise ConfigureError(f"{COMPANIONS_FILE}: {table} must be a table", values,
                                 "write [default] or [<platform>] tables of pins")
        for key in values:
            if key not in COMPANIONS:
                raise ConfigureError(f"unknown companion in {COMPANIONS_FILE}", f"{table}.{key}",
                                     "one of " + ", ".join(COMPANIONS))
    pins = {**data.get("default", {}), **data.get(platform, {})}
    where = {k: (platform if k in data.get(platform, {}) else "default") for k in pins}
    return {k: _pin(v, where[k], k) for k, v in sorted(pins.items()) if str(v) != NOT_USED}


def _from_vendor_torch(name: str, vendor: VendorTorch | None, extra: str) -> str:
    source = vendor.source if vendor is not None else "the vendor torch"
    for line in vendor.requires if vendor is not None else ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        # Only what that torch itself installs; its own extras' requirements are not its release's pins.
        if canonicalize_name(req.name) == canonicalize_name(name) and "extra" not in str(req.marker or ""):
            return str(req)
    raise ConfigureError(f"extra {extra}: {source} does not require {name}", name,
                         "pass the vendor/CUDA torch wheel itself (its METADATA names the version), "
                         "or drop it from the recipe's extras.from_vendor_torch")


def extra_requirements(recipe: Recipe, pins: dict[str, str], vendor: VendorTorch | None) -> dict[str, tuple[str, ...]]:
    """Each extra of the recipe: its companion at the pin, then the requirements copied from the vendor torch."""
    out: dict[str, tuple[str, ...]] = {}
    for extra in recipe.extras:
        pin = pins.get(extra.companion)
        if pin is None:
            raise ConfigureError(f"extra {extra.name} needs the {extra.companion} pin for platform {recipe.platform}",
                                 COMPANIONS_FILE, f"pin {extra.companion} in [default] or [{recipe.platform}]")
        reqs = [f"{extra.distribution}=={pin}"]
        reqs += [_from_vendor_torch(name, vendor, extra.name) for name in extra.from_vendor_torch]
        out[extra.name] = tuple(reqs)
    return out


def _with_extra(requirement: str, extra: str) -> str:
    # The form PEP 621 backends write (pyproject-metadata's _build_extra_req, which scikit-build-core
    # vendors): the requirement's own marker, parenthesised only where its top level has an `or`, `and`
    # the extra.  The manifest stage compares the two forms as text, so they must be the same.
    req = Requirement(requirement)
    if req.marker is None:
        req.marker = Marker(f'extra == "{extra}"')
    elif "or" in req.marker._markers:  # noqa: SLF001 - the top level, exactly as pyproject-metadata reads it
        req.marker = Marker(f'({req.marker}) and extra == "{extra}"')
    else:
        req.marker = Marker(f'{req.marker} and extra == "{extra}"')
    return str(req)


def requires_dist(requirements: tuple[str, ...], extras: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The wheel's Requires-Dist lines: its requirements, then each extra's under ``extra == "<name>"``."""
    return (*requirements, *(_with_extra(r, name) for name, reqs in extras.items() for r in reqs))
