"""Stage 2, build: the PEP 517 build of the plugin against the installed torch.

``pip wheel --no-build-isolation`` so the extension compiles against the torch
that is installed (an isolated build would fetch another torch).  The configure
stage's results reach the build backend through the environment
(``FLAGOS_PLATFORM``, ``FLAGOS_WHEEL_LOCAL_VERSION``,
``FLAGOS_WHEEL_REQUIREMENTS``, read by ``build_metadata`` and CMake).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .configure import Config, wheel_name_problem
from .errors import BuildError
from .torch_download import cache_dir

__all__ = ["BuiltWheel", "build"]


@dataclass(frozen=True)
class BuiltWheel:
    path: Path
    name: str
    version: str
    log: Path | None


def _check(path: Path, config: Config) -> BuiltWheel:
    bad = wheel_name_problem(path, config.wheel_version)
    if bad is not None:
        raise BuildError(f"the build produced a wheel that fails its name check: {bad.problem}", bad.value, bad.fix)
    return BuiltWheel(path, "torch_fl", config.wheel_version, None)


#: What the CMake build of the cuda runtime needs from the CUDA torch (CMakeLists.txt:
#: find_library(torch_cuda/c10_cuda) in FLAGOS_CUDA_TORCH_DIR/lib and its include/).
_CUDA_TORCH_MEMBERS = ("torch/lib/libtorch_cuda.so", "torch/lib/libc10_cuda.so")


def _cuda_torch_dir(config: Config) -> Path | None:
    """The CUDA-built vendor torch's ``torch`` package directory for CMake (FLAGOS_CUDA_TORCH_DIR).

    A torch/lib directory is used where it is; a wheel has its headers and the two
    link libraries streamed out (not the whole wheel) into the user cache, once per
    wheel.  The path must be stable: CMake caches the libraries it found, so a
    per-run directory would break the next incremental build.
    """
    vendor = config.vendor
    # A CUDA build of torch serves the cuda runtime adapter: the CUDA torch wheel of cuda-assets, and a
    # CUDA-compatible vendor's fork (ppu), whose build environment holds stock torch+cpu.
    if vendor is None or not vendor.info.cuda:
        return None
    if not vendor.is_wheel:
        return vendor.path.parent
    final = cache_dir() / "extracted" / vendor.path.name.removesuffix(".whl")
    if (final / "complete").is_file():
        return final / "torch"
    final.parent.mkdir(parents=True, exist_ok=True)
    dest = Path(tempfile.mkdtemp(prefix=".partial-", dir=final.parent))
    with zipfile.ZipFile(vendor.path) as zf:
        for info in zf.infolist():
            name = info.filename
            if info.is_dir() or not (name.startswith("torch/include/") or name in _CUDA_TORCH_MEMBERS):
                continue
            if name.startswith("/") or ".." in name.split("/"):
                raise BuildError("unsafe member in the CUDA torch wheel", name, "download it again")
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, target.open("wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    (dest / "complete").write_text(vendor.path.name + "\n")
    try:
        dest.rename(final)
    except OSError:  # another build extracted it meanwhile
        shutil.rmtree(dest, ignore_errors=True)
    return final / "torch"


def build(config: Config, work: Path, log: Callable[[str], None] = lambda _: None) -> BuiltWheel:
    if config.from_wheel is not None:
        # A wheel built elsewhere (or a test fixture): configure checked its name and archive.
        return BuiltWheel(config.from_wheel, "torch_fl", config.wheel_version, None)
    dist = work / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    log_path = work / "build.log"
    env = dict(os.environ)
    env.update(config.build_env)
    cuda_torch = _cuda_torch_dir(config)
    if cuda_torch is not None:
        env["FLAGOS_CUDA_TORCH_DIR"] = str(cuda_torch)
    cmd = [config.python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
           "--disable-pip-version-check", "-w", str(dist), str(config.source_dir)]
    with log_path.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, cwd=config.source_dir)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            stripped = line.strip()
            if stripped:
                log(stripped[-160:])
        rc = proc.wait()
    if rc != 0:
        tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()][-1:] or ["?"]
        raise BuildError("the plugin build failed", re.sub(r"\s+", " ", tail[0])[:200],
                         f"see the build log, kept at {log_path}")
    wheels = sorted(dist.glob("torch_fl-*.whl"))
    if len(wheels) != 1:
        raise BuildError("the build did not produce exactly one torch_fl wheel", [w.name for w in wheels],
                         "check the build log")
    built = _check(wheels[0], config)
    return BuiltWheel(built.path, built.name, built.version, log_path)

