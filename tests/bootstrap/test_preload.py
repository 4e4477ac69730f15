"""torch_fl_bootstrap.cuda_assets.preload on real ELF files: a look-alike cuda-assets installation whose
bundled libraries need each other and a library of the installed torch/lib (no RPATH to it), as the CUDA
pieces of libtorch need torch's own libraries.  The preload runs in a fresh interpreter (it dlopens
RTLD_GLOBAL) and the result is read back from its /proc/self/maps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.bootstrap import BOOTSTRAP_SOURCE
from support.elf import compile_c, read_dynamic

pytestmark = pytest.mark.compile

_PRELOAD = """
import json, os, sys
from torch_fl_bootstrap import BootstrapError, cuda_assets, manifest
sys.path.insert(0, sys.argv[2])  # the look-alike site-packages, for the installed torch
try:
    cuda_assets.preload(sys.argv[1], manifest.load(sys.argv[1]))
except BootstrapError as exc:
    print(json.dumps({"error": str(exc)}))
    raise SystemExit(0)
maps = {l.split(None, 5)[5].strip() for l in open("/proc/self/maps") if l.count(" ") >= 5 and ".so" in l}
print(json.dumps({"maps": sorted(maps)}))
"""


@pytest.fixture
def installation(tmp_path: Path) -> tuple[Path, Path]:
    """site-packages with torch 2.13.0 (torch/lib/libc10.so) and a cuda-assets torch_fl bundling two libraries."""
    site = tmp_path / "site-packages"
    torch = site / "torch"
    (torch / "lib").mkdir(parents=True)
    (torch / "__init__.py").write_text("")
    (torch / "version.py").write_text("__version__ = '2.13.0+cpu'\n")
    c10 = compile_c(torch / "lib" / "libc10.so", "int c10_answer(void) { return 42; }\n", soname="libc10.so")
    bundled = site / "torch_fl" / "cuda"
    c10_cuda = compile_c(bundled / "libc10_cuda.so",
                         "int c10_answer(void);\nint c10_cuda(void) { return c10_answer(); }\n",
                         soname="libc10_cuda.so", libs=["libc10.so"], libdirs=[c10.parent], as_needed=False)
    torch_cuda = compile_c(bundled / "libtorch_cuda.so",
                           "int c10_cuda(void);\nint torch_cuda(void) { return c10_cuda(); }\n",
                           soname="libtorch_cuda.so", libs=["libc10_cuda.so"], libdirs=[bundled], as_needed=False)
    elf = []
    for lib in (torch_cuda, c10_cuda):  # the user of a library first: the preload must reorder them
        elf.append({"path": f"torch_fl/cuda/{lib.name}", "origin": "bundled", "sha256": "0" * 64,
                    "size": lib.stat().st_size, **read_dynamic(lib).record_fields()})
    manifest = {"schema_version": 1, "platform": "cuda",
                "bundle": {"kind": "cuda-assets", "directory": "torch_fl/cuda"},
                "wheel": {"version": "2.13.0+cuda13.0"},
                "torch": {"version": "2.13.0+cu130", "requirement": "torch==2.13.0"},
                "sdk": {"name": "cuda"}, "requirements": ["torch==2.13.0", "nvidia-cuda-runtime==13.0.96"],
                "runtime": {"directories": []}, "elf": elf}
    (site / "torch_fl" / "compatibility.json").write_text(json.dumps(manifest))
    return site, site / "torch_fl"


def _preload(site: Path, pkg: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_PRELOAD), str(pkg), str(site)], capture_output=True,
                          text=True, env={"PYTHONPATH": str(BOOTSTRAP_SOURCE), "PATH": "/usr/bin:/bin"}, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_torch_lib_first_then_the_bundled_libraries_dependencies_first(installation: tuple[Path, Path]) -> None:
    site, pkg = installation
    # No library names where the others are (no RPATH/RUNPATH): each one loads only when what it needs
    # is already in the process, so all three mapped means torch/lib first, then dependencies first.
    manifest = json.loads((pkg / "compatibility.json").read_text())
    assert all(not rec["rpath"] and not rec["runpath"] for rec in manifest["elf"])
    assert [rec["soname"] for rec in manifest["elf"]] == ["libtorch_cuda.so", "libc10_cuda.so"]
    maps = set(_preload(site, pkg)["maps"])
    assert {str(site / "torch" / "lib" / "libc10.so"), str(pkg / "cuda" / "libc10_cuda.so"),
            str(pkg / "cuda" / "libtorch_cuda.so")} <= maps


def test_a_dependency_found_nowhere_is_named_with_the_requirements(installation: tuple[Path, Path]) -> None:
    site, pkg = installation
    (site / "torch" / "lib" / "libc10.so").unlink()
    error = _preload(site, pkg)["error"]
    assert error.startswith(f"torch_fl 2.13.0+cuda13.0 cannot load {pkg / 'cuda' / 'libc10_cuda.so'}: ")
    assert "libc10.so: cannot open shared object file" in error
    assert "(nvidia-cuda-runtime==13.0.96); install them: pip install torch_fl==2.13.0+cuda13.0" in error
