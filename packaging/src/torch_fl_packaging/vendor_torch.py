"""Which torch supplies the libraries a forked-libtorch or cuda-assets wheel bundles.

`--vendor-torch` names it (a wheel or a torch/lib directory); otherwise the recipe says where it
comes from: the build environment's own torch (a vendor's fork installed there) or a download of
the CUDA torch of the installed version (`torch_download`). Either way it must be the installed
torch's version, and for CUDA its very commit. The CUDA runtime requirements of the wheel are
copied from that torch's metadata.
"""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from .elf_read import read_elf
from .errors import ConfigureError
from .recipe import Recipe
from .torch_download import download_cuda_torch
from .torch_info import TorchInfo, VendorTorch, base_version, read_torch_dir, read_torch_wheel

__all__ = ["check_links_vendor_runtime", "cuda_requirements", "resolve_vendor"]


def check_links_vendor_runtime(recipe: Recipe, lib_dir: Path) -> None:
    """A vendor's fork links the vendor runtime; stock torch+cpu does not.

    Guards the build-env default: on a runner whose environment holds stock torch,
    bundling its libraries as the "vendor" set would ship the wrong binaries.
    """
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


def resolve_vendor(recipe: Recipe, given: Path | None, torch: TorchInfo, torch_lib: Path) -> VendorTorch | None:
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
            check_links_vendor_runtime(recipe, torch_lib)
    elif recipe.vendor_torch.default == "download":
        vendor = read_torch_wheel(download_cuda_torch(base_version(torch.version), recipe))
    else:
        raise ConfigureError(f"platform {recipe.platform} needs the vendor's torch", recipe.platform,
                             "pass --vendor-torch WHEEL_OR_TORCH_LIB_DIR")
    if base_version(vendor.info.version) != base_version(torch.version):
        raise ConfigureError("vendor torch is another version than the installed torch",
                             f"{vendor.info.version} vs installed {torch.version}",
                             f"install torch=={base_version(vendor.info.version)} in the build environment "
                             f"or pass the vendor torch {base_version(torch.version)}")
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


def cuda_requirements(vendor: VendorTorch) -> list[str]:
    out: list[str] = []
    for line in vendor.requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        name = req.name.lower().replace("_", "-")
        # The CUDA runtime libraries: nvidia-* and cuda-toolkit (docs/architecture.md, "Bundle kinds").
        if not (name.startswith("nvidia-") or name == "cuda-toolkit"):
            continue
        if req.marker is not None and "extra" in str(req.marker):
            continue
        out.append(str(req))
    return out
