"""cuda-assets with the REAL CUDA torch 2.13.0 wheel (opt-in: FLAGOS_TEST_CUDA_ASSETS=1).

Downloads the CUDA torch wheel (~530 MB) and its nvidia runtime wheels from
PyPI into ${XDG_CACHE_HOME:-~/.cache}/torch_fl once (shared with the preflight
tests' cache), builds the cuda wheel with torch-fl-build, and proves it with
torch-fl-preflight's ELF gates against a stock torch+cpu environment that has
the required nvidia packages: every DT_NEEDED resolves and every undefined
symbol of the bundled libraries and the plugin binds.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest
from packaging_support import REPO, build_env, run_build
from synthetic import compile_library, make_plugin_wheel
from torch_fl_packaging.configure import configure
from torch_fl_packaging.elf_read import read_elf

pytestmark = [
    pytest.mark.cuda_assets,
    pytest.mark.network,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("FLAGOS_TEST_CUDA_ASSETS") != "1",
                       reason="downloads ~2.5 GB; opt in with FLAGOS_TEST_CUDA_ASSETS=1"),
]


@pytest.fixture(scope="module")
def cuda_inputs() -> dict:
    sys.path.insert(0, str(REPO / "tests" / "preflight"))
    builders = pytest.importorskip("_preflight_builders")
    inputs = builders.download_cuda_inputs()
    inputs["target_python"] = builders.cuda_env("torch-2.13.0-cpu-nvidia", inputs["cpu"], inputs["nvidia"])
    return inputs


def _driver_stub(cuda_wheel: Path, tmp: Path) -> Path:
    """A SYNTHETIC driver: SONAME libcuda.so.1 exporting the cu* entry points the CUDA libraries call.

    This machine has no NVIDIA driver; the stub stands for the one the target must have.
    """
    from elftools.elf.elffile import ELFFile

    lib = tmp / "libcaffe2_nvrtc.so"
    with zipfile.ZipFile(cuda_wheel) as zf:
        lib.write_bytes(zf.read("torch/lib/libcaffe2_nvrtc.so"))
    with lib.open("rb") as f:
        dynsym = ELFFile(f).get_section_by_name(".dynsym")
        names = sorted({s.name for s in dynsym.iter_symbols()
                        if s["st_shndx"] == "SHN_UNDEF" and s.name.startswith("cu") and s.name[2:3].isupper()})
    stub = tmp / "driver" / "libcuda.so.1"
    compile_library(stub, "libcuda.so.1", exports=names)
    return stub.parent


def test_real_cuda_assets_wheel(cuda_inputs: dict, tmp_path: Path, torch_lib: Path) -> None:
    cuda_wheel = cuda_inputs["cuda"]
    cfg = configure(platform="cuda", source_dir=REPO, out_dir=tmp_path / "out", vendor_torch=cuda_wheel)
    assert cfg.wheel_version.endswith("+cuda13.0") and cfg.torch_requirement == "torch==2.13.0"
    names = {r.split("[")[0].split("=")[0].split(";")[0].strip() for r in cfg.requirements[1:]}
    assert "cuda-toolkit" in names and all(n == "cuda-toolkit" or n.startswith("nvidia-") for n in names)
    plugin = make_plugin_wheel(tmp_path, cfg.recipe, version=cfg.wheel_version, requires=list(cfg.requirements),
                               torch_lib=torch_lib)
    out = tmp_path / "out"
    env = build_env()
    env["LD_LIBRARY_PATH"] = str(_driver_stub(cuda_wheel, tmp_path))
    res = run_build(["--platform", "cuda", "--vendor-torch", str(cuda_wheel), "--from-wheel", str(plugin),
                     "--target-python", str(cuda_inputs["target_python"]), "--preflight", "require",
                     "--out", str(out), "--json"], env=env)
    assert res.rc == 0, res.stderr[-3000:]
    summary = res.json
    assert summary["verify"]["preflight"] == "passed"  # ELF gates: DT_NEEDED and symbols bind
    assert summary["requirements"] == list(cfg.requirements)
    bundled = {Path(b["path"]).name for b in summary["bundled"]}
    assert bundled == {"libtorch_cuda.so", "libc10_cuda.so", "libtorch_cuda_linalg.so", "libtorch_nvshmem.so",
                       "libcaffe2_nvrtc.so"}
    tree = tmp_path / "tree"
    with zipfile.ZipFile(out / summary["wheel"]["filename"]) as zf:
        for name in zf.namelist():
            if name.startswith("torch_fl/cuda/") or name == "torch_fl/compatibility.json":
                zf.extract(name, tree)
    with zipfile.ZipFile(cuda_wheel) as zf:
        for lib in bundled:
            rpath = read_elf(tree / "torch_fl/cuda" / lib).rpath
            assert {"$ORIGIN", "$ORIGIN/../../nvidia/cu13/lib", "$ORIGIN/../../nvidia/cudnn/lib",
                    "$ORIGIN/../../nvidia/nccl/lib"} <= set(rpath)
            assert not any(e.startswith("/") for e in rpath)
            # Shipped RPATHs are kept: no library is rewritten (patchelf would hold 470 MB).
            member = zf.getinfo(f"torch/lib/{lib}")
            assert (tree / "torch_fl/cuda" / lib).stat().st_size == member.file_size
            assert hashlib.sha256((tree / "torch_fl/cuda" / lib).read_bytes()).hexdigest() == \
                hashlib.sha256(zf.read(member)).hexdigest()
    manifest = json.loads((tree / "torch_fl/compatibility.json").read_text())
    assert manifest["vendor_torch"]["version"] == "2.13.0+cu130"
    assert manifest["torch"]["git_version"] == manifest["vendor_torch"]["git_version"]
    assert manifest["requirements"][0] == "torch==2.13.0"
