"""cuda-assets with a SYNTHETIC CUDA torch wheel (real ELF files, CUDA torch's names and layout).

The real CUDA torch 2.13.0 wheel is exercised by test_cuda_assets_real.py (opt-in).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from packaging_support import BUNDLERS, REPO, build_env, run_build, torch_base
from support.wheels import PY_TAG, write_wheel
from synthetic import compile_library, make_plugin_wheel
from torch_fl_packaging.companions import companion_pins
from torch_fl_packaging.torch_info import installed_torch
from torch_fl_packaging.elf_read import read_elf
from torch_fl_packaging.recipe import load_recipe

CUDA_REQS = [
    'nvidia-cuda-runtime==13.0.96; platform_system == "Linux"',
    'cuda-toolkit[cublas,cudart]==13.0.2; platform_system == "Linux"',
    'nvidia-nccl-cu13==2.28.9; platform_system == "Linux"',
]
NOT_RUNTIME = ['cuda-bindings<14,>=13.0.3; platform_system == "Linux"', 'triton==3.7.1; platform_system == "Linux"']
#: The flaggems extra the cuda recipe declares: flag-gems at the companions.toml pin, triton as the CUDA torch
#: above requires it (its marker kept), both under the extra's marker.
FLAGGEMS_PIN = companion_pins(REPO, "cuda")["flaggems"]
FLAGGEMS_EXTRA = [f'flag-gems=={FLAGGEMS_PIN}; extra == "flaggems"',
                  'triton==3.7.1; platform_system == "Linux" and extra == "flaggems"']


def make_cuda_torch_wheel(tmp: Path, torch_lib: Path, *, git_version: str | None = None,
                          cuda: str = "13.0") -> Path:
    info, _ = installed_torch()
    build = tmp / "cuda-torch-build"
    cudart = compile_library(build / "nvidia/cu13/lib/libcudart.so.13", "libcudart.so.13", exports=["cudaMalloc"])
    rpath = "$ORIGIN/../../nvidia/cublas/lib:$ORIGIN/../../nvidia/cu13/lib:$ORIGIN:/usr/local/cuda/lib64"
    c10_cuda = compile_library(build / "libc10_cuda.so", "libc10_cuda.so", needed=[cudart, torch_lib / "libc10.so"],
                               rpath=rpath, exports=["c10_cuda_init"], calls=["cudaMalloc"])
    torch_cuda = compile_library(build / "libtorch_cuda.so", "libtorch_cuda.so",
                                 needed=[c10_cuda, cudart, torch_lib / "libtorch_cpu.so"], rpath=rpath,
                                 calls=["c10_cuda_init"])
    # Shipped with an RPATH the recipe keeps as it is (DT_RPATH, as the CUDA torch wheels have).
    nvrtc = compile_library(build / "libcaffe2_nvrtc.so", "libcaffe2_nvrtc.so", needed=[cudart],
                            rpath="$ORIGIN/../../nvidia/cu13/lib:$ORIGIN", extra_flags=["-Wl,--disable-new-dtags"])
    version = torch_base()
    meta = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\nRequires-Dist: filelock\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in CUDA_REQS + NOT_RUNTIME)
    meta += 'Requires-Dist: optree>=0.13.0; extra == "optree"\n'
    tag = f"{PY_TAG}-{PY_TAG}-manylinux_2_28_x86_64"
    files: dict[str, bytes | Path] = {
        "torch/version.py": (f"__version__ = '{version}'\ngit_version = '{git_version or info.git_version}'\n"
                             f"cuda = '{cuda}'\n").encode(),
        **{f"torch/lib/{lib.name}": lib for lib in (c10_cuda, torch_cuda, nvrtc)},
    }
    return write_wheel(tmp / f"torch-{version}-{tag}.whl", files, name="torch", version=version, tag=tag,
                       metadata=meta)


def make_runtime_wheels(tmp: Path) -> Path:
    """SYNTHETIC stand-ins for CUDA_REQS, in a --find-links directory: verify installs them into its
    target (the nvidia-cuda-runtime one carries libcudart.so.13 where the real one does), so nothing is
    downloaded."""
    links = tmp / "links"
    plat = "py3-none-manylinux_2_17_x86_64"
    cudart = tmp / "cuda-torch-build/nvidia/cu13/lib/libcudart.so.13"
    write_wheel(links / f"nvidia_cuda_runtime-13.0.96-{plat}.whl", {"nvidia/cu13/lib/libcudart.so.13": cudart},
                name="nvidia_cuda_runtime", version="13.0.96", tag=plat)
    write_wheel(links / f"nvidia_nccl_cu13-2.28.9-{plat}.whl", {"nvidia/nccl/__init__.py": b""},
                name="nvidia_nccl_cu13", version="2.28.9", tag=plat)
    toolkit = "Metadata-Version: 2.1\nName: cuda-toolkit\nVersion: 13.0.2\nProvides-Extra: cublas\nProvides-Extra: cudart\n"
    write_wheel(links / "cuda_toolkit-13.0.2-py3-none-any.whl", {"cuda_toolkit_stub/__init__.py": b""},
                name="cuda_toolkit", version="13.0.2", tag="py3-none-any", metadata=toolkit)
    return links


@pytest.mark.compile
def test_cuda_assets_layout_rpath_and_requirements(tmp_path: Path, torch_lib: Path) -> None:
    cuda_wheel = make_cuda_torch_wheel(tmp_path, torch_lib)
    links = make_runtime_wheels(tmp_path)
    base = torch_base()
    reqs = [f"torch=={base}", *CUDA_REQS]
    plugin = make_plugin_wheel(tmp_path, load_recipe("cuda", BUNDLERS), version=f"{base}+cuda13.0",
                               requires=reqs + FLAGGEMS_EXTRA, torch_lib=torch_lib)
    out = tmp_path / "out"
    env = build_env()
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # the user's cache is neither read nor filled
    res = run_build(["--platform", "cuda", "--vendor-torch", str(cuda_wheel), "--from-wheel", str(plugin),
                     "--find-links", str(links), "--out", str(out), "--json"], env=env)
    assert res.rc == 0, res.stderr
    summary = res.json
    # verify proved the bundled libraries against the runtime wheels pip installed beside stock torch
    assert summary["verify"]["preflight"] == "passed"
    assert summary["verify"]["target"]["installed"] == CUDA_REQS and not summary["verify"]["target"]["downloaded"]
    assert summary["wheel"]["version"] == f"{base}+cuda13.0"
    assert summary["requirements"] == reqs  # derived from the CUDA wheel's METADATA, extras dropped
    # torch_fl[flaggems]: the companion pin, and the triton the CUDA wheel requires (its own extras never)
    assert summary["extras"] == {"flaggems": [f"flag-gems=={FLAGGEMS_PIN}", 'triton==3.7.1; platform_system == "Linux"']}
    assert summary["companions"]["flaggems"] == FLAGGEMS_PIN
    tree = tmp_path / "tree"
    with zipfile.ZipFile(out / summary["wheel"]["filename"]) as zf:
        zf.extractall(tree)
    bundled = sorted(p.name for p in (tree / "torch_fl/cuda").iterdir())
    assert bundled == ["libc10_cuda.so", "libcaffe2_nvrtc.so", "libtorch_cuda.so"]  # optional ones absent
    rpath = read_elf(tree / "torch_fl/cuda/libtorch_cuda.so").rpath
    # The source's relative entries in the source's order (the CUDA 12 per-component one
    # included); the absolute /usr/local/cuda entry is dropped.
    assert rpath == ("$ORIGIN/../../nvidia/cublas/lib", "$ORIGIN/../../nvidia/cu13/lib", "$ORIGIN")
    # A library whose shipped RPATH is already right is not rewritten at all.
    with zipfile.ZipFile(cuda_wheel) as zf:
        assert (tree / "torch_fl/cuda/libcaffe2_nvrtc.so").read_bytes() == zf.read("torch/lib/libcaffe2_nvrtc.so")
    plugin_rpath = read_elf(next((tree / "torch_fl").glob("_C*.so"))).rpath
    assert plugin_rpath[0] == "$ORIGIN/cuda"
    import json
    manifest = json.loads((tree / "torch_fl/compatibility.json").read_text())
    assert manifest["torch"]["requirement"] == f"torch=={base}"
    assert manifest["sdk"] == {"name": "cuda", "version": "13.0"}
    assert manifest["vendor_torch"]["source"] == cuda_wheel.name
    assert manifest["companions"]["flaggems"] == FLAGGEMS_PIN
    assert manifest["requirements"] == reqs + FLAGGEMS_EXTRA  # what pip reads: METADATA's Requires-Dist
    assert {r["origin"] for r in manifest["elf"] if r["path"].startswith("torch_fl/cuda/")} == {"bundled"}
    assert not (tree / "torch_fl.libs").exists()  # libcudart comes from pip, never grafted


@pytest.mark.compile
def test_cuda_wheel_of_another_commit_is_refused(tmp_path: Path, torch_lib: Path) -> None:
    cuda_wheel = make_cuda_torch_wheel(tmp_path, torch_lib, git_version="0123456789abcdef")
    out = tmp_path / "out"
    res = run_build(["--platform", "cuda", "--vendor-torch", str(cuda_wheel), "--out", str(out)])
    assert res.rc == 2 and "git version differs" in res.stderr and not out.exists()


@pytest.mark.compile
def test_cpu_torch_is_not_a_cuda_torch(tmp_path: Path, torch_lib: Path) -> None:
    res = run_build(["--platform", "cuda", "--vendor-torch", str(torch_lib), "--out", str(tmp_path / "o")])
    assert res.rc == 2 and "not a CUDA build" in res.stderr
