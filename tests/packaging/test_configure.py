"""configure: SDK versions, the CUDA torch download (from a local index), torch facts read from files."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging_support import BUNDLERS, REPO, build_env, run_build
from synthetic import make_sdk_tree
from torch_fl_packaging.configure import check_concrete_version, configure, read_sdk_version
from torch_fl_packaging.errors import ConfigureError
from torch_fl_packaging.recipe import load_recipe
from torch_fl_packaging.torch_info import installed_torch


def test_installed_torch_is_read_without_importing_it() -> None:
    import subprocess
    import sys

    info, lib = installed_torch()
    assert info.version.startswith("2.") and info.git_version and info.cxx11_abi is True
    assert (lib / "libc10.so").is_file()
    probe = ("import sys; import torch_fl_packaging.configure; from torch_fl_packaging.torch_info import installed_torch; "
             "installed_torch(); "
             "print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "False"


@pytest.mark.parametrize("value", ["unknown", "Latest", "", "*", "any", "v1.0", "x.y"])
def test_placeholders_are_not_versions(value: str) -> None:
    with pytest.raises(ConfigureError):
        check_concrete_version(value, "--sdk-version", "fix")


@pytest.mark.compile
@pytest.mark.parametrize("platform", ["metax", "dcu", "ppu", "ascend", "gcu", "musa", "tsingmicro", "kunlunxin", "bpu"])
def test_sdk_version_is_read_from_the_recipes_version_file(platform: str, tmp_path: Path) -> None:
    recipe = load_recipe(platform, BUNDLERS)
    make_sdk_tree(tmp_path, recipe, "7.1.3")
    assert read_sdk_version(recipe, tmp_path) == "7.1.3"


@pytest.mark.compile
def test_sdk_version_flag_must_agree_with_the_tree(tmp_path: Path) -> None:
    recipe = load_recipe("ascend", BUNDLERS)
    make_sdk_tree(tmp_path, recipe, "8.2.0")
    with pytest.raises(ConfigureError, match="differs from the SDK tree"):
        configure(platform="ascend", source_dir=REPO, out_dir=tmp_path / "o", sdk_root=tmp_path, sdk_version="8.1.0")
    cfg = configure(platform="ascend", source_dir=REPO, out_dir=tmp_path / "o", sdk_root=tmp_path, sdk_version="8.2.0")
    assert cfg.wheel_version.endswith("+cann8.2.0") and cfg.torch_requirement.startswith("torch>=")
    (tmp_path / "version.cfg").unlink()
    cfg = configure(platform="ascend", source_dir=REPO, out_dir=tmp_path / "o", sdk_root=tmp_path, sdk_version="8.2.0")
    assert cfg.sdk_version == "8.2.0"  # no version file: the flag alone


@pytest.mark.compile
def test_sdk_root_from_the_recipes_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = load_recipe("musa", BUNDLERS)
    make_sdk_tree(tmp_path, recipe, "4.2.0")
    monkeypatch.setenv("MUSA_HOME", str(tmp_path))
    cfg = configure(platform="musa", source_dir=REPO, out_dir=tmp_path / "o")
    assert cfg.sdk_root == tmp_path.resolve() and cfg.local_version == "musa4.2.0"


@pytest.mark.compile
def test_cuda_torch_is_downloaded_once_from_the_configured_index(tmp_path: Path, torch_lib: Path) -> None:
    """A PEP 503 index on disk stands in for PyPI: FLAGOS_CUDA_TORCH_INDEX and the cache outside the repo."""
    from test_cuda_assets import make_cuda_torch_wheel

    wheel = make_cuda_torch_wheel(tmp_path / "made", torch_lib)
    index = tmp_path / "simple"
    (index / "torch").mkdir(parents=True)
    (index / "torch" / wheel.name).write_bytes(wheel.read_bytes())
    (index / "torch" / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    env = build_env()
    env["FLAGOS_CUDA_TORCH_INDEX"] = index.as_uri()
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    out = tmp_path / "out"
    # Stop right after configure: the source tree has no CUDA toolkit here, so use a bad --from-wheel.
    res = run_build(["--platform", "cuda", "--out", str(out), "--from-wheel", str(tmp_path / "none.whl")], env=env)
    assert res.rc == 2 and "--from-wheel not found" in res.stderr
    res = run_build(["--platform", "cuda", "--out", str(out), "--json", "--preflight", "off",
                     "--from-wheel", str(_plugin(tmp_path, torch_lib))], env=env)
    assert res.rc == 0, res.stderr
    cached = list((tmp_path / "cache" / "torch_fl" / "cuda-torch").glob("torch-*.whl"))
    assert [p.name for p in cached] == [wheel.name]
    assert res.json["vendor_torch"]["source"] == wheel.name
    # A second run uses the cache, even with the index gone.
    (index / "torch" / wheel.name).unlink()
    res = run_build(["--platform", "cuda", "--out", str(out), "--preflight", "off",
                     "--from-wheel", str(_plugin(tmp_path, torch_lib))], env=env)
    assert res.rc == 0, res.stderr
    assert not any(p.name.startswith(".") for p in out.iterdir())


def _plugin(tmp_path: Path, torch_lib: Path) -> Path:
    from packaging_support import torch_base
    from synthetic import make_plugin_wheel
    from test_cuda_assets import CUDA_REQS, FLAGGEMS_EXTRA

    base = torch_base()
    return make_plugin_wheel(tmp_path / "plugin", load_recipe("cuda", BUNDLERS), version=f"{base}+cuda13.0",
                             requires=[f"torch=={base}", *CUDA_REQS, *FLAGGEMS_EXTRA], torch_lib=torch_lib)


@pytest.mark.compile
def test_build_env_vendor_torch_must_link_the_vendor_runtime(tmp_path: Path, torch_lib: Path) -> None:
    from synthetic import compile_library
    from torch_fl_packaging.vendor_torch import check_links_vendor_runtime

    recipe = load_recipe("metax", BUNDLERS)
    with pytest.raises(ConfigureError, match="not metax's build of torch"):
        check_links_vendor_runtime(recipe, torch_lib)  # stock torch+cpu
    sdk = make_sdk_tree(tmp_path / "maca", recipe, "3.8.1")
    fork = tmp_path / "fork"
    compile_library(fork / "libc10.so", "libc10.so", needed=[sdk["libmcruntime.so"]])
    check_links_vendor_runtime(recipe, fork)  # a fork that links MACA passes


@pytest.mark.compile
def test_metax_without_vendor_torch_on_a_stock_environment(tmp_path: Path) -> None:
    recipe = load_recipe("metax", BUNDLERS)
    make_sdk_tree(tmp_path / "maca", recipe, "3.8.1")
    res = run_build(["--platform", "metax", "--sdk-root", str(tmp_path / "maca"), "--out", str(tmp_path / "out")])
    assert res.rc == 2 and "not metax's build of torch" in res.stderr and "--vendor-torch" in res.stderr
    assert not (tmp_path / "out").exists()
