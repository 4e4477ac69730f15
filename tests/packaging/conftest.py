"""Fixtures of the pipeline tests: synthetic SDK trees, plugin wheels, a stand-in fork.

All of them are real ELF files compiled here (see ``synthetic.py``).  The
session-scoped host wheel builds the real plugin once (or takes
``FLAGOS_TEST_WHEEL_DIR``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import synthetic  # noqa: E402
from torch_fl_packaging.torch_info import installed_torch  # noqa: E402
from torch_fl_packaging.recipe import Recipe, load_recipe  # noqa: E402

from packaging_support import BUNDLERS, SDK_VERSION, build_env, run_build, torch_base  # noqa: E402

@pytest.fixture(scope="session")
def torch_lib() -> Path:
    return installed_torch()[1]


@pytest.fixture(scope="session")
def stand_in_fork(tmp_path_factory: pytest.TempPathFactory, torch_lib: Path) -> Path:
    """STAND-IN vendor fork: the stock core libraries copied, as a vendor build ships them."""
    return synthetic.make_stand_in_fork(torch_lib, tmp_path_factory.mktemp("stand-in-fork"))


@dataclass
class PlatformInputs:
    recipe: Recipe
    args: list[str]
    sdk_root: Path | None
    plugin_wheel: Path


@pytest.fixture
def platform_inputs(tmp_path: Path, torch_lib: Path, request: pytest.FixtureRequest) -> Callable[[str], PlatformInputs]:
    """Everything ``torch-fl-build --platform P`` needs, synthetic, for any non-CUDA recipe."""

    def make(platform: str) -> PlatformInputs:
        recipe = load_recipe(platform, BUNDLERS)
        base = torch_base()
        args = ["--platform", platform, "--compress-level", "1"]
        sdk_root = None
        vendor_libs: dict[str, Path] = {}
        version = SDK_VERSION.get(platform)
        if recipe.sdk and recipe.sdk.prefix:
            sdk_root = tmp_path / f"synthetic-{recipe.sdk.name}-sdk"
            vendor_libs = synthetic.make_sdk_tree(sdk_root, recipe, version)
            args += ["--sdk-root", str(sdk_root)]
        local = (recipe.wheel.local_version.replace("{sdk_version}", version or "")
                 .replace("{sdk_version_nodots}", (version or "").replace(".", "")))
        req = [f"torch=={base}"] if recipe.exact_torch else [
            f"torch>={base.rsplit('.', 1)[0]},<{base.split('.')[0]}.{int(base.split('.')[1]) + 1}"]
        wheel = synthetic.make_plugin_wheel(tmp_path, recipe, version=f"{base}+{local}", requires=req,
                                            torch_lib=torch_lib, vendor_libs=vendor_libs)
        args += ["--from-wheel", str(wheel)]
        if recipe.kind == "forked-libtorch" and not recipe.stand_in:
            fork = request.getfixturevalue("stand_in_fork")
            args += ["--vendor-torch", str(fork)]
        return PlatformInputs(recipe, args, sdk_root, wheel)

    return make


# -- the real wheels (marker: wheel) ---------------------------------------------

def _find_wheel(directory: Path, local: str) -> Path | None:
    found = sorted(directory.glob(f"torch_fl-*+{local}-*.whl"))
    return found[-1] if found else None


@pytest.fixture(scope="session")
def real_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The real host and host-forked wheels, built once per session by torch-fl-build.

    ``FLAGOS_TEST_WHEEL_DIR`` names a directory that already holds them (ci/build-wheel's dist/).
    """
    given = os.environ.get("FLAGOS_TEST_WHEEL_DIR")
    wheels: dict[str, Path] = {}
    out = Path(given) if given else tmp_path_factory.mktemp("real-wheels")
    for platform in ("host", "host-forked"):
        local = load_recipe(platform, BUNDLERS).wheel.local_version
        wheel = _find_wheel(out, local)
        if wheel is None:
            if given:
                pytest.fail(f"FLAGOS_TEST_WHEEL_DIR={given} holds no torch_fl-*+{local}-*.whl")
            env = build_env()
            env.setdefault("SOURCE_DATE_EPOCH", "1700000000")
            res = run_build(["--platform", platform, "--out", str(out)], env=env)
            assert res.rc == 0, res.stderr[-3000:]
            wheel = _find_wheel(out, local)
            assert wheel is not None
        wheels[platform] = wheel
    return wheels


@pytest.fixture(scope="session")
def stock_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding only stock torch (the build's version); returns its python."""
    from torch_fl_packaging.torch_info import installed_torch

    env_dir = tmp_path_factory.mktemp("stock-env")
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    version = installed_torch()[0].version.split("+")[0]
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", f"torch=={version}"], check=True)
    return py
