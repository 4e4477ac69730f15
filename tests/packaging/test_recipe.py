"""Recipes: all load, are validated on load, and unknown keys say "did you mean"."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from packaging_support import BUNDLERS
from torch_fl_packaging.errors import RecipeError
from torch_fl_packaging.recipe import BUNDLE_KINDS, Recipe, available_platforms, load_recipe, load_recipe_file

EXPECTED = {"host", "host-forked", "cuda", "metax", "dcu", "ppu", "ascend", "gcu", "musa", "tsingmicro",
            "kunlunxin", "bpu"}


def test_every_platform_has_a_recipe_and_each_loads() -> None:
    assert set(available_platforms(BUNDLERS)) == EXPECTED
    kinds = {load_recipe(p, BUNDLERS).kind for p in EXPECTED}
    assert kinds == set(BUNDLE_KINDS) - {"none"}


def test_expected_kinds() -> None:
    kind = {p: load_recipe(p, BUNDLERS).kind for p in EXPECTED}
    assert kind["host"] == "in-wheel-runtime" and kind["cuda"] == "cuda-assets"
    assert {p for p, k in kind.items() if k == "forked-libtorch"} == {"metax", "dcu", "ppu", "host-forked"}
    assert {p for p, k in kind.items() if k == "native-sdk"} == {"ascend", "gcu", "musa", "tsingmicro", "kunlunxin", "bpu"}


def test_stand_in_is_named_as_such() -> None:
    r = load_recipe("host-forked", BUNDLERS)
    assert r.stand_in and "STAND-IN" in r.summary
    assert "STAND-IN" in (BUNDLERS / "host-forked.toml").read_text()
    assert not any(load_recipe(p, BUNDLERS).stand_in for p in EXPECTED - {"host-forked"})


def test_every_field_is_documented() -> None:
    def walk(cls: type) -> None:
        for f in dataclasses.fields(cls):
            assert f.metadata.get("doc"), f"{cls.__name__}.{f.name} has no doc"
    from torch_fl_packaging import recipe as m
    for cls in (m.Recipe, m.DeviceSpec, m.WheelSpec, m.CiSpec, m.SdkSpec, m.BundleSpec, m.RuntimeDirectory, m.RepairSpec,
                m.VendorTorchSpec):
        walk(cls)


def test_prefix_placeholder_expands() -> None:
    r = load_recipe("metax", BUNDLERS)
    assert r.runtime[0].path == "/opt/maca/lib" and "/opt/maca/lib" in r.bundle.rpath
    assert r.exact_torch and not load_recipe("ascend", BUNDLERS).exact_torch


def test_unknown_platform_suggests_the_closest() -> None:
    with pytest.raises(RecipeError) as exc:
        load_recipe("metx", BUNDLERS)
    assert "did you mean 'metax'" in exc.value.line() and exc.value.exit_code == 2


def _write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / f"{name}.toml"
    p.write_text(text)
    return p


BASE = '''platform = "x"
kind = "none"
summary = "s"
[device]
runtime = "host"
kernel_device = "cpu"
distributed = "gloo"
compile = "cpp"
fp8 = "emulated"
[wheel]
local_version = "x"
python = "3.11"
index_lane = "x"
[ci]
runner = "r"
'''


def test_minimal_recipe(tmp_path: Path) -> None:
    r = load_recipe_file(_write(tmp_path, "x", BASE))
    assert isinstance(r, Recipe) and r.kind == "none" and not r.bundles_libraries


@pytest.mark.parametrize(("text", "needle"), [
    (BASE.replace("summary", "sumary"), "did you mean 'summary'"),
    (BASE + "[bundle]\nlibrarys = []\n", "did you mean 'libraries'"),
    (BASE.replace('kind = "none"', 'kind = "forked"'), "did you mean 'forked-libtorch'"),
    (BASE.replace('python = "3.11"', 'python = 3.11'), "wheel.python must be a string"),
    (BASE.replace('platform = "x"', 'platform = "y"'), "platform differs from the file name"),
    (BASE.replace('local_version = "x"', 'local_version = "X+Y"'), "not a valid local version"),
    (BASE + "[bundle]\nlibraries = [\"liba.so\"]\n", "bundles nothing"),
    (BASE.replace('kind = "none"', 'kind = "native-sdk"'), "needs an SDK prefix"),
    (BASE + "[bundle]\nplugin_rpath = [\"/usr/lib\"]\n", "outside the platform's prefixes"),
    (BASE + "[bundle]\nplugin_rpath = [\"lib\"]\n", "must start with $ORIGIN"),
    (BASE + "[sdk]\nname = \"s\"\nversion_pattern = \"no group\"\n", "exactly one group"),
    ("platform = \n", "not valid TOML"),
    (BASE.replace('[ci]\nrunner = "r"\n', ""), "missing 'ci'"),
    (BASE.replace('fp8 = "emulated"\n', ""), "missing 'fp8'"),
    (BASE.replace('fp8 = "emulated"', 'fp8 = "emulate"'), "did you mean 'emulated'"),
    (BASE.replace('compile = "cpp"', 'compile = "trition"'), "did you mean 'triton'"),
    (BASE.replace('distributed = "gloo"', 'distributed = "ncl"'), "did you mean 'nccl'"),
    (BASE.replace('runtime = "host"', 'runtime = "Host"'), "device.runtime is not a lowercase name"),
    (BASE.replace('kernel_device = "cpu"', 'kernel_devise = "cpu"'), "did you mean 'kernel_device'"),
    (BASE.replace('fp8 = "emulated"', 'fp8 = "emulated"\ncuda_toolkit = "/opt/x"'), "CUDA toolkit of the cuda runtime"),
])
def test_invalid_recipes_are_rejected(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(RecipeError) as exc:
        load_recipe_file(_write(tmp_path, "x", text))
    assert needle in exc.value.line()


def test_build_metadata_reads_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_fl_packaging import build_metadata

    monkeypatch.delenv("FLAGOS_WHEEL_LOCAL_VERSION", raising=False)
    monkeypatch.delenv("FLAGOS_WHEEL_REQUIREMENTS", raising=False)
    monkeypatch.setattr(build_metadata, "_REPO_ROOT", BUNDLERS.parent)
    monkeypatch.setenv("FLAGOS_PLATFORM", "host")
    assert build_metadata.dynamic_metadata("version").endswith("+host")
    assert build_metadata.dynamic_metadata("dependencies")[0].startswith("torch>=")
    monkeypatch.setenv("FLAGOS_PLATFORM", "host-forked")
    assert build_metadata.dynamic_metadata("dependencies")[0].startswith("torch==")
    monkeypatch.setenv("FLAGOS_PLATFORM", "metax")
    with pytest.raises(RuntimeError, match="needs its SDK version"):
        build_metadata.dynamic_metadata("version")
    monkeypatch.setenv("FLAGOS_WHEEL_LOCAL_VERSION", "maca3.8.1")
    monkeypatch.setenv("FLAGOS_WHEEL_REQUIREMENTS", '["torch==2.13.0"]')
    assert build_metadata.dynamic_metadata("version").endswith("+maca3.8.1")
    assert build_metadata.dynamic_metadata("dependencies") == ["torch==2.13.0"]


def test_readme_recipe_reference_is_current() -> None:
    """packaging/README.md's key table is generated from the dataclass docs; the committed copy must match."""
    from torch_fl_packaging.recipe import reference_markdown

    text = (BUNDLERS.parent / "packaging" / "README.md").read_text()
    begin = text.index("-->", text.index("<!-- BEGIN generated")) + 4
    end = text.index("<!-- END generated")
    assert text[begin:end].strip() == reference_markdown().strip(), \
        "regenerate: python -c 'from torch_fl_packaging.recipe import reference_markdown as r; print(r())'"
