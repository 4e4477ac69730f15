"""cuda-assets with the REAL CUDA torch 2.13.0 wheel, on a machine without a GPU (opt-in: FLAGOS_TEST_CUDA_ASSETS=1).

torch-fl-build downloads the CUDA torch wheel (~530 MB) into
${XDG_CACHE_HOME:-~/.cache}/torch_fl/cuda-torch and, in its verify stage, the
wheel's nvidia-*/cuda-toolkit requirements (~3 GB) into .../torch_fl/requirements,
once each; pip installs those into a throw-away target beside this stock
torch+cpu, and preflight's ELF gates prove every DT_NEEDED resolves and every
undefined symbol binds there.  No driver is installed or faked: libcuda.so.1 is
recorded as the target's host requirement.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import pytest
from packaging_support import REPO, run_build
from synthetic import make_plugin_wheel
from torch_fl_packaging.configure import configure
from torch_fl_packaging.elf_read import read_elf

pytestmark = [
    pytest.mark.cuda_assets,
    pytest.mark.network,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("FLAGOS_TEST_CUDA_ASSETS") != "1",
                       reason="downloads ~3.5 GB; opt in with FLAGOS_TEST_CUDA_ASSETS=1"),
]


def test_real_cuda_assets_wheel(tmp_path: Path, torch_lib: Path) -> None:
    cfg = configure(platform="cuda", source_dir=REPO, out_dir=tmp_path / "out")  # downloads the CUDA torch once
    assert cfg.vendor is not None
    cuda_wheel = cfg.vendor.path
    assert cfg.wheel_version.endswith("+cuda13.0") and cfg.torch_requirement == "torch==2.13.0"
    names = {r.split("[")[0].split("=")[0].split(";")[0].strip() for r in cfg.requirements[1:]}
    assert "cuda-toolkit" in names and all(n == "cuda-toolkit" or n.startswith("nvidia-") for n in names)
    # The real CUDA torch 2.13.0 requires triton==3.7.1: the flaggems extra's Triton pin.
    assert cfg.extras["flaggems"][1] == 'triton==3.7.1; platform_system == "Linux" and python_version < "3.15"'
    plugin = make_plugin_wheel(tmp_path, cfg.recipe, version=cfg.wheel_version, requires=list(cfg.requires_dist),
                               torch_lib=torch_lib)
    out = tmp_path / "out"
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    res = run_build(["--platform", "cuda", "--from-wheel", str(plugin), "--out", str(out), "--json"], env=env)
    assert res.rc == 0, res.stderr[-3000:]
    summary = res.json
    verify = summary["verify"]
    assert verify["preflight"] == "passed" and verify["checks"]["fail"] == 0  # ELF gates: DT_NEEDED and symbols bind
    assert verify["host_requirements"] == ["libcuda.so.1"]  # the driver: the target's, not this runner's
    target = verify["target"]
    assert {r.split("[")[0].split("=")[0] for r in target["installed"]} == names  # torch+cpu already satisfied torch
    assert target["cache_bytes"] > 1 << 30 and Path(target["cache"]).is_dir()
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
