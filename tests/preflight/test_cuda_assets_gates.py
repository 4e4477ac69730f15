"""The static load gates on real binaries: the CUDA libraries of torch 2.13.0 (PyPI's CUDA 13.0
build) bundled as a cuda-assets wheel, checked against stock torch 2.13.0+cpu with the nvidia-*
packages that CUDA wheel requires, and against torch 2.14.1 (a CUDA build from the machine's
wheelhouse).

Opt in with FLAGOS_TEST_CUDA_ASSETS=1: the first run downloads about 2.5 GB into
${XDG_CACHE_HOME:-~/.cache}/torch_fl and builds two environments there; later runs reuse them.
FLAGOS_TEST_CUDA_WHEEL may name the pipeline's real cuda-assets wheel; otherwise a stand-in is
assembled from the CUDA torch wheel (see _preflight_builders.cuda_assets_wheel).

This machine has no NVIDIA driver. libcaffe2_nvrtc.so links libcuda.so.1 (the driver), so the
tests either expect exactly that to be missing, or put a *synthetic driver stub* on
LD_LIBRARY_PATH: a C library with SONAME libcuda.so.1 exporting the driver entry points (cu*)
those libraries reference. It stands for the driver the target must have; nothing here claims the
libraries run on a GPU.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

import _preflight_builders as B
from support.elf import compile_c
from test_auditwheel_agreement import external_agreement

pytestmark = [pytest.mark.cuda_assets, pytest.mark.network, pytest.mark.slow, pytest.mark.compile]

if os.environ.get("FLAGOS_TEST_CUDA_ASSETS") != "1":
    pytest.skip("set FLAGOS_TEST_CUDA_ASSETS=1 to run the CUDA-assets tests (downloads ~2.5 GB once)",
                allow_module_level=True)

DRIVER_API = re.compile(r"^cu[A-Z]\w*$")


@pytest.fixture(scope="module")
def inputs() -> dict[str, Any]:
    return B.download_cuda_inputs()


@pytest.fixture(scope="module")
def wheel(inputs: dict[str, Any]) -> Path:
    given = os.environ.get("FLAGOS_TEST_CUDA_WHEEL")
    return Path(given) if given else B.cuda_assets_wheel(inputs, B.cache_dir() / "wheels")


@pytest.fixture(scope="module")
def env_213(inputs: dict[str, Any]) -> str:
    return str(B.cuda_env("torch-2.13.0-cpu-nvidia", inputs["cpu"], inputs["nvidia"]))


@pytest.fixture(scope="module")
def env_2141(inputs: dict[str, Any], env_213: str) -> str:
    return str(B.cuda_env("torch-2.14.1-nvidia", inputs["next"], inputs["nvidia"],
                          share_nvidia_from=Path(env_213).parent.parent))


def _check(wheel: Path, python: str, *extra: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    r = B.run_preflight(["--wheel", str(wheel), "--python", python, "--json", *extra], env=env, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def _findings(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in doc["subjects"][0]["findings"]}


@pytest.fixture(scope="module")
def driver_stub(wheel: Path, env_213: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    _code, doc = _check(wheel, env_213)
    names = sorted({d.split(": ", 1)[1].split("@")[0] for d in _findings(doc)["elf.symbols"]["details"]})
    assert names and all(DRIVER_API.match(n) for n in names), names
    d = tmp_path_factory.mktemp("synthetic-driver")
    compile_c(d / "libcuda.so.1", "".join(f"int {n}(void){{return 0;}}\n" for n in names), soname="libcuda.so.1")
    return d


def test_without_a_driver_only_the_driver_is_missing(wheel: Path, env_213: str) -> None:
    code, doc = _check(wheel, env_213)
    f = _findings(doc)
    assert code == 1
    assert f["elf.needed"]["details"] == ["torch_fl/lib/libcaffe2_nvrtc.so: libcuda.so.1 not found"]
    assert all(DRIVER_API.match(d.split(": ", 1)[1]) for d in f["elf.symbols"]["details"])
    for fid in ("wheel.record", "manifest.elf", "manifest.torch", "host.torch", "elf.versions", "elf.rpath"):
        assert f[fid]["status"] == "pass", f[fid]


def test_passes_against_torch_213_cpu_with_the_nvidia_packages(wheel: Path, env_213: str, driver_stub: Path) -> None:
    code, doc = _check(wheel, env_213, "--check-installed", env={"LD_LIBRARY_PATH": str(driver_stub)})
    f = _findings(doc)
    assert code == 0, [x for x in f.values() if x["status"] == "fail"]
    assert f["elf.symbols"]["status"] == "pass" and f["host.requirements"]["status"] == "pass"
    ext = doc["subjects"][0]["facts"]["external_libraries"]["torch_fl/lib/libtorch_cuda.so"]
    assert "/nvidia/cu13/lib/" in ext["libcublas.so.13"] and ext["libtorch_cpu.so"].endswith("torch/lib/libtorch_cpu.so")


def test_fails_against_torch_2141_naming_the_missing_symbols(wheel: Path, env_2141: str, driver_stub: Path) -> None:
    code, doc = _check(wheel, env_2141, env={"LD_LIBRARY_PATH": str(driver_stub)})
    f = _findings(doc)
    assert code == 1
    assert f["host.torch"]["status"] == "fail" and "does not satisfy torch==2.13.0" in f["host.torch"]["message"]
    missing = f["elf.symbols"]["details"]
    assert f["elf.symbols"]["status"] == "fail" and missing
    assert all(d.startswith("torch_fl/lib/") for d in missing)
    assert any(d.startswith("torch_fl/lib/libtorch_cuda.so: _ZN2at") for d in missing), missing


def test_external_libraries_agree_with_auditwheel(wheel: Path, env_213: str, driver_stub: Path) -> None:
    import subprocess

    site = subprocess.run([env_213, "-c", "import sysconfig;print(sysconfig.get_paths()['platlib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    nvidia = sorted(str(p) for p in Path(site, "nvidia").glob("*/lib"))
    theirs = external_agreement(wheel, env_213, ":".join([os.path.join(site, "torch", "lib"), *nvidia,
                                                          str(driver_stub)]))
    assert {"libcublas.so.13", "libtorch_cpu.so", "libcuda.so.1"} <= set(theirs)
