"""preflight alone: installed (not editable) into a fresh environment that has no torch, checking
wheels against another interpreter's environment with --python, as a pipx install would."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import _preflight_builders as B
from support.paths import REPO

pytestmark = [pytest.mark.wheel, pytest.mark.slow, pytest.mark.compile]


@pytest.fixture(scope="module")
def fresh_preflight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fresh")
    src = root / "src"
    # Build from a copy: an in-tree build would leave build/ and *.egg-info in the repository.
    shutil.copytree(REPO / "preflight", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    py = root / "venv" / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", str(src)], capture_output=True, text=True,
                       timeout=600, check=False)
    if r.returncode != 0:
        pytest.fail(f"pip install ./preflight failed:\n{r.stderr[-2000:]}")
    return py


def test_fresh_environment_holds_no_torch(fresh_preflight: Path) -> None:
    r = subprocess.run([str(fresh_preflight), "-c", "import torch"], capture_output=True, text=True, check=False)
    assert r.returncode != 0 and "No module named 'torch'" in r.stderr
    names = subprocess.run([str(fresh_preflight), "-m", "pip", "list", "--format=freeze"], capture_output=True,
                           text=True, check=True).stdout.lower()
    assert "torch-fl-preflight==" in names and "torch==" not in names and "pyelftools" not in names


def _cli(fresh: Path) -> str:
    return str(fresh.with_name("torch-fl-preflight"))


def test_host_wheel_passes_then_tampered_copy_fails(fresh_preflight: Path, host_wheel: Path, target_python: str,
                                                    tmp_path: Path) -> None:
    r = subprocess.run([_cli(fresh_preflight), "--wheel", str(host_wheel), "--python", target_python],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr

    def flip(name: str, data: bytes) -> bytes:
        if name.endswith("libflagos_rt.so"):
            b = bytearray(data)
            b[len(b) // 2] ^= 0x01
            return bytes(b)
        return data

    bad = B.rewrite_wheel(host_wheel, tmp_path / host_wheel.name, flip)
    r = subprocess.run([_cli(fresh_preflight), "--wheel", str(bad), "--python", target_python],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 1
    assert "FAIL wheel.record" in r.stdout and "FAIL manifest.elf" in r.stdout


def test_without_python_points_at_it(fresh_preflight: Path, host_wheel: Path) -> None:
    """Run where it is installed (no torch there) without --python: one line naming --python, not
    a failed torch check followed by every unresolved ELF symbol of the wheel."""
    for mode in (["--wheel", str(host_wheel)], ["--installed"]):
        r = subprocess.run([_cli(fresh_preflight), *mode], capture_output=True, text=True, check=False)
        assert r.returncode == 2, r.stdout + r.stderr
        line, = r.stderr.strip().splitlines()
        assert "torch is not installed in the environment preflight runs in" in line and "--python" in line
        assert r.stdout == ""


def test_wheel_for_another_python_fails_the_tag_check(fresh_preflight: Path, natives: B.Natives,
                                                      target_python: str, tmp_path: Path) -> None:
    other = "cp310" if B.PY_TAG != "cp310" else "cp312"
    whl = B.write_wheel(tmp_path, B.WheelSpec(B.host_wheel_files(natives), tag=f"{other}-{other}-{B.PLAT}"))
    r = subprocess.run([_cli(fresh_preflight), "--wheel", str(whl), "--python", target_python],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 1 and "FAIL host.tags" in r.stdout


def test_real_wheels_from_a_fresh_environment(fresh_preflight: Path) -> None:
    """The project's wheels (FLAGOS_TEST_WHEEL=dist/torch_fl-2.13.0+host-*.whl and/or
    FLAGOS_TEST_WHEEL_DIR=dist) against the interpreter running the tests, which ci/test gives
    torch 2.13.0+cpu: host and host-forked must pass. Skipped when neither variable is set."""
    wheels = B.real_wheels()
    if not wheels:
        pytest.skip("set FLAGOS_TEST_WHEEL or FLAGOS_TEST_WHEEL_DIR to the torch_fl wheels to run this")
    for wheel in wheels:
        r = subprocess.run([_cli(fresh_preflight), "--wheel", str(wheel), "--python", sys.executable],
                           capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
