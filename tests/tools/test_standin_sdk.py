"""tools/standin_sdk.py: the PPU SDK's layout from a CUDA toolkit and nvidia runtime packages, on small real trees
(the full-size run, with the real CUDA toolkit and wheels, is tests/packaging/test_standin_ppu_wheel.py)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from support.paths import REPO

TOOL = [sys.executable, str(REPO / "tools" / "standin_sdk.py")]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOOL, *args], capture_output=True, text=True, timeout=120)


def _toolkit(root: Path) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "include" / "cuda_runtime.h").write_text("/* header */\n")
    (root / "bin").mkdir()
    (root / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (root / "lib64").mkdir()
    (root / "lib64" / "libcudart.so.13").write_bytes(b"\x7fELF toolkit cudart")
    return root


def _site(root: Path) -> Path:
    for package, name in (("cu13", "libcublas.so.13"), ("cu13", "libcudart.so.13"), ("cudnn", "libcudnn.so.9"),
                          ("nccl", "libnccl.so.2")):
        lib = root / "nvidia" / package / "lib"
        lib.mkdir(parents=True, exist_ok=True)
        (lib / name).write_bytes(b"\x7fELF " + name.encode())
    return root


def test_lays_out_the_vendor_sdk(tmp_path: Path) -> None:
    toolkit, site, out = _toolkit(tmp_path / "cuda"), _site(tmp_path / "site"), tmp_path / "PPU_SDK"
    proc = _run("--out", str(out), "--toolkit", str(toolkit), "--site", str(site), "--version", "1.2.3")
    assert proc.returncode == 0, proc.stderr
    lib64 = out / "CUDA_SDK" / "lib64"
    assert sorted(p.name for p in lib64.iterdir()) == ["libcublas.so.13", "libcudart.so.13", "libcudnn.so.9",
                                                      "libnccl.so.2"]
    # The runtime wheels' libraries win over the toolkit's of the same name: they are what the fork was built with.
    assert (lib64 / "libcudart.so.13").resolve() == (site / "nvidia/cu13/lib/libcudart.so.13").resolve()
    assert (out / "CUDA_SDK" / "bin" / "nvcc").resolve() == (toolkit / "bin" / "nvcc").resolve()
    assert (out / "CUDA_SDK" / "include" / "cuda_runtime.h").is_file()
    assert (out / "lib").is_dir() and (out / "lib64").is_dir()
    assert (out / "version.txt").read_text().startswith("stand-in 1.2.3\n")


def test_runtime_only_and_a_second_layout_replaces_the_first(tmp_path: Path) -> None:
    site, out = _site(tmp_path / "site"), tmp_path / "PPU_SDK"
    assert _run("--out", str(out), "--no-toolkit", "--site", str(site)).returncode == 0
    (site / "nvidia" / "nccl" / "lib" / "libnccl.so.2").unlink()
    assert _run("--out", str(out), "--no-toolkit", "--site", str(site)).returncode == 0
    assert sorted(p.name for p in (out / "CUDA_SDK").iterdir()) == ["lib64"]
    assert not (out / "CUDA_SDK" / "lib64" / "libnccl.so.2").exists()


def test_lists_a_cuda_torch_wheels_runtime_requirements(tmp_path: Path) -> None:
    wheel = tmp_path / "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("torch-2.13.0.dist-info/METADATA", "\n".join([
            "Name: torch", "Version: 2.13.0", "Requires-Dist: filelock",
            'Requires-Dist: cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"',
            'Requires-Dist: nvidia-nccl-cu13==2.29.7; platform_system == "Linux"',
            'Requires-Dist: nvidia-foo==1; extra == "dev"', 'Requires-Dist: triton==3.7.1']) + "\n")
    proc = _run("--requirements-from", str(wheel), "--list-requirements")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cuda-toolkit[cublas,cudart]==13.0.3", "nvidia-nccl-cu13==2.29.7"]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cases = [
        ("--out", str(tmp_path / "a"), "--toolkit", str(tmp_path / "nowhere")),  # no toolkit
        ("--out", str(tmp_path / "b"), "--no-toolkit", "--site", str(tmp_path)),  # a site without nvidia/
        ("--out", str(tmp_path / "c"), "--no-toolkit", "--version", "latest"),
        ("--out", str(tmp_path / "d"), "--no-toolkit", "--requirement", "nvidia-nccl-cu13==2.29.7"),  # no source
        ("--list-requirements",),
    ]
    for args in cases:
        proc = _run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tools/standin_sdk.py: ") and " — " in lines[0], args
        assert "Traceback" not in proc.stderr
