"""cuda-assets with the REAL CUDA torch 2.13.0 libraries, on this CPU-only machine (opt-in: FLAGOS_TEST_CUDA_ASSETS=1).

The CUDA torch wheel and the nvidia runtime wheels come from the cache the
preflight tests fill (tests/preflight/_preflight_builders.py; downloaded once).
The torch_fl wheel is built by ``torch-fl-build --platform cuda`` around the
real host plugin, re-versioned as the cuda platform's plugin: a STAND-IN for a
plugin compiled for CUDA, which this machine cannot build; the five CUDA
libraries, their RPATH, the requirements and the manifest are the real ones.
It is installed beside stock torch+cpu and the nvidia packages.  In every
import order PyTorch must then have its CUDA kernels and its real CUDA hooks:
creating a CUDA tensor fails for want of a driver, not for want of ATen_cuda.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.bootstrap import REPO, torch_tree_hashes
from orders import ORDERS, run_order

pytestmark = [pytest.mark.cuda_assets, pytest.mark.wheel, pytest.mark.compile, pytest.mark.slow]

_STUB_HOOKS = "Cannot initialize CUDA without ATen_cuda library"
_SKIP = {"_distutils_hack", "distutils-precedence.pth", "pip", "setuptools", "pkg_resources", "__pycache__"}


def _plugin_wheel(host_wheel: Path, version: str, requirements: list[str], out: Path) -> Path:
    """The real host plugin wheel (before bundling), re-versioned for the cuda recipe."""
    from torch_fl_packaging.wheelfile import write_wheel

    tree = out / "plugin-tree"
    with zipfile.ZipFile(host_wheel) as zf:
        zf.extractall(tree)
    (tree / "torch_fl" / "compatibility.json").unlink()
    old = next(tree.glob("*.dist-info"))
    new = tree / f"torch_fl-{version}.dist-info"
    old.rename(new)
    meta = [ln for ln in (new / "METADATA").read_text().splitlines()
            if not ln.startswith(("Version:", "Requires-Dist:"))]
    meta[1:1] = [f"Version: {version}", *(f"Requires-Dist: {r}" for r in requirements)]
    (new / "METADATA").write_text("\n".join(meta) + "\n")
    for so in tree.rglob("*.so*"):
        so.chmod(0o755)
    wheel = out / f"torch_fl-{version}-cp311-cp311-linux_x86_64.whl"
    write_wheel(tree, new.name, wheel, level=1)
    return wheel


@pytest.fixture(scope="module")
def cuda_venv(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    sys.path.insert(0, str(REPO / "tests" / "preflight"))
    builders = pytest.importorskip("_preflight_builders")
    from torch_fl_packaging.configure import configure

    inputs = builders.download_cuda_inputs()
    stock_py = builders.cuda_env("torch-2.13.0-cpu-nvidia", inputs["cpu"], inputs["nvidia"])
    stock_site = next(stock_py.parent.parent.glob("lib/python*/site-packages"))
    work = tmp_path_factory.mktemp("cuda-assets")
    cfg = configure(platform="cuda", source_dir=REPO, out_dir=work / "out", vendor_torch=inputs["cuda"])
    plugin = _plugin_wheel(wheels["host"], cfg.wheel_version, list(cfg.requirements), work)
    exe = shutil.which("torch-fl-build", path=str(Path(sys.executable).parent))
    proc = subprocess.run([exe or "torch-fl-build", "--platform", "cuda", "--vendor-torch", str(inputs["cuda"]),
                           "--from-wheel", str(plugin), "--preflight", "off", "--out", str(work / "out")],
                          capture_output=True, text=True, cwd=REPO, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheel = next((work / "out").glob("torch_fl-*+cuda*.whl"))
    # A fresh venv whose site-packages shows the cached stock torch+cpu and nvidia packages (read only,
    # through symlinks) and holds the torch_fl wheel.
    root = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next(root.glob("lib/python*/site-packages"))
    for entry in stock_site.iterdir():
        if entry.name not in _SKIP and not entry.name.startswith(("pip-", "setuptools-")):
            (site / entry.name).symlink_to(entry)
    # The cached environment holds torch and the nvidia packages only (--no-deps); torch's own
    # Python requirements go into this venv.
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    deps = [str(r) for r in map(Requirement, requires("torch") or [])
            if not r.name.startswith(("nvidia-", "cuda-", "triton")) and (r.marker is None or r.marker.evaluate())]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--ignore-installed", "--prefix", str(root), *deps],
                   check=True, timeout=900)
    before = torch_tree_hashes(site)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed",
                    "--prefix", str(root), str(wheel)], check=True, timeout=900)
    yield root / "bin" / "python", site, work / "cache"
    assert torch_tree_hashes(site) == before, "the installed torch changed"


@pytest.mark.parametrize("order", list(ORDERS))
def test_every_import_order_has_the_real_cuda_kernels_and_hooks(cuda_venv, order: str, tmp_path: Path) -> None:
    python, site, cache = cuda_venv
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_", "PYTHON", "TORCH_DEVICE"))}
    # The cached torch was installed without bytecode; do not write it there.
    env.update(FLAGOS_TEST_PROBE_CUDA="1", FLAGOS_CACHE_DIR=str(cache), PYTHONDONTWRITEBYTECODE="1")
    report = run_order(python, order, tmp_path, env)
    assert report["sum"] == 12.0
    assert report["cuda_mm"] is True, "PyTorch has no CUDA kernel for aten::mm"
    assert report["cuda_empty"] != "created" and _STUB_HOOKS not in report["cuda_empty"], report["cuda_empty"]
    for lib in ("libtorch_cuda.so", "libc10_cuda.so"):
        assert os.path.realpath(site / "torch_fl" / "cuda" / lib) in report["maps"], lib
