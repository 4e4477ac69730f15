"""Companion pins (manifests/companions.toml) and the optional extras made from them (torch_fl[flaggems]).

The cuda wheel's METADATA is written by the real build backend (scikit-build-core's
prepare_metadata_for_build_wheel, which compiles nothing) from what configure resolved against a
SYNTHETIC CUDA torch wheel; real pip then resolves the extra from it.
"""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging_support import BUNDLERS, REPO, run_build, torch_base
from support.wheels import write_wheel
from torch_fl_packaging.companions import companion_pins, extra_requirements
from torch_fl_packaging.configure import configure
from torch_fl_packaging.errors import ConfigureError, RecipeError
from torch_fl_packaging.recipe import load_recipe, load_recipe_file
from torch_fl_packaging.torch_info import TorchInfo, VendorTorch


def _source(tmp_path: Path, companions: str) -> Path:
    src = tmp_path / "src"
    shutil.copytree(BUNDLERS, src / "bundlers")
    (src / "manifests").mkdir()
    (src / "manifests" / "companions.toml").write_text(companions)
    return src


def test_the_repository_pins_flaggems_to_the_release_the_routes_are_made_for() -> None:
    # flag-gems 5.0.2 on PyPI: the release the flaggems provider is written and measured against.
    assert companion_pins(REPO, "cuda")["flaggems"] == "5.0.2"
    assert companion_pins(REPO, "host")["flaggems"] == "5.0.2"


@pytest.mark.parametrize("value", ["latest", "unknown", "*", "x.y", "5.0.x", "v5", "", "any"])
def test_placeholder_pins_stop_the_build(tmp_path: Path, value: str) -> None:
    src = _source(tmp_path, f'[default]\nflaggems = "{value}"\n')
    with pytest.raises(ConfigureError, match=r"default\.flaggems is not a released version"):
        companion_pins(src, "cuda")
    # ... before anything is built, as one line with the fix, exit 2.
    out = tmp_path / "out"
    res = run_build(["--platform", "host", "--source", str(src), "--out", str(out)])
    assert res.rc == 2 and not out.exists()
    line = next(ln for ln in res.stderr.splitlines() if ln.startswith("torch-fl-build: error:"))
    suggestion = "5" if value == "v5" else "1.2.0"  # the normalized form, where there is one
    assert "flaggems is not a released version" in line and f'e.g. flaggems = "{suggestion}"' in line


def test_platform_tables_override_pins_and_none_drops_one(tmp_path: Path) -> None:
    src = _source(tmp_path, '[default]\nflaggems = "5.0.2"\nflagcx = "0.5.0"\n[metax]\nflaggems = "none"\n'
                            '[cuda]\nflagcx = "0.6.0"\n')
    assert companion_pins(src, "metax") == {"flagcx": "0.5.0"}
    assert companion_pins(src, "cuda") == {"flagcx": "0.6.0", "flaggems": "5.0.2"}
    with pytest.raises(ConfigureError, match=r"cuda\.flagcx is not a released version"):
        companion_pins(_source(tmp_path / "b", '[default]\nflagcx = "0.5.0"\n[cuda]\nflagcx = "next"\n'), "cuda")
    with pytest.raises(ConfigureError, match="unknown companion"):
        companion_pins(_source(tmp_path / "c", '[default]\nflag_gems = "5.0.2"\n'), "cuda")


def _vendor(*requires: str) -> VendorTorch:
    return VendorTorch(Path("torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"), True,
                       TorchInfo("2.13.0", "0" * 40, True, "13.0"), requires)


def test_the_extra_copies_triton_from_the_cuda_torch_with_its_marker() -> None:
    recipe = load_recipe("cuda", BUNDLERS)
    vendor = _vendor("filelock", 'triton==3.7.1; platform_system == "Linux" and python_version < "3.15"',
                     'triton>=3; extra == "compile"')  # its own extras' requirements are not the release's pin
    assert extra_requirements(recipe, {"flaggems": "5.0.2"}, vendor) == {
        "flaggems": ("flag-gems==5.0.2", 'triton==3.7.1; platform_system == "Linux" and python_version < "3.15"')}
    with pytest.raises(ConfigureError, match="does not require triton"):
        extra_requirements(recipe, {"flaggems": "5.0.2"}, _vendor("filelock"))
    with pytest.raises(ConfigureError, match="needs the flaggems pin for platform cuda"):
        extra_requirements(recipe, {}, vendor)


def test_recipe_extras_are_validated(tmp_path: Path) -> None:
    cuda = (BUNDLERS / "cuda.toml").read_text()
    bad = tmp_path / "a" / "cuda.toml"
    bad.parent.mkdir()
    bad.write_text(cuda.replace('companion = "flaggems"', 'companion = "flaggem"'))
    with pytest.raises(RecipeError, match="unknown extras.companion") as err:
        load_recipe_file(bad)
    assert "did you mean 'flaggems'" in err.value.line()
    host = tmp_path / "b" / "host.toml"
    host.parent.mkdir()
    host.write_text((BUNDLERS / "host.toml").read_text() + '\n[[extras]]\nname = "flaggems"\ncompanion = "flaggems"\n'
                    'distribution = "flag-gems"\nfrom_vendor_torch = ["triton"]\n')
    with pytest.raises(RecipeError, match="no vendor torch"):
        load_recipe_file(host)


def _isolated_pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # the machine's wheelhouse and constraints stay out
    return env


@pytest.mark.compile
def test_the_backend_writes_the_extra_and_pip_resolves_it(tmp_path: Path, torch_lib: Path) -> None:
    from test_cuda_assets import CUDA_REQS, make_cuda_torch_wheel, make_runtime_wheels

    cfg = configure(platform="cuda", source_dir=REPO, out_dir=tmp_path / "out",
                    vendor_torch=make_cuda_torch_wheel(tmp_path, torch_lib))
    meta_dir = tmp_path / "meta"
    hook = f"from scikit_build_core.build import prepare_metadata_for_build_wheel as p; print(p({str(meta_dir)!r}))"
    res = subprocess.run([sys.executable, "-c", hook], cwd=REPO, env={**os.environ, **cfg.build_env},
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    text = (meta_dir / res.stdout.strip().splitlines()[-1] / "METADATA").read_text()
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    assert msg.get_all("Provides-Extra") == ["flaggems"]
    assert msg.get_all("Requires-Dist") == list(cfg.requires_dist)  # what the manifest stage holds it to
    assert list(cfg.requires_dist[-2:]) == ['flag-gems==5.0.2; extra == "flaggems"',
                                            'triton==3.7.1; platform_system == "Linux" and extra == "flaggems"']

    # pip, next to the installed torch+cpu: the extra brings exactly the pinned pair, the plain wheel neither.
    links = make_runtime_wheels(tmp_path)
    for dist, version in (("flag_gems", "5.0.2"), ("flag_gems", "5.0.1"), ("triton", "3.7.1"), ("triton", "3.6.0")):
        write_wheel(links / f"{dist}-{version}-py3-none-any.whl", {f"{dist}/__init__.py": b""}, name=dist,
                    version=version, tag="py3-none-any")
    wheel = write_wheel(tmp_path / f"torch_fl-{cfg.wheel_version}-py3-none-any.whl", {"torch_fl/__init__.py": b""},
                        version=cfg.wheel_version, tag="py3-none-any", metadata=text)

    def resolve(spec: str) -> dict[str, str]:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
                            "--no-index", "--find-links", str(links), spec], capture_output=True, text=True,
                           env=_isolated_pip_env(), timeout=300, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        return {i["metadata"]["name"].replace("_", "-").lower(): i["metadata"]["version"]
                for i in json.loads(r.stdout)["install"]}

    runtime = {r.split("[")[0].split("=")[0] for r in CUDA_REQS}
    base = torch_base()
    assert resolve(f"torch_fl[flaggems] @ {wheel.as_uri()}") == {
        "torch-fl": cfg.wheel_version, "flag-gems": "5.0.2", "triton": "3.7.1",
        **{name: v for name, v in resolve(f"torch_fl @ {wheel.as_uri()}").items() if name in runtime}}
    plain = resolve(f"torch_fl @ {wheel.as_uri()}")
    assert "flag-gems" not in plain and "triton" not in plain and set(plain) == {"torch-fl", *runtime}
    assert cfg.torch_requirement == f"torch=={base}"  # satisfied by the installed torch+cpu: not reinstalled
