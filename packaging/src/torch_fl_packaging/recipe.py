"""Platform recipes: ``bundlers/<platform>.toml`` loaded into frozen dataclasses.

The recipes are the single source of platform facts.  This module reads them with
the standard library only (``tomllib``; ``tomli`` on Python 3.10), plus preflight's
bundle-kind policy table (``torch_fl_preflight.kinds``, standard library only too),
because the PEP 517 metadata provider (``build_metadata``) and CMake
(``cmake_config``) import it inside the build backend.  Every field has a
docstring in ``field(metadata=...)``; unknown keys are
errors with a "did you mean".

The model and its loader are one thing, kept in one file.

String values may use ``{prefix}``, which expands to the SDK's default prefix
(``[sdk] prefix``) at load time.  ``[wheel] local_version`` may use
``{sdk_version}`` and ``{cuda_version}``, which the configure stage fills.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from torch_fl_preflight.kinds import KINDS, LIBRARY_SOURCES, KindPolicy

from .errors import RecipeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on the 3.10 runners only
    import tomli as tomllib

__all__ = [
    "BUNDLE_KINDS",
    "COMPILE_BACKENDS",
    "DISTRIBUTED_ENGINES",
    "FP8_SUPPORT",
    "BundleSpec",
    "CiSpec",
    "DeviceSpec",
    "ExtraSpec",
    "Recipe",
    "RepairSpec",
    "RuntimeDirectory",
    "SdkSpec",
    "VendorTorchSpec",
    "WheelSpec",
    "available_platforms",
    "load_recipe",
    "load_recipe_file",
    "reference_markdown",
    "runtime_adapter_dir",
]

#: The closed set of bundle kinds (docs/architecture.md, "Bundle kinds"): the names of preflight's policy table.
BUNDLE_KINDS = tuple(KINDS)
#: The companion projects manifests/companions.toml may pin (compatibility.json's companions).
COMPANIONS = ("flaggems", "flagtree", "flagcx")
#: The collective engines torch_fl's process group runs (torch_fl/distributed/engines.py); none: no engine.
DISTRIBUTED_ENGINES = ("gloo", "nccl", "none")
#: Inductor's kernel backends torch_fl wires for flagos (torch_fl/compile/): its C++ backend for host memory,
#: its Triton backend for CUDA memory; none: torch.compile runs with backend="aot_eager" only.
COMPILE_BACKENDS = ("cpp", "triton", "none")
#: Whether float8 operators run on the device's own FP8 units or are emulated in wider types.
FP8_SUPPORT = ("native", "emulated")
#: Where the runtime adapters live, relative to the source tree: one folder per runtime family.
RUNTIME_ADAPTERS = Path("csrc") / "runtime"

_PLATFORM_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LOCAL_RE = re.compile(r"^[a-z0-9]+([._][a-z0-9]+)*$")
_EXTRA_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")  # a normalized extra name (PEP 685)
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")  # a runtime family or a torch device type
_DIST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def _doc(text: str, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING) -> Any:
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata={"doc": text})
    return field(default=default, metadata={"doc": text})


@dataclass(frozen=True)
class WheelSpec:
    """How the platform's wheel is named and where it is published."""

    local_version: str = _doc(
        "Local version segment: '2.13.0+<local_version>'. May use {sdk_version}, "
        "{sdk_version_nodots}, {cuda_version}."
    )
    python: str = _doc("The Python version (X.Y) the platform's release runner builds with.")
    index_lane: str = _doc("The package-index lane the wheel is published to.")


@dataclass(frozen=True)
class CiSpec:
    """The release runner of the platform."""

    runner: str = _doc("CI runner label of the machine that builds and proves the wheel.")
    has_device: bool = _doc(
        "Whether the runner has the platform's device, so the release job runs the demonstration on it. "
        "false: a CPU runner builds the wheel and verify proves it against a target made from the "
        "wheel's requirements (cuda-assets); the device run happens on a machine that has one.",
        True,
    )


@dataclass(frozen=True)
class SdkSpec:
    """The vendor SDK: where it lives and how its version is read."""

    name: str = _doc("SDK name as recorded in compatibility.json (maca, cann, dtk, cuda, ...).")
    env: str | None = _doc("Environment variable that overrides the SDK prefix.", None)
    prefix: str | None = _doc("Default SDK prefix, on the build machine and the target.", None)
    version_file: str | None = _doc(
        "Path, relative to the SDK root, of a file stating the SDK version.", None
    )
    version_pattern: str | None = _doc(
        "Regular expression with one group capturing the version in version_file; "
        "absent: the file's first non-empty line.",
        None,
    )


@dataclass(frozen=True)
class BundleSpec:
    """What the bundle stage puts into the wheel, from where, with which RPATH."""

    directory: str | None = _doc(
        "Wheel-relative directory of the bundled libraries; none for native-sdk/none.", None
    )
    source: str | None = _doc(
        "Where the libraries come from: build (the built wheel), vendor-torch "
        "(--vendor-torch), cuda-torch (the CUDA torch wheel of the installed version).",
        None,
    )
    libraries: tuple[str, ...] = _doc("File names of the libraries to bundle.", factory=tuple)
    optional_libraries: tuple[str, ...] = _doc(
        "Libraries bundled when the source has them, skipped otherwise.", factory=tuple
    )
    rpath: tuple[str, ...] = _doc(
        "RPATH every bundled library gets, in order; with keep_source_rpath, the entries it must "
        "have, appended where the kept ones lack them.", factory=tuple)
    keep_source_rpath: tuple[str, ...] = _doc(
        "Glob patterns of the source libraries' own RPATH entries to keep, in the source's order "
        "(rewritten relative to the new location); a library that then needs no change is not rewritten.",
        factory=tuple,
    )
    plugin_rpath: tuple[str, ...] = _doc(
        "Entries put in front of the plugin's own RPATH (the SDK library directories).",
        factory=tuple,
    )


@dataclass(frozen=True)
class RuntimeDirectory:
    """A directory the target must provide, and the libraries it must hold."""

    path: str = _doc("Absolute directory on the target, e.g. /opt/maca/lib.")
    env: str | None = _doc("Environment variable whose value replaces the SDK prefix.", None)
    libraries: tuple[str, ...] = _doc("SONAMEs that must be found in the directory.", factory=tuple)


@dataclass(frozen=True)
class RepairSpec:
    """What auditwheel repair must leave alone beyond the generated exclusions."""

    exclude: tuple[str, ...] = _doc(
        "SONAME globs never grafted (vendor driver, pip-provided runtimes).", factory=tuple
    )


@dataclass(frozen=True)
class VendorTorchSpec:
    """Where a vendor or CUDA torch comes from when --vendor-torch is not given."""

    default: str | None = _doc(
        "build-env: the build environment's own torch/lib (on a vendor runner, the vendor's torch; "
        "it must link the vendor runtime unless the recipe is a stand-in); "
        "download: the torch wheel of the installed version from index.",
        None,
    )
    index: str | None = _doc("Package index the torch wheel is downloaded from.", None)
    index_env: str | None = _doc("Environment variable that overrides index.", None)


@dataclass(frozen=True)
class ExtraSpec:
    """An optional extra of the platform's wheel: ``pip install 'torch_fl[<name>]'``."""

    name: str = _doc("The extra's name (lowercase, PEP 685).")
    companion: str = _doc(
        "The companion of manifests/companions.toml the extra installs, pinned exactly to the platform's pin "
        "there (the version compatibility.json records)."
    )
    distribution: str = _doc("The companion's distribution name on the package index, e.g. flag-gems.")
    from_vendor_torch: tuple[str, ...] = _doc(
        "Distributions whose requirement is copied, with its marker, from the METADATA of the vendor/CUDA "
        "torch the bundled libraries come from: the version that torch release was made with (triton).",
        factory=tuple,
    )


@dataclass(frozen=True)
class DeviceSpec:
    """The platform table's entry: the runtime the plugin is built with and what torch_fl runs on it.

    CMake reads it (``torch_fl_packaging.cmake_config``), and torch_fl reads the same facts from its
    generated build config (``torch_fl/_build_config.py``)."""

    runtime: str = _doc(
        "Runtime family: the adapter folder in csrc/runtime/ the plugin is built with: host (the emulated "
        "runtime), cuda (CUDA and CUDA-compatible SDKs), or a vendor adapter. A family without a folder in "
        "the source tree makes the platform recipe only: never scheduled for release."
    )
    kernel_device: str = _doc(
        "torch device type of the kernel views (flagos memory lent to PyTorch's own kernels): cpu, cuda, ...; "
        "none where no torch device shares flagos memory."
    )
    distributed: str = _doc("Collective engine of the flagos process group: " + ", ".join(DISTRIBUTED_ENGINES) + ".")
    compile: str = _doc("Inductor kernel backend for flagos: " + ", ".join(COMPILE_BACKENDS) + ".")
    fp8: str = _doc("float8 operators: native (the device has FP8 units) or emulated (computed in bf16/fp32).")
    cuda_toolkit: str | None = _doc(
        "cuda runtime only: the CUDA toolkit to build with (CMake's CUDAToolkit_ROOT), where a vendor SDK "
        "carries its own CUDA-compatible toolkit; may use {prefix}, which follows [sdk] env at build time. "
        "Absent: the build machine's CUDA toolkit.",
        None,
    )


@dataclass(frozen=True)
class Recipe:
    """One platform: its bundle kind and every fact the pipeline needs about it."""

    platform: str = _doc("The platform name; equals the recipe's file name.")
    kind: str = _doc("Bundle kind: " + ", ".join(BUNDLE_KINDS) + ".")
    summary: str = _doc("One line saying what the platform is.")
    device: DeviceSpec = _doc("The platform table's entry: runtime family, kernel device, engines, FP8.")
    wheel: WheelSpec = _doc("Wheel naming and publishing.")
    ci: CiSpec = _doc("Release runner.")
    stand_in: bool = _doc("A test stand-in that is never released (host-forked).", False)
    sdk: SdkSpec | None = _doc("The vendor SDK; none for host.", None)
    bundle: BundleSpec = _doc("What is bundled.", factory=BundleSpec)
    runtime: tuple[RuntimeDirectory, ...] = _doc(
        "Target-side runtime directories ([[runtime]] tables).", factory=tuple
    )
    runtime_prefixes: tuple[str, ...] = _doc(
        "Absolute prefixes an RPATH entry may name; default: the SDK prefix.", factory=tuple
    )
    system_libraries: tuple[str, ...] = _doc(
        "SONAMEs the target's own system provides (the vendor driver, e.g. libcuda.so.1), never the wheel "
        "or its requirements: recorded in compatibility.json; a build machine without them records them "
        "as host requirements instead of failing verify.", factory=tuple
    )
    repair: RepairSpec = _doc("auditwheel exclusions.", factory=RepairSpec)
    vendor_torch: VendorTorchSpec = _doc("Vendor/CUDA torch source.", factory=VendorTorchSpec)
    extras: tuple[ExtraSpec, ...] = _doc("Optional extras of the wheel ([[extras]] tables).", factory=tuple)

    # -- derived facts --------------------------------------------------------
    @property
    def policy(self) -> KindPolicy:
        """The rules of the recipe's bundle kind (preflight's policy table)."""
        return KINDS[self.kind]

    @property
    def exact_torch(self) -> bool:
        """Whether the wheel pins torch exactly (it bundles libtorch pieces)."""
        return self.policy.pins_torch

    @property
    def builds_cuda_runtime(self) -> bool:
        """The plugin is built with the cuda runtime adapter (CUDA, or a CUDA-compatible vendor SDK)."""
        return self.device.runtime == "cuda"

    def recipe_only(self, source_dir: Path) -> bool:
        """The runtime family has no adapter in ``source_dir``: the platform cannot be built, only described."""
        return not runtime_adapter_dir(source_dir, self.device.runtime).is_dir()

    @property
    def bundles_libraries(self) -> bool:
        return bool(self.bundle.libraries or self.bundle.optional_libraries)

    @property
    def prefixes(self) -> tuple[str, ...]:
        if self.runtime_prefixes:
            return self.runtime_prefixes
        return (self.sdk.prefix,) if self.sdk and self.sdk.prefix else ()

    def fields_doc(self) -> dict[str, str]:
        return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(self)}


# -- loading ------------------------------------------------------------------

def _did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    options = list(choices)
    close = difflib.get_close_matches(word, options, n=1) or [o for o in options if word and o.startswith(word)][:1]
    return f"did you mean {close[0]!r}?" if close else ""


def _expand(value: str, subst: dict[str, str]) -> str:
    for key, repl in subst.items():
        value = value.replace("{" + key + "}", repl)
    return value


def _convert(tp: Any, value: Any, where: str, subst: dict[str, str]) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _convert(args[0], value, where, subst)
    if origin is tuple:
        (item_tp, _) = typing.get_args(tp)
        if not isinstance(value, list):
            raise RecipeError(f"{where} must be a list", type(value).__name__, "write it as [...]")
        return tuple(_convert(item_tp, v, f"{where}[{i}]", subst) for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise RecipeError(f"{where} must be a table", type(value).__name__, "write it as [section]")
        return _build(tp, value, where, subst)
    if tp is bool:
        if not isinstance(value, bool):
            raise RecipeError(f"{where} must be true or false", value, "use a TOML boolean")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise RecipeError(f"{where} must be a string", value, "quote it")
        return _expand(value, subst)
    raise AssertionError(tp)  # pragma: no cover - the model only uses the types above


def _build(cls: Any, data: dict[str, Any], where: str, subst: dict[str, str]) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in names:
            hint = _did_you_mean(key, names)
            raise RecipeError(f"unknown key {where}.{key}".replace("(root).", ""), key, hint or
                              "allowed: " + ", ".join(sorted(names)))
        kwargs[key] = _convert(hints[key], value, f"{where}.{key}".lstrip("."), subst)
    missing = [
        n for n, f in names.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise RecipeError(f"{where or 'recipe'} is missing {missing[0]!r}", None,
                          f"add {missing[0]} = ... ({names[missing[0]].metadata.get('doc', '')})")
    return cls(**kwargs)


def _validate(recipe: Recipe, path: Path) -> None:
    def bad(problem: str, value: object, fix: str) -> RecipeError:
        return RecipeError(f"{path.name}: {problem}", value, fix)

    if recipe.platform != path.stem:
        raise bad("platform differs from the file name", recipe.platform, f"set platform = {path.stem!r}")
    if not _PLATFORM_RE.match(recipe.platform):
        raise bad("platform is not a lowercase name", recipe.platform, "use [a-z0-9-]")
    if recipe.kind not in BUNDLE_KINDS:
        raise bad("unknown bundle kind", recipe.kind, _did_you_mean(recipe.kind, BUNDLE_KINDS)
                  or "one of " + ", ".join(BUNDLE_KINDS))
    rules = recipe.policy
    d = recipe.device
    for key, value, choices in (("distributed", d.distributed, DISTRIBUTED_ENGINES),
                                ("compile", d.compile, COMPILE_BACKENDS), ("fp8", d.fp8, FP8_SUPPORT)):
        if value not in choices:
            raise bad(f"unknown device.{key}", value, _did_you_mean(value, choices) or "one of " + ", ".join(choices))
    for key, value in (("runtime", d.runtime), ("kernel_device", d.kernel_device)):
        if not _NAME_RE.match(value):
            raise bad(f"device.{key} is not a lowercase name", value, 'e.g. "cuda"')
    if d.cuda_toolkit is not None and not (recipe.builds_cuda_runtime and d.cuda_toolkit.startswith("/")):
        raise bad("device.cuda_toolkit names the CUDA toolkit of the cuda runtime", d.cuda_toolkit,
                  'use runtime = "cuda" and an absolute path, e.g. "{prefix}/cuda"')
    local_probe = _expand(recipe.wheel.local_version,
                          {"sdk_version": "1.0", "sdk_version_nodots": "10", "cuda_version": "1.0"})
    if "{" in local_probe or not _LOCAL_RE.match(local_probe):
        raise bad("wheel.local_version is not a valid local version template",
                  recipe.wheel.local_version, "use lowercase letters, digits, dots and {sdk_version}")
    if not re.match(r"^3\.\d+$", recipe.wheel.python):
        raise bad("wheel.python must be X.Y", recipe.wheel.python, 'e.g. python = "3.11"')
    b = recipe.bundle
    if b.source is not None and b.source not in LIBRARY_SOURCES:
        raise bad("unknown bundle.source", b.source,
                  _did_you_mean(b.source, LIBRARY_SOURCES) or "one of " + ", ".join(LIBRARY_SOURCES))
    if rules.bundles_libraries and not (b.libraries and b.directory and b.source):
        raise bad(f"kind {recipe.kind} bundles libraries", recipe.kind,
                  "set bundle.directory, bundle.source and bundle.libraries")
    if not rules.bundles_libraries and (recipe.bundles_libraries or b.directory):
        raise bad(f"kind {recipe.kind} bundles nothing", b.libraries or b.directory,
                  "remove bundle.libraries and bundle.directory")
    if rules.library_source and b.source != rules.library_source:
        raise bad(f"kind {recipe.kind} takes its libraries from {rules.library_source}", b.source,
                  f"set bundle.source = {rules.library_source!r}")
    if b.directory and (b.directory.startswith("/") or ".." in b.directory.split("/")):
        raise bad("bundle.directory must be wheel-relative", b.directory, "e.g. torch_fl/lib")
    # The host-forked stand-in has no vendor driver, hence no prefix.
    if rules.needs_sdk_prefix and not recipe.stand_in and not (recipe.sdk and recipe.sdk.prefix):
        raise bad(f"kind {recipe.kind} needs an SDK prefix", recipe.kind, "add [sdk] prefix = ...")
    if rules.sdk_dirs_in_plugin_rpath and not b.plugin_rpath:
        raise bad(f"{recipe.kind} names the SDK library directories in the plugin's RPATH", None,
                  "set bundle.plugin_rpath")
    for entry in (*b.rpath, *b.plugin_rpath):
        if not entry.startswith(("$ORIGIN", "/")):
            raise bad("an RPATH entry must start with $ORIGIN or /", entry, "use $ORIGIN-relative paths")
        if entry.startswith("/") and not any(entry == p or entry.startswith(p.rstrip("/") + "/")
                                             for p in recipe.prefixes):
            raise bad("absolute RPATH entry outside the platform's prefixes", entry,
                      "add its prefix to runtime_prefixes or make it $ORIGIN-relative")
    for soname in recipe.system_libraries:
        if "/" in soname or not soname.startswith("lib") or ".so" not in soname:
            raise bad("system_libraries holds SONAMEs", soname, 'e.g. "libcuda.so.1"')
    for rd in recipe.runtime:
        if not rd.path.startswith("/"):
            raise bad("runtime path must be absolute", rd.path, "e.g. {prefix}/lib")
        if rd.env is not None and not _ENV_RE.match(rd.env):
            raise bad("runtime env is not a variable name", rd.env, "e.g. MACA_PATH")
    if recipe.sdk and recipe.sdk.version_pattern:
        try:
            if re.compile(recipe.sdk.version_pattern).groups != 1:
                raise bad("sdk.version_pattern needs exactly one group", recipe.sdk.version_pattern,
                          "wrap the version in ( )")
        except re.error as exc:
            raise bad("sdk.version_pattern is not a regular expression", exc, "fix the pattern") from None
    if recipe.vendor_torch.default not in (None, "build-env", "download"):
        raise bad("unknown vendor_torch.default", recipe.vendor_torch.default, "build-env or download")
    names = [e.name for e in recipe.extras]
    for extra in recipe.extras:
        if not _EXTRA_RE.match(extra.name) or names.count(extra.name) > 1:
            raise bad("extras.name must be a unique lowercase extra name", extra.name, 'e.g. name = "flaggems"')
        if extra.companion not in COMPANIONS:
            raise bad("unknown extras.companion", extra.companion,
                      _did_you_mean(extra.companion, COMPANIONS) or "one of " + ", ".join(COMPANIONS))
        for dist in (extra.distribution, *extra.from_vendor_torch):
            if not _DIST_RE.match(dist):
                raise bad("not a distribution name", dist, 'e.g. "flag-gems"')
        # Only these kinds have a vendor/CUDA torch whose METADATA the requirements can be copied from.
        if extra.from_vendor_torch and not rules.bundles_libtorch:
            raise bad(f"kind {recipe.kind} has no vendor torch to copy extras.from_vendor_torch from",
                      list(extra.from_vendor_torch), "drop from_vendor_torch")


def load_recipe_file(path: Path) -> Recipe:
    """Load and validate one recipe file."""
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise RecipeError("cannot read recipe", path, str(exc.strerror)) from None
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{path.name} is not valid TOML", exc, "fix the syntax") from None
    sdk = data.get("sdk") if isinstance(data.get("sdk"), dict) else {}
    subst = {"prefix": str(sdk.get("prefix", "{prefix}")).rstrip("/")}
    recipe: Recipe = _build(Recipe, data, "", subst)
    _validate(recipe, path)
    return recipe


def runtime_adapter_dir(source_dir: Path, runtime: str) -> Path:
    """The folder of ``runtime``'s adapter in the source tree ``source_dir`` (csrc/runtime/<runtime>)."""
    return source_dir / RUNTIME_ADAPTERS / runtime


def available_platforms(bundlers_dir: Path) -> list[str]:
    return sorted(p.stem for p in bundlers_dir.glob("*.toml"))


def load_recipe(platform: str, bundlers_dir: Path) -> Recipe:
    """Load ``bundlers/<platform>.toml``; an unknown platform names the closest one."""
    path = bundlers_dir / f"{platform}.toml"
    if not _PLATFORM_RE.match(platform) or not path.is_file():
        known = available_platforms(bundlers_dir)
        hint = _did_you_mean(platform, known)
        raise RecipeError("unknown platform", platform,
                          (hint + " " if hint else "") + "known: " + ", ".join(known))
    return load_recipe_file(path)


def reference_markdown() -> str:
    """The recipe keys and their meaning, as a Markdown table (rendered into packaging/README.md)."""
    sections: list[tuple[Any, str]] = [
        (Recipe, ""), (DeviceSpec, "[device] "), (WheelSpec, "[wheel] "), (CiSpec, "[ci] "), (SdkSpec, "[sdk] "),
        (BundleSpec, "[bundle] "),
        (RuntimeDirectory, "[[runtime]] "), (RepairSpec, "[repair] "), (VendorTorchSpec, "[vendor_torch] "),
        (ExtraSpec, "[[extras]] "),
    ]
    tables = {"device", "wheel", "ci", "sdk", "bundle", "runtime", "repair", "vendor_torch", "extras"}
    rows = ["| key | meaning |", "|---|---|"]
    for cls, prefix in sections:
        for f in dataclasses.fields(cls):
            if cls is Recipe and f.name in tables:
                continue
            rows.append(f"| `{prefix}{f.name}` | {f.metadata['doc']} |")
    return "\n".join(rows) + "\n"
