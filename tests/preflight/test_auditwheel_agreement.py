"""Agreement with an anchor: the libraries preflight resolves from outside the wheel are the ones
`auditwheel show --json` reports as external, at the same paths.

auditwheel knows nothing of torch/lib, so it is given the target's torch/lib on LD_LIBRARY_PATH,
which its lddtree honours; preflight finds the same directory as the installed torch's. Libraries
auditwheel does not list are the ones its policy whitelists (glibc, libstdc++, libgcc_s): for
those preflight must agree that they come from the system directories.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import _preflight_builders as B
from support.tools import require_tool

pytestmark = pytest.mark.compile


def _auditwheel() -> list[str]:
    return [require_tool("auditwheel", "ci/requirements-test.txt installs it")]


def _site(python: str) -> str:
    return subprocess.run([python, "-c", "import sysconfig;print(sysconfig.get_paths()['platlib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def external_agreement(wheel: Path, python: str, torch_lib: str) -> dict[str, str | None]:
    """`torch_lib`: a LD_LIBRARY_PATH value given to both tools."""
    env = dict(os.environ, LD_LIBRARY_PATH=torch_lib)
    aw = subprocess.run([*_auditwheel(), "show", "--json", str(wheel)], capture_output=True, text=True, env=env,
                        check=False, timeout=600)
    assert aw.returncode == 0, aw.stderr
    theirs: dict[str, str | None] = json.loads(aw.stdout)["external_libs"]

    r = B.run_preflight(["--wheel", str(wheel), "--python", python, "--json"], timeout=600,
                        env={"LD_LIBRARY_PATH": torch_lib})
    doc = json.loads(r.stdout)
    mine: dict[str, str | None] = {}
    for per_member in doc["subjects"][0]["facts"]["external_libraries"].values():
        mine.update(per_member)
    real = {k: (os.path.realpath(v) if v else None) for k, v in mine.items()}
    for soname, path in theirs.items():
        assert soname in mine, f"auditwheel reports {soname} external, preflight does not"
        assert real[soname] == (os.path.realpath(path) if path else None), soname
    system = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")
    for soname in set(mine) - set(theirs):
        path = mine[soname]
        assert path is not None and path.startswith(system), \
            f"preflight reports {soname} ({path}) external, auditwheel does not"
    return theirs


def test_external_libraries_agree_with_auditwheel(host_wheel: Path, target_python: str) -> None:
    torch_lib = os.path.join(_site(target_python), "torch", "lib")
    theirs = external_agreement(host_wheel, target_python, torch_lib)
    assert set(theirs) == {"libtorch_cpu.so", "libc10.so"}  # the comparison is not vacuous


def test_real_torch_fl_wheels_agree_with_auditwheel() -> None:
    """Runs on the project's wheels (FLAGOS_TEST_WHEEL / FLAGOS_TEST_WHEEL_DIR), against this
    interpreter's torch (ci/test installs torch 2.13.0+cpu). Skipped without them."""
    wheels = B.real_wheels()
    if not wheels:
        pytest.skip("set FLAGOS_TEST_WHEEL or FLAGOS_TEST_WHEEL_DIR to the torch_fl wheels to run this")
    try:
        import importlib.metadata as md

        torch_dir = md.distribution("torch").locate_file("torch")
    except md.PackageNotFoundError:
        pytest.skip("torch is not installed in this interpreter")
    for wheel in wheels:
        external_agreement(wheel, sys.executable, str(Path(str(torch_dir)) / "lib"))
