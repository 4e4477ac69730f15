"""Stage 1, configure: resolve every input before anything is compiled.

Platform (recipe), installed torch (version, git version, C++ ABI: ``torch_info``), SDK root
and version, vendor or CUDA torch (``vendor_torch``, downloading through ``torch_download``),
wheel version and requirements, companion pins, patchelf.  Everything that can make the run
unusable is found here and raised as a ``ConfigureError``/``RecipeError``/``ToolError`` (exit 2)
while ``--out`` is still untouched.  Nothing here imports torch: its files are read.
"""

from __future__ import annotations

import os
import re
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from .companions import companion_pins, extra_requirements, requires_dist
from .elf_patch import find_patchelf
from .errors import ConfigureError, RecipeError
from .recipe import Recipe, load_recipe
from .torch_info import TorchInfo, VendorTorch, base_version, installed_torch
from .vendor_torch import cuda_requirements, resolve_vendor

__all__ = ["Config", "WheelNameProblem", "check_concrete_version", "configure", "wheel_name_problem"]

#: Values that name no version at all; docs/architecture.md, "compatibility.json": "absent means unknown".
PLACEHOLDER_VERSIONS = frozenset({"unknown", "latest", "any", "none", "*", "x", "n/a", "na", "tbd", "current"})
_CONCRETE_RE = re.compile(r"^[0-9][0-9A-Za-z._+-]*$")


@dataclass(frozen=True)
class Config:
    recipe: Recipe
    source_dir: Path
    out_dir: Path
    torch: TorchInfo
    torch_lib: Path
    sdk_root: Path | None
    sdk_version: str | None
    vendor: VendorTorch | None
    local_version: str
    wheel_version: str
    torch_requirement: str
    requirements: tuple[str, ...]
    companions: dict[str, str]
    #: extra name -> its requirements, without the extra marker (as pyproject's optional-dependencies).
    extras: dict[str, tuple[str, ...]]
    patchelf: Path
    source_date_epoch: int
    compress_level: int
    from_wheel: Path | None = None
    python: str = field(default_factory=lambda: sys.executable)
    #: The interpreter of the environment verify proves the wheel against.
    target_python: str = field(default_factory=lambda: sys.executable)

    @property
    def requires_dist(self) -> tuple[str, ...]:
        """The wheel's Requires-Dist: the requirements, then each extra's under its extra marker."""
        return requires_dist(self.requirements, self.extras)

    @property
    def build_env(self) -> dict[str, str]:
        """The environment the PEP 517 build reads (build_metadata, CMake)."""
        import json

        return {
            "FLAGOS_PLATFORM": self.recipe.platform,
            "FLAGOS_WHEEL_LOCAL_VERSION": self.local_version,
            "FLAGOS_WHEEL_REQUIREMENTS": json.dumps(list(self.requirements)),
            "FLAGOS_WHEEL_EXTRAS": json.dumps({k: list(v) for k, v in self.extras.items()}),
            "SOURCE_DATE_EPOCH": str(self.source_date_epoch),
        }


def check_concrete_version(value: str, what: str, fix: str) -> str:
    v = value.strip()
    if v.lower() in PLACEHOLDER_VERSIONS or not _CONCRETE_RE.match(v):
        raise ConfigureError(f"{what} is not a concrete version", value, fix)
    return v


# -- SDK ------------------------------------------------------------------------

def _resolve_sdk_root(recipe: Recipe, given: Path | None) -> Path | None:
    sdk = recipe.sdk
    if given is not None:
        if not given.is_dir():
            raise ConfigureError("SDK root not found", given, "pass the directory the vendor SDK is installed in")
        return given.resolve()
    if sdk is None or sdk.prefix is None:
        return None
    env_value = os.environ.get(sdk.env) if sdk.env else None
    candidate = Path(env_value) if env_value else Path(sdk.prefix)
    if not candidate.is_dir():
        hint = f" or set {sdk.env}" if sdk.env else ""
        raise ConfigureError(f"{sdk.name} SDK root not found", candidate,
                             f"install the SDK there, or pass --sdk-root DIR{hint}")
    return candidate.resolve()


def read_sdk_version(recipe: Recipe, root: Path) -> str | None:
    sdk = recipe.sdk
    if sdk is None or sdk.version_file is None:
        return None
    path = root / sdk.version_file
    if not path.is_file():
        return None
    text = path.read_text(errors="replace")
    if sdk.version_pattern:
        m = re.search(sdk.version_pattern, text)
        return m.group(1).strip() if m else None
    return next((line.strip() for line in text.splitlines() if line.strip()), None)


def _resolve_sdk_version(recipe: Recipe, root: Path | None, given: str | None,
                         vendor: VendorTorch | None) -> str | None:
    fix = "pass the real version, e.g. --sdk-version 3.8.1"
    if given is not None:
        given = check_concrete_version(given, "--sdk-version", fix)
    if recipe.policy.sdk_version_from_torch:
        found = vendor.info.cuda if vendor else None
    else:
        found = read_sdk_version(recipe, root) if root else None
    if found is not None:
        found = check_concrete_version(found, f"the SDK version read from {root}",
                                       "fix the SDK's version file or pass --sdk-version")
    if given and found and given != found:
        raise ConfigureError("--sdk-version differs from the SDK tree", f"{given} vs {found}",
                             "drop --sdk-version or point --sdk-root at the SDK you name")
    return given or found


def _local_version(recipe: Recipe, sdk_version: str | None, vendor: VendorTorch | None) -> str:
    template = recipe.wheel.local_version
    values = {
        "sdk_version": sdk_version,
        "sdk_version_nodots": sdk_version.replace(".", "") if sdk_version else None,
        "cuda_version": vendor.info.cuda if vendor else None,
    }
    out = template
    for key, value in values.items():
        if "{" + key + "}" in out:
            if value is None:
                raise ConfigureError(f"platform {recipe.platform} needs its SDK version for the wheel version",
                                     template, "pass --sdk-version or --sdk-root with a version file")
            out = out.replace("{" + key + "}", value.lower().replace("-", "."))
    if not re.match(r"^[a-z0-9]+([._][a-z0-9]+)*$", out):
        raise ConfigureError("the wheel's local version is not valid", out, "check the SDK version")
    return out


def _source_date_epoch() -> int:
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw is None:
        return int(time.time())
    try:
        value = int(raw)
    except ValueError:
        raise ConfigureError("SOURCE_DATE_EPOCH is not an integer", raw,
                             "unset it or give seconds since 1970") from None
    # ZIP timestamps start at 1980.
    return max(value, 315532800)


@dataclass(frozen=True)
class WheelNameProblem:
    """Why a wheel's file name is not the configured torch_fl wheel (the parts of a PipelineError)."""

    problem: str
    value: str
    fix: str


def wheel_name_problem(path: Path, wheel_version: str | None) -> WheelNameProblem | None:
    """None when ``path`` is named as the torch_fl wheel of ``wheel_version`` (any version when None).

    One check for both origins of the plugin wheel: ``--from-wheel`` (the user's input, exit 2)
    and the build stage's own output (a failed build, exit 1).
    """
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        return WheelNameProblem("invalid wheel file name", path.name,
                                f"{exc}; a wheel is named name-version-python-abi-platform.whl")
    if name != "torch-fl":
        return WheelNameProblem("the wheel is not torch_fl", path.name, "build the torch_fl source tree")
    if wheel_version is not None and str(version) != wheel_version:
        return WheelNameProblem("the wheel has another version than configured", f"{version} vs {wheel_version}",
                                "build with torch-fl-build (it passes FLAGOS_WHEEL_LOCAL_VERSION), "
                                "or rebuild --from-wheel")
    return None


def _check_from_wheel(path: Path, wheel_version: str | None) -> None:
    """``--from-wheel`` is input: a bad name or an unreadable archive is refused here (exit 2),
    before bundle would trip over it half-way."""
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "not found"
        raise ConfigureError(f"--from-wheel {what}", path, "pass a built torch_fl wheel file")
    bad = wheel_name_problem(path, wheel_version)
    if bad is not None:
        raise ConfigureError(f"--from-wheel: {bad.problem}", bad.value, bad.fix)
    if wheel_version is not None:
        return
    try:
        with zipfile.ZipFile(path) as zf:
            corrupt = zf.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise ConfigureError("--from-wheel is not a readable zip archive", f"{path}: {exc}",
                             "the file is truncated or corrupt; build or copy the wheel again") from None
    if corrupt is not None:
        raise ConfigureError("--from-wheel has a corrupt member", f"{path}: {corrupt}",
                             "the file is damaged; build or copy the wheel again")


def configure(
    *,
    platform: str,
    source_dir: Path,
    out_dir: Path,
    sdk_root: Path | None = None,
    sdk_version: str | None = None,
    vendor_torch: Path | None = None,
    from_wheel: Path | None = None,
    compress_level: int = 6,
    target_python: Path | None = None,
) -> Config:
    source_dir = source_dir.resolve()
    bundlers = source_dir / "bundlers"
    if not bundlers.is_dir():
        raise RecipeError("no bundlers/ directory in the source tree", source_dir,
                          "run from the torch_fl checkout or pass --source")
    recipe = load_recipe(platform, bundlers)
    patchelf, _ = find_patchelf()
    if from_wheel is not None:
        _check_from_wheel(from_wheel, None)
    if not 0 <= compress_level <= 9:
        raise ConfigureError("--compress-level out of range", compress_level, "use 0..9")
    if target_python is not None and not target_python.is_file():
        raise ConfigureError("--target-python not found", target_python, "pass the target environment's python")
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigureError("--out is not a directory", out_dir, "pass a directory")
    if sdk_version is not None:
        check_concrete_version(sdk_version, "--sdk-version", "pass the real version, e.g. --sdk-version 3.8.1")
    torch, torch_lib = installed_torch()
    root = _resolve_sdk_root(recipe, sdk_root)
    # The SDK is checked before the vendor torch: it is cheaper, and the cuda-assets
    # kind (whose version comes from the CUDA torch) has no SDK tree to check.
    version: str | None = None
    if not recipe.policy.sdk_version_from_torch:
        version = _resolve_sdk_version(recipe, root, sdk_version, None)
        if recipe.sdk and recipe.sdk.version_file and version is None:
            where = root / recipe.sdk.version_file if root else recipe.sdk.version_file
            raise ConfigureError(f"cannot read the {recipe.sdk.name} SDK version", where,
                                 "pass --sdk-version X.Y.Z")
    vendor = resolve_vendor(recipe, vendor_torch, torch, torch_lib)
    if recipe.policy.sdk_version_from_torch:
        version = _resolve_sdk_version(recipe, root, sdk_version, vendor)
    local = _local_version(recipe, version, vendor)
    base = base_version(torch.version)
    if recipe.policy.pins_torch:
        torch_req = f"torch=={base}"
    else:
        major, minor = Version(base).release[:2]
        torch_req = f"torch>={major}.{minor},<{major}.{minor + 1}"
    reqs = [torch_req]
    if recipe.policy.runtime_from_requirements and vendor is not None:
        reqs += cuda_requirements(vendor)
    companions = companion_pins(source_dir, recipe.platform)
    if from_wheel is not None:
        _check_from_wheel(from_wheel, f"{base}+{local}")
    return Config(
        recipe=recipe,
        source_dir=source_dir,
        out_dir=out_dir,
        torch=torch,
        torch_lib=torch_lib,
        sdk_root=root,
        sdk_version=version,
        vendor=vendor,
        local_version=local,
        wheel_version=f"{base}+{local}",
        torch_requirement=torch_req,
        requirements=tuple(dict.fromkeys(reqs)),
        companions=companions,
        extras=extra_requirements(recipe, companions, vendor),
        patchelf=patchelf,
        source_date_epoch=_source_date_epoch(),
        compress_level=compress_level,
        from_wheel=from_wheel,
        target_python=str(target_python) if target_python else sys.executable,
    )
