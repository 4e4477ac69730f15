"""Every recipe builds its wheel layout end to end (synthetic SDK trees, stand-in fork).

The vendor SDKs are SYNTHETIC (real ELF files with the vendor's SONAMEs under
the recipe's prefix layout) and the vendor forks are a STAND-IN (stock torch+cpu
core libraries copied); these tests prove the packaging, not any vendor's hardware.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging_support import BUNDLERS, run_build
from torch_fl_packaging.elf_read import read_elf
from torch_fl_packaging.recipe import available_platforms, load_recipe

NON_CUDA = [p for p in available_platforms(BUNDLERS) if load_recipe(p, BUNDLERS).kind != "cuda-assets"]


def _unpack(wheel: Path, dest: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest)
    return json.loads((dest / "torch_fl" / "compatibility.json").read_text())


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("platform", NON_CUDA)
def test_recipe_builds_its_wheel_layout(platform: str, platform_inputs, tmp_path: Path) -> None:
    inputs = platform_inputs(platform)
    out = tmp_path / "out"
    res = run_build([*inputs.args, "--out", str(out), "--json"])
    assert res.rc == 0, res.stderr
    summary = res.json
    assert summary["version"] == 1 and summary["ok"] is True
    wheels = list(out.glob("*.whl"))
    assert [w.name for w in wheels] == [summary["wheel"]["filename"]]
    assert hashlib.sha256(wheels[0].read_bytes()).hexdigest() == summary["wheel"]["sha256"]

    tree = tmp_path / "tree"
    manifest = _unpack(wheels[0], tree)
    recipe = inputs.recipe
    assert manifest["platform"] == platform
    assert manifest["bundle"] == {"kind": recipe.kind, "directory": recipe.bundle.directory}
    # Every ELF file is recorded with its real hash, and nothing else is.
    elves = {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"}
    assert {r["path"] for r in manifest["elf"]} == elves
    for rec in manifest["elf"]:
        data = (tree / rec["path"]).read_bytes()
        assert rec["sha256"] == hashlib.sha256(data).hexdigest() and rec["size"] == len(data)

    plugin = next(r for r in manifest["elf"] if r["path"].startswith("torch_fl/_C"))
    info = read_elf(tree / plugin["path"])
    plugin_rpath = list(info.rpath or info.runpath)
    assert plugin_rpath[: len(recipe.bundle.plugin_rpath)] == list(recipe.bundle.plugin_rpath)
    assert "$ORIGIN/../torch/lib" in plugin_rpath

    bundled = [r for r in manifest["elf"] if r["origin"] == "bundled"]
    if recipe.kind == "forked-libtorch":
        names = {Path(r["path"]).name for r in bundled}
        assert set(recipe.bundle.libraries) <= names
        for rec in bundled:
            assert rec["path"].startswith(recipe.bundle.directory + "/")
            info = read_elf(tree / rec["path"])
            # DT_RUNPATH where the vendor's file already had exactly these entries (left untouched).
            assert (info.rpath or info.runpath) == recipe.bundle.rpath
            assert rec["source"]
        assert manifest["torch"]["requirement"].startswith("torch==")
        assert manifest["vendor_torch"]["version"] == manifest["torch"]["version"]
    else:
        assert bundled == []
    if recipe.kind == "native-sdk":
        assert manifest["bundle"]["directory"] is None
        assert manifest["runtime"]["directories"] == [
            {"path": rd.path, "env": rd.env, "libraries": list(rd.libraries)} for rd in recipe.runtime]
        assert ">=" in manifest["torch"]["requirement"]
    if recipe.sdk and recipe.sdk.version_file:
        assert manifest["sdk"]["version"]  # read from the synthetic SDK's version file
        assert manifest["sdk"]["version"] in manifest["wheel"]["version"] or \
            manifest["sdk"]["version"].replace(".", "") in manifest["wheel"]["version"]


_LOAD = r"""
import ctypes, json, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
maps = open("/proc/self/maps").read()
print(json.dumps(sorted({l.split()[-1] for l in maps.splitlines() if l.endswith(".so") or ".so." in l})))
"""


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("platform", ["metax", "host-forked"])
def test_forked_plugin_maps_the_bundled_core_libraries(platform: str, platform_inputs, tmp_path: Path,
                                                        torch_lib: Path) -> None:
    """Loaded in a fresh process, the plugin maps the fork's libc10, not the installed one."""
    inputs = platform_inputs(platform)
    out = tmp_path / "out"
    res = run_build([*inputs.args, "--out", str(out)])
    assert res.rc == 0, res.stderr
    tree = tmp_path / "tree"
    manifest = _unpack(next(out.glob("*.whl")), tree)
    plugin = tree / next(r["path"] for r in manifest["elf"] if r["path"].startswith("torch_fl/_C"))
    env = dict(os.environ)
    if inputs.sdk_root is not None:
        # The target's vendor runtime: the synthetic SDK stands at its prefix.
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            str(inputs.sdk_root / rd.path[len(inputs.recipe.sdk.prefix):].lstrip("/")) for rd in inputs.recipe.runtime)
    proc = subprocess.run([sys.executable, "-c", _LOAD, str(plugin)], capture_output=True, text=True, env=env,
                          check=True)
    mapped = json.loads(proc.stdout)
    fork_dir = str((tree / inputs.recipe.bundle.directory).resolve())
    assert any(m.startswith(fork_dir) and m.endswith("/libc10.so") for m in mapped), mapped
    assert str(torch_lib.resolve() / "libc10.so") not in mapped


@pytest.mark.compile
def test_kind_none_bundles_nothing(tmp_path: Path, torch_lib: Path) -> None:
    """No shipped recipe uses `none` (a build against a vendor torch that has the kernels); a temporary one does."""
    import shutil

    from packaging_support import REPO, torch_base
    from synthetic import make_plugin_wheel

    source = tmp_path / "src"
    (source / "bundlers").mkdir(parents=True)
    shutil.copytree(REPO / "manifests", source / "manifests")
    (source / "pyproject.toml").write_text("")
    (source / "bundlers" / "vendor-native.toml").write_text(
        'platform = "vendor-native"\nkind = "none"\nsummary = "a vendor torch with its own kernels"\n'
        '[device]\nruntime = "cuda"\nkernel_device = "cuda"\ndistributed = "nccl"\ncompile = "triton"\nfp8 = "native"\n'
        '[wheel]\nlocal_version = "native"\npython = "3.11"\nindex_lane = "x"\n[ci]\nrunner = "r"\n')
    recipe = load_recipe("vendor-native", source / "bundlers")
    base = torch_base()
    major, minor = base.split(".")[:2]
    wheel = make_plugin_wheel(tmp_path, recipe, version=f"{base}+native",
                              requires=[f"torch>={major}.{minor},<{major}.{int(minor) + 1}"], torch_lib=torch_lib)
    out = tmp_path / "out"
    res = run_build(["--platform", "vendor-native", "--source", str(source), "--from-wheel", str(wheel), "--sdk-version", "1.0",
                     "--out", str(out), "--json"])
    assert res.rc == 0, res.stderr
    manifest = _unpack(out / res.json["wheel"]["filename"], tmp_path / "tree")
    assert manifest["bundle"] == {"kind": "none", "directory": None}
    assert {r["origin"] for r in manifest["elf"]} == {"built"} and res.json["bundled"] == []
