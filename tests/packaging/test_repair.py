"""repair: non-system libraries are grafted (renamed, re-linked); torch's and the recipe's never are."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from packaging_support import BUNDLERS, build_env, run_build, torch_base
from synthetic import compile_library, make_plugin_wheel
from torch_fl_packaging.elf_read import read_elf
from torch_fl_packaging.recipe import load_recipe


@pytest.mark.compile
def test_remaining_libraries_are_grafted(tmp_path: Path, torch_lib: Path) -> None:
    ext = tmp_path / "elsewhere"
    inner = compile_library(ext / "libinner.so.2", "libinner.so.2", exports=["inner"])
    outer = compile_library(ext / "libouter.so.1", "libouter.so.1", needed=[inner], calls=["inner"])
    base = torch_base()
    wheel = make_plugin_wheel(tmp_path, load_recipe("host", BUNDLERS), version=f"{base}+host",
                              requires=[f"torch>={base[:4]},<2.{int(base.split('.')[1]) + 1}"],
                              torch_lib=torch_lib, vendor_libs={"libouter.so.1": outer})
    env = build_env()
    env["LD_LIBRARY_PATH"] = str(ext)
    out = tmp_path / "out"
    res = run_build(["--platform", "host", "--from-wheel", str(wheel), "--out", str(out), "--json"], env=env)
    assert res.rc == 0, res.stderr
    summary = res.json
    grafted = {Path(g["path"]).name.split("-")[0]: g for g in summary["grafted"]}
    assert set(grafted) == {"libouter", "libinner"}
    tree = tmp_path / "tree"
    with zipfile.ZipFile(out / summary["wheel"]["filename"]) as zf:
        zf.extractall(tree)
    libs = tree / "torch_fl.libs"
    outer_name = Path(grafted["libouter"]["path"]).name
    inner_name = Path(grafted["libinner"]["path"]).name
    plugin = read_elf(next((tree / "torch_fl").glob("_C*.so")))
    assert outer_name in plugin.needed and "libouter.so.1" not in plugin.needed
    # The plugin keeps its own entries (torch's lib dir is outside the wheel) and gains the graft dir.
    rpath = plugin.rpath or plugin.runpath
    assert rpath == ("$ORIGIN/lib", "$ORIGIN/../torch/lib", "$ORIGIN/../torch_fl.libs")
    outer_info = read_elf(libs / outer_name)
    assert outer_info.soname == outer_name and inner_name in outer_info.needed and outer_info.rpath == ("$ORIGIN",)
    manifest = json.loads((tree / "torch_fl/compatibility.json").read_text())
    origins = {r["path"]: (r["origin"], r.get("source")) for r in manifest["elf"]}
    assert origins[f"torch_fl.libs/{outer_name}"] == ("grafted", str(outer))
    # Nothing of torch's or the runtime was grafted.
    assert not any(n.startswith(("libc10", "libtorch", "libflagos")) for n in os.listdir(libs))


def _wheel_needing_an_unbundled_library(tmp_path: Path, torch_lib: Path) -> Path:
    """A host plugin wheel whose plugin needs liblonely.so, which lies outside every search path."""
    lonely = compile_library(tmp_path / "elsewhere" / "liblonely.so", "liblonely.so")
    base = torch_base()
    return make_plugin_wheel(tmp_path, load_recipe("host", BUNDLERS), version=f"{base}+host",
                             requires=[f"torch>={base[:4]},<2.{int(base.split('.')[1]) + 1}"],
                             torch_lib=torch_lib, vendor_libs={"liblonely.so": lonely})


@pytest.mark.compile
def test_unresolvable_dependency_is_named(tmp_path: Path, torch_lib: Path) -> None:
    wheel = _wheel_needing_an_unbundled_library(tmp_path, torch_lib)
    res = run_build(["--platform", "host", "--from-wheel", str(wheel), "--out", str(tmp_path / "out")])
    assert res.rc == 1
    assert "liblonely.so needed by torch_fl/_C" in res.stderr and "[repair] exclude" in res.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.compile
def test_failed_stage_leaves_no_work_dir(tmp_path: Path, torch_lib: Path) -> None:
    wheel = _wheel_needing_an_unbundled_library(tmp_path, torch_lib)
    env = build_env()
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    res = run_build(["--platform", "host", "--from-wheel", str(wheel), "--out", str(tmp_path / "out")], env=env)
    assert res.rc == 1
    assert list((tmp_path / "tmp").iterdir()) == []


def test_failed_build_keeps_its_log(tmp_path: Path) -> None:
    import shutil

    from support.paths import REPO

    source = tmp_path / "src"
    shutil.copytree(REPO / "bundlers", source / "bundlers")
    shutil.copytree(REPO / "manifests", source / "manifests")
    (source / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "no_such_backend"\n')
    env = build_env()
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    res = run_build(["--platform", "host", "--source", str(source), "--out", str(tmp_path / "out")], env=env)
    assert res.rc == 1 and "the plugin build failed" in res.stderr
    (work,) = (tmp_path / "tmp").iterdir()
    assert str(work / "build.log") in res.stderr and "no_such_backend" in (work / "build.log").read_text()
    assert not (tmp_path / "out").exists()
