"""scikit-build-core dynamic-metadata provider for the torch_fl wheel.

The wheel's version is the version of the torch it is built against plus a local
segment naming the platform (``2.13.0+host``); its torch requirement is the minor
line for most bundle kinds and exact where libtorch pieces are bundled.  The
release pipeline (``torch-fl-build``'s configure stage) resolves both and hands
them over in ``FLAGOS_WHEEL_LOCAL_VERSION`` / ``FLAGOS_WHEEL_REQUIREMENTS``, and the
optional extras (``torch_fl[flaggems]``: the companion pin and what the CUDA torch
requires with it) in ``FLAGOS_WHEEL_EXTRAS``; a plain ``pip install
--no-build-isolation .`` falls back to the platform recipe's ``[wheel] local_version``
and the torch minor line, and declares no extra (its pins need the CUDA torch's
METADATA, which only configure reads).

This module runs inside the PEP 517 backend, so it uses the standard library only
and never imports torch (reading torch's distribution metadata is enough).
"""

from __future__ import annotations

import json
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from packaging.version import Version

__all__ = ["dynamic_metadata", "get_requires_for_dynamic_metadata"]

_REPO_ROOT = Path(__file__).resolve().parents[3]


def _importable_kinds_table() -> None:
    """The recipe loader reads preflight's bundle-kind table; a development build without preflight
    installed reads it from the source tree (standard library only, like this module)."""
    import importlib.util
    import sys

    if importlib.util.find_spec("torch_fl_preflight") is None:
        sys.path.append(str(_REPO_ROOT / "preflight" / "src"))


def _torch_version() -> Version:
    try:
        return Version(version("torch"))
    except PackageNotFoundError:
        raise RuntimeError(
            "torch is not installed in the build environment; install it first "
            "(pip install torch==2.13.0) and build with --no-build-isolation"
        ) from None


def _platform() -> str:
    return os.environ.get("FLAGOS_PLATFORM", "host")


def _recipe_local_version(platform: str) -> str:
    # The recipe loader is standard-library only, so it is safe inside the backend.
    _importable_kinds_table()
    from torch_fl_packaging.errors import RecipeError
    from torch_fl_packaging.recipe import load_recipe

    try:
        local = load_recipe(platform, _REPO_ROOT / "bundlers").wheel.local_version
    except RecipeError as exc:
        raise RuntimeError(exc.line()) from None
    if "{" in local:
        raise RuntimeError(
            f"platform {platform!r} needs its SDK version for the wheel version; "
            "build it with torch-fl-build, which resolves it"
        )
    return local


def _version() -> str:
    local = os.environ.get("FLAGOS_WHEEL_LOCAL_VERSION") or _recipe_local_version(_platform())
    return f"{_torch_version().base_version}+{local}"


def _dependencies() -> list[str]:
    given = os.environ.get("FLAGOS_WHEEL_REQUIREMENTS")
    if given:
        reqs = json.loads(given)
        if not isinstance(reqs, list) or not all(isinstance(r, str) for r in reqs):
            raise RuntimeError("FLAGOS_WHEEL_REQUIREMENTS must be a JSON list of requirement strings")
        return reqs
    _importable_kinds_table()
    from torch_fl_packaging.recipe import load_recipe

    torch_version = _torch_version()
    if load_recipe(_platform(), _REPO_ROOT / "bundlers").exact_torch:
        # Bundled libtorch pieces are only valid against the torch they came from.
        return [f"torch=={torch_version.base_version}"]
    major, minor = torch_version.release[:2]
    return [f"torch>={major}.{minor},<{major}.{minor + 1}"]


def _optional_dependencies() -> dict[str, list[str]]:
    given = os.environ.get("FLAGOS_WHEEL_EXTRAS")
    if not given:
        return {}
    extras = json.loads(given)
    if not isinstance(extras, dict) or not all(
        isinstance(v, list) and all(isinstance(r, str) for r in v) for v in extras.values()
    ):
        raise RuntimeError("FLAGOS_WHEEL_EXTRAS must be a JSON object of extra name -> requirement strings")
    return extras


# `settings` is part of scikit-build-core's dynamic-metadata provider interface; this provider has none.
def dynamic_metadata(field: str, settings: dict[str, Any] | None = None) -> Any:  # noqa: ARG001
    if field == "version":
        return _version()
    if field == "dependencies":
        return _dependencies()
    if field == "optional-dependencies":
        return _optional_dependencies()
    raise RuntimeError(f"torch_fl_packaging.build_metadata cannot provide {field!r}")


def get_requires_for_dynamic_metadata(settings: dict[str, Any] | None = None) -> list[str]:  # noqa: ARG001
    return []
