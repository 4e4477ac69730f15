"""Network access of the configure stage: fetching the CUDA torch wheel a cuda-assets build takes
its libraries from, once, into the user's cache (never into a checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .errors import ConfigureError
from .pip_env import isolated_pip_env
from .recipe import Recipe

__all__ = ["cache_dir", "download_cuda_torch"]


def cache_dir() -> Path:
    """The pipeline's download cache, outside any checkout: ${XDG_CACHE_HOME:-~/.cache}/torch_fl/cuda-torch."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torch_fl" / "cuda-torch"


def _wheel_python_tag() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}"


def download_cuda_torch(version: str, recipe: Recipe) -> Path:
    """Fetch the CUDA torch wheel of ``version`` into the user cache (once)."""
    cache = cache_dir()
    tag = _wheel_python_tag()
    pattern = f"torch-{version}*-{tag}-{tag}-*linux*_x86_64.whl"
    found = [p for p in sorted(cache.glob(pattern)) if "+cpu" not in p.name]
    if found:
        return found[0]
    spec = recipe.vendor_torch
    index = (os.environ.get(spec.index_env) if spec.index_env else None) or spec.index
    if not index:
        raise ConfigureError("no index to download the CUDA torch wheel from", recipe.platform,
                             "pass --vendor-torch or set the recipe's vendor_torch.index")
    cache.mkdir(parents=True, exist_ok=True)
    env = isolated_pip_env()  # the CUDA wheel comes from the configured index only
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "-i", index, "-d", str(cache), f"torch=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        tail = [ln for ln in lines if ln.startswith("ERROR")][-1:] or lines[-1:] or ["?"]
        raise ConfigureError("cannot download the CUDA torch wheel", f"torch=={version} from {index}",
                             f"pass --vendor-torch PATH or set {spec.index_env} ({tail[0][:200]})")
    found = [p for p in sorted(cache.glob(pattern)) if "+cpu" not in p.name]
    if not found:
        raise ConfigureError("the index gave no CUDA torch wheel", f"torch=={version} from {index}",
                             "pass --vendor-torch PATH")
    return found[0]
