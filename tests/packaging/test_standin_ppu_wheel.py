"""The ppu wheel (a CUDA-compatible vendor's forked-libtorch wheel) built end to end against a stand-in SDK.

The PPU SDK is a CUDA toolkit plus the runtime its torch fork links; the stand-in is this machine's CUDA
toolkit and the nvidia-*/cuda-toolkit wheels of the CUDA torch wheel, in the vendor's layout
(tools/standin_sdk.py), and the "fork" is the CUDA torch wheel of the installed torch's release.  The
real pipeline builds the cuda runtime adapter against them (the C++ plugin, compiled here), bundles the
fork's core libtorch set, re-RPATHs it to the SDK prefix, writes compatibility.json and proves the wheel
with preflight.  The wheel then installs beside stock torch+cpu and imports: torch's libraries are the
fork's, torch_fl's runtime is cuda, and with no GPU here flagos says so.

Downloads the CUDA torch wheel (~530 MB) and its runtime wheels (~1.9 GB) once, into
${XDG_CACHE_HOME:-~/.cache}/torch_fl (as torch-fl-build's cuda-assets path does).  On a GPU machine the
same wheel goes through tools/gpu-offline-env.sh --stand-in-sdk (tools/README.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging_support import BUNDLERS, REPO, build_env, checkout_copy, run_build, torch_base
from support.bootstrap import torch_tree_hashes
from support.bootstrap_fixtures import venv_with_wheel
from support.tools import require_tool
from torch_fl_packaging.elf_read import read_elf
from torch_fl_packaging.pip_env import isolated_pip_env
from torch_fl_packaging.recipe import load_recipe
from torch_fl_packaging.torch_download import download_cuda_torch
from torch_fl_packaging.verify_target import cache_dir

pytestmark = [pytest.mark.compile, pytest.mark.wheel, pytest.mark.network, pytest.mark.slow]

CUDA_HOME = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")


@pytest.fixture(scope="module")
def cuda_torch_wheel() -> Path:
    return download_cuda_torch(torch_base(), load_recipe("cuda", BUNDLERS))


@pytest.fixture(scope="module")
def standin_sdk(cuda_torch_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (CUDA_HOME / "include" / "cuda_runtime.h").is_file():
        pytest.fail(f"no CUDA toolkit at {CUDA_HOME}: the stand-in PPU SDK is laid out from one (set CUDA_HOME)")
    tool = [sys.executable, str(REPO / "tools" / "standin_sdk.py")]
    reqs = subprocess.run([*tool, "--requirements-from", str(cuda_torch_wheel), "--list-requirements"],
                          capture_output=True, text=True, check=True).stdout.split()
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    # Into the cache torch-fl-build's cuda-assets verify fills: pip fetches only what it does not hold.
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(cache), "--find-links",
                    str(cache), "--index-url", "https://pypi.org/simple", "--only-binary", ":all:", *reqs],
                   env=isolated_pip_env(), check=True, timeout=1800)
    sdk = tmp_path_factory.mktemp("ppu") / "PPU_SDK"
    proc = subprocess.run([*tool, "--out", str(sdk), "--toolkit", str(CUDA_HOME), "--requirements-from",
                           str(cuda_torch_wheel), "--find-links", str(cache)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return sdk


@pytest.fixture(scope="module")
def ppu_build(standin_sdk: Path, cuda_torch_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    require_tool("patchelf")
    base = tmp_path_factory.mktemp("ppu-build")
    # A copy of the checkout: the cuda adapter's build directory stays apart from the host builds of this tree.
    source = checkout_copy(base / "checkout")
    env = build_env()
    env["PPU_SDK"] = str(standin_sdk)
    env["SOURCE_DATE_EPOCH"] = "1700000000"
    res = run_build(["--platform", "ppu", "--vendor-torch", str(cuda_torch_wheel), "--source", str(source),
                     "--out", str(base / "dist"), "--json"], env=env, cwd=source)
    assert res.rc == 0, res.stderr[-3000:]
    return res.json


def test_ppu_wheel_is_built_and_verified(ppu_build: dict, standin_sdk: Path) -> None:
    summary = ppu_build
    assert summary["platform"] == "ppu" and summary["kind"] == "forked-libtorch" and not summary["stand_in"]
    assert summary["wheel"]["filename"].startswith(f"torch_fl-{torch_base()}+ppu1.0.0-")
    assert summary["requirements"] == [f"torch=={torch_base()}"]  # the runtime is the SDK's, not pip's
    verify = summary["verify"]
    # Every DT_NEEDED of the plugin and the fork resolves in the wheel or the SDK, every symbol binds; only
    # the driver is the target's.
    assert verify["preflight"] == "passed" and verify["checks"]["fail"] == 0
    assert verify["host_requirements"] == ["libcuda.so.1"]
    bundled = {Path(b["path"]).name for b in summary["bundled"]}
    assert {"libc10.so", "libtorch_cpu.so", "libtorch_python.so", "libtorch_cuda.so", "libc10_cuda.so",
            "libtorch_nvshmem.so"} <= bundled


def test_ppu_wheel_links_the_cuda_runtime_and_the_sdk(ppu_build: dict, tmp_path: Path) -> None:
    wheel = Path(ppu_build["wheel"]["path"])
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        config = zf.read("torch_fl/_build_config.py").decode()
        plugin = next(n for n in names if n.startswith("torch_fl/_C.") and n.endswith(".so"))
        zf.extract(plugin, tmp_path)
        zf.extract("torch_fl/vendor_torch/libtorch_cuda.so", tmp_path)
        manifest = json.loads(zf.read("torch_fl/compatibility.json"))
    assert 'RUNTIME = "cuda"' in config and 'PLATFORM = "ppu"' in config
    elf = read_elf(tmp_path / plugin)
    assert {"libcudart.so.13", "libtorch_cuda.so", "libc10_cuda.so"} <= set(elf.needed)
    assert (elf.rpath or elf.runpath)[:1] == ("$ORIGIN/vendor_torch",)
    fork = read_elf(tmp_path / "torch_fl/vendor_torch/libtorch_cuda.so")
    # The fork finds its siblings beside itself and the vendor runtime under the SDK's fixed prefix.
    assert (fork.rpath or fork.runpath)[:2] == ("$ORIGIN", "/usr/local/PPU_SDK/CUDA_SDK/lib64")
    assert manifest["vendor_torch"]["version"].startswith(torch_base()) and manifest["sdk"]["version"] == "1.0.0"


def test_ppu_wheel_imports_beside_stock_torch(ppu_build: dict, standin_sdk: Path, stock_venv: Path,
                                               tmp_path: Path) -> None:
    venv = venv_with_wheel("ppu", Path(ppu_build["wheel"]["path"]), stock_venv, tmp_path)
    # The SDK sits elsewhere than its fixed prefix here, so its libraries are named as a moved SDK's are.
    env = venv.env(LD_LIBRARY_PATH=str(standin_sdk / "CUDA_SDK" / "lib64"))
    proc = venv.run("""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch_fl, torch
        maps = open("/proc/self/maps").read()
        print(torch_fl.build_config.RUNTIME, torch.cuda._is_compiled(), torch.flagos.is_available())
        print("/torch_fl/vendor_torch/libtorch_cuda.so" in maps, "/torch_fl/vendor_torch/libc10.so" in maps)
        print(any("no CUDA device is visible" in str(w.message) for w in caught))
    """, env=env)
    runtime_line, mapped_line, warned_line = proc.stdout.split("\n")[:3]
    # torch's own names resolved to the fork's CUDA build; no GPU here, and flagos says so at import.
    assert runtime_line == "cuda True False"
    assert mapped_line == "True True"
    assert warned_line == "True"
    assert torch_tree_hashes(venv.site) == venv.torch_hashes  # the installed torch is never written
