"""Stage 1, configure: resolve every input before anything is compiled.

Platform (recipe), installed torch (version, git version, C++ ABI), SDK root and
version, vendor or CUDA torch, wheel version and requirements, companion pins,
patchelf.  Everything that can make the run unusable is found here and raised as
a ``ConfigureError``/``RecipeError``/``ToolError`` (exit 2) while ``--out`` is
still untouched.  Nothing here imports torch: its files are read.
"""

from __future__ import annotations

import ast
import contextlib
import email.parser
import os
import re
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from .elf_patch import find_patchelf
from .errors import ConfigureError, RecipeError
from .recipe import Recipe, load_recipe

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Config", "TorchInfo", "VendorTorch", "check_concrete_version", "configure"]

#: Values that name no version at all; design.md: "absent means unknown".
PLACEHOLDER_VERSIONS = frozenset({"unknown", "latest", "any", "none", "*", "x", "n/a", "na", "tbd", "current"})
_CONCRETE_RE = re.compile(r"^[0-9][0-9A-Za-z._+-]*$")


@dataclass(frozen=True)
class TorchInfo:
    """A torch build: the installed one or a vendor/CUDA one."""

    version: str
    git_version: str | None
    cxx11_abi: bool | None
    cuda: str | None = None


@dataclass(frozen=True)
class VendorTorch:
    """Where bundled libtorch pieces come from (forked-libtorch, cuda-assets)."""

    path: Path
    is_wheel: bool
    info: TorchInfo
    #: Requires-Dist of that torch (cuda-assets derives the runtime requirements).
    requires: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return self.path.name if self.is_wheel else f"torch/lib of torch {self.info.version}"


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
    patchelf: Path
    source_date_epoch: int
    compress_level: int
    from_wheel: Path | None = None
    python: str = field(default_factory=lambda: sys.executable)
    #: The interpreter of the environment verify proves the wheel against.
    target_python: str = field(default_factory=lambda: sys.executable)

    @property
    def build_env(self) -> dict[str, str]:
        """The environment the PEP 517 build reads (build_metadata, CMake)."""
        import json

        return {
            "FLAGOS_PLATFORM": self.recipe.platform,
            "FLAGOS_WHEEL_LOCAL_VERSION": self.local_version,
            "FLAGOS_WHEEL_REQUIREMENTS": json.dumps(list(self.requirements)),
            "SOURCE_DATE_EPOCH": str(self.source_date_epoch),
        }


def check_concrete_version(value: str, what: str, fix: str) -> str:
    v = value.strip()
    if v.lower() in PLACEHOLDER_VERSIONS or not _CONCRETE_RE.match(v):
        raise ConfigureError(f"{what} is not a concrete version", value, fix)
    return v


# -- torch ----------------------------------------------------------------------

def _parse_version_py(text: str) -> dict[str, object]:
    """Read the literal assignments of torch/version.py without running it."""
    values: dict[str, object] = {}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return values
    for node in tree.body:
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if isinstance(target, ast.Name):
            with contextlib.suppress(ValueError):
                values[target.id] = ast.literal_eval(value)
    return values


def _cxx11_abi(libc10: Path) -> bool | None:
    """Whether libc10 was built with the C++11 std::string ABI.

    Its exported API takes std::string; with the new ABI those mangle as
    std::__cxx11::basic_string, so the presence of ``St7__cxx11`` in the dynamic
    string table decides it without importing torch.
    """
    try:
        with libc10.open("rb") as f:
            sec = ELFFile(f).get_section_by_name(".dynstr")
            if sec is None:
                return None
            return b"St7__cxx11" in sec.data()
    except (OSError, ELFError):
        return None


def _torch_from_files(version_py: str, libc10: Path | None) -> TorchInfo:
    v = _parse_version_py(version_py)
    version = v.get("__version__")
    if not isinstance(version, str):
        raise ConfigureError("cannot read torch's version", "torch/version.py", "reinstall torch")
    git = v.get("git_version")
    cuda = v.get("cuda")
    return TorchInfo(version, git if isinstance(git, str) else None,
                     _cxx11_abi(libc10) if libc10 else None, cuda if isinstance(cuda, str) else None)


def installed_torch() -> tuple[TorchInfo, Path]:
    """The torch installed in this interpreter's environment, and its torch/lib."""
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        raise ConfigureError("torch is not installed in the build environment", sys.executable,
                             "pip install torch==<version> first; the build uses no isolation") from None
    root = Path(str(dist.locate_file("torch")))
    version_py = root / "version.py"
    if not version_py.is_file():
        raise ConfigureError("torch installation has no torch/version.py", root, "reinstall torch")
    lib = root / "lib"
    info = _torch_from_files(version_py.read_text(), lib / "libc10.so")
    return info, lib


def _base(version: str) -> str:
    try:
        return Version(version).base_version
    except InvalidVersion:
        raise ConfigureError("not a version", version, "check the torch build") from None


# -- vendor / CUDA torch --------------------------------------------------------

def _requires_from_metadata(text: str) -> tuple[str, ...]:
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    return tuple(msg.get_all("Requires-Dist") or ())


def read_torch_wheel(path: Path) -> VendorTorch:
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            vpy = next((n for n in names if n == "torch/version.py"), None)
            meta = next((n for n in names if re.match(r"^torch-[^/]+\.dist-info/METADATA$", n)), None)
            if vpy is None or meta is None:
                raise ConfigureError("not a torch wheel", path.name, "pass a torch-*.whl or a torch/lib directory")
            info = _torch_from_files(zf.read(vpy).decode(), None)
            requires = _requires_from_metadata(zf.read(meta).decode())
    except (zipfile.BadZipFile, OSError) as exc:
        raise ConfigureError("cannot read the torch wheel", path, f"download it again ({exc})") from None
    return VendorTorch(path, True, info, requires)


def read_torch_dir(lib_dir: Path) -> VendorTorch:
    lib_dir = lib_dir.resolve()
    version_py = lib_dir.parent / "version.py"
    if not version_py.is_file():
        raise ConfigureError("vendor torch directory has no ../version.py", lib_dir,
                             "pass the torch/lib directory of an installed torch, or its wheel")
    info = _torch_from_files(version_py.read_text(), lib_dir / "libc10.so")
    requires: tuple[str, ...] = ()
    for meta in lib_dir.parent.parent.glob("torch-*.dist-info/METADATA"):
        requires = _requires_from_metadata(meta.read_text())
    return VendorTorch(lib_dir, False, info, requires)


def cache_dir() -> Path:
    """The pipeline's download cache, outside any checkout: ${XDG_CACHE_HOME:-~/.cache}/torch_fl/cuda-torch."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torch_fl" / "cuda-torch"


def _wheel_python_tag() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}"


def download_cuda_torch(version: str, recipe: Recipe) -> Path:
    """Fetch the CUDA torch wheel of ``version`` into the user cache (once)."""
    cache = cache_dir()
    tag = _wheel_python_tag()
    pattern = f"torch-{version}*-{tag}-{tag}-*linux*_x86_64.whl"
    found = [p for p in sorted(cache.glob(pattern)) if "+cpu" not in p.name]
    if found:
        return found[0]
    spec = recipe.vendor_torch
    index = (os.environ.get(spec.index_env) if spec.index_env else None) or spec.index
    if not index:
        raise ConfigureError("no index to download the CUDA torch wheel from", recipe.platform,
                             "pass --vendor-torch or set the recipe's vendor_torch.index")
    cache.mkdir(parents=True, exist_ok=True)
    # The local pip configuration (files or PIP_* variables) may point at a wheelhouse
    # that prefers +cpu builds; the CUDA wheel must come from the configured index only.
    keep = {"PIP_CERT", "PIP_CLIENT_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_PROXY", "PIP_RETRIES", "PIP_TRUSTED_HOST"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in keep}
    env["PIP_CONFIG_FILE"] = os.devnull
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "-i", index, "-d", str(cache), f"torch=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        tail = [ln for ln in lines if ln.startswith("ERROR")][-1:] or lines[-1:] or ["?"]
        raise ConfigureError("cannot download the CUDA torch wheel", f"torch=={version} from {index}",
                             f"pass --vendor-torch PATH or set {spec.index_env} ({tail[0][:200]})")
    found = [p for p in sorted(cache.glob(pattern)) if "+cpu" not in p.name]
    if not found:
        raise ConfigureError("the index gave no CUDA torch wheel", f"torch=={version} from {index}",
                             "pass --vendor-torch PATH")
    return found[0]


def _check_links_vendor_runtime(recipe: Recipe, lib_dir: Path) -> None:
    """A vendor's fork links the vendor runtime; stock torch+cpu does not.

    Guards the build-env default: on a runner whose environment holds stock torch,
    bundling its libraries as the "vendor" set would ship the wrong binaries.
    """
    from .elf_read import read_elf

    runtime = {soname for rd in recipe.runtime for soname in rd.libraries}
    for name in (*recipe.bundle.libraries, *recipe.bundle.optional_libraries):
        path = lib_dir / name
        if path.is_file():
            try:
                if runtime & set(read_elf(path).needed):
                    return
            except ValueError:
                continue
    raise ConfigureError(f"the installed torch is not {recipe.platform}'s build of torch",
                         f"none of its core libraries links {', '.join(sorted(runtime)) or 'the vendor runtime'}",
                         "install the vendor's torch in the build environment or pass --vendor-torch")


def _resolve_vendor(recipe: Recipe, given: Path | None, torch: TorchInfo, torch_lib: Path) -> VendorTorch | None:
    if recipe.bundle.source not in ("vendor-torch", "cuda-torch"):
        if given is not None:
            raise ConfigureError(f"platform {recipe.platform} takes no vendor torch", given,
                                 "drop --vendor-torch")
        return None
    if given is not None:
        if given.is_file() and given.name.endswith(".whl"):
            vendor = read_torch_wheel(given)
        elif given.is_dir():
            vendor = read_torch_dir(given)
        else:
            raise ConfigureError("vendor torch not found", given, "pass a torch-*.whl file or a torch/lib directory")
    elif recipe.vendor_torch.default == "build-env":
        vendor = read_torch_dir(torch_lib)
        if not recipe.stand_in:
            _check_links_vendor_runtime(recipe, torch_lib)
    elif recipe.vendor_torch.default == "download":
        vendor = read_torch_wheel(download_cuda_torch(_base(torch.version), recipe))
    else:
        raise ConfigureError(f"platform {recipe.platform} needs the vendor's torch", recipe.platform,
                             "pass --vendor-torch WHEEL_OR_TORCH_LIB_DIR")
    if _base(vendor.info.version) != _base(torch.version):
        raise ConfigureError("vendor torch is another version than the installed torch",
                             f"{vendor.info.version} vs installed {torch.version}",
                             f"install torch=={_base(vendor.info.version)} in the build environment "
                             f"or pass the vendor torch {_base(torch.version)}")
    if recipe.bundle.source == "cuda-torch":
        if not vendor.info.cuda:
            raise ConfigureError("the vendor torch is not a CUDA build", vendor.source,
                                 "pass the CUDA torch wheel of the installed version")
        if vendor.info.git_version != torch.git_version:
            # Same version string, different commit: the CUDA libraries would call
            # into a libtorch_cpu they were not built against.
            raise ConfigureError("CUDA torch git version differs from the installed torch",
                                 f"{vendor.info.git_version} vs {torch.git_version}",
                                 "use the CUDA wheel of exactly the installed torch release")
    return vendor


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


def _resolve_sdk_version(recipe: Recipe, root: Path | None, given: str | None, vendor: VendorTorch | None) -> str | None:
    fix = "pass the real version, e.g. --sdk-version 3.8.1"
    if given is not None:
        given = check_concrete_version(given, "--sdk-version", fix)
    if recipe.kind == "cuda-assets":
        found = vendor.info.cuda if vendor else None
    else:
        found = read_sdk_version(recipe, root) if root else None
    if found is not None:
        found = check_concrete_version(found, f"the SDK version read from {root}", "fix the SDK's version file or pass --sdk-version")
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


def _cuda_requirements(vendor: VendorTorch) -> list[str]:
    out: list[str] = []
    for line in vendor.requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        name = req.name.lower().replace("_", "-")
        # The CUDA runtime libraries: nvidia-* and cuda-toolkit (design.md, Bundle kinds).
        if not (name.startswith("nvidia-") or name == "cuda-toolkit"):
            continue
        if req.marker is not None and "extra" in str(req.marker):
            continue
        out.append(str(req))
    return out


def companion_pins(source_dir: Path, platform: str) -> dict[str, str]:
    path = source_dir / "manifests" / "companions.toml"
    if not path.is_file():
        raise ConfigureError("companion pins not found", path, "restore manifests/companions.toml")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigureError("manifests/companions.toml is not valid TOML", exc, "fix it") from None
    pins = dict(data.get("default", {}))
    pins.update(data.get(platform, {}))
    allowed = {"flaggems", "flagtree", "flagcx"}
    for key in pins:
        if key not in allowed:
            raise ConfigureError("unknown companion in manifests/companions.toml", key, "one of " + ", ".join(sorted(allowed)))
    return {k: str(v) for k, v in sorted(pins.items()) if str(v) != "none"}


def _source_date_epoch() -> int:
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw is None:
        return int(time.time())
    try:
        value = int(raw)
    except ValueError:
        raise ConfigureError("SOURCE_DATE_EPOCH is not an integer", raw, "unset it or give seconds since 1970") from None
    # ZIP timestamps start at 1980.
    return max(value, 315532800)


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
    if from_wheel is not None and not from_wheel.is_file():
        raise ConfigureError("--from-wheel not found", from_wheel, "pass a built torch_fl wheel")
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
    if recipe.kind != "cuda-assets":
        version = _resolve_sdk_version(recipe, root, sdk_version, None)
        if recipe.sdk and recipe.sdk.version_file and version is None:
            where = root / recipe.sdk.version_file if root else recipe.sdk.version_file
            raise ConfigureError(f"cannot read the {recipe.sdk.name} SDK version", where,
                                 "pass --sdk-version X.Y.Z")
    vendor = _resolve_vendor(recipe, vendor_torch, torch, torch_lib)
    if recipe.kind == "cuda-assets":
        version = _resolve_sdk_version(recipe, root, sdk_version, vendor)
    local = _local_version(recipe, version, vendor)
    base = _base(torch.version)
    if recipe.exact_torch:
        torch_req = f"torch=={base}"
    else:
        major, minor = Version(base).release[:2]
        torch_req = f"torch>={major}.{minor},<{major}.{minor + 1}"
    reqs = [torch_req]
    if recipe.kind == "cuda-assets" and vendor is not None:
        reqs += _cuda_requirements(vendor)
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
        companions=companion_pins(source_dir, recipe.platform),
        patchelf=patchelf,
        source_date_epoch=_source_date_epoch(),
        compress_level=compress_level,
        from_wheel=from_wheel,
        target_python=str(target_python) if target_python else sys.executable,
    )
