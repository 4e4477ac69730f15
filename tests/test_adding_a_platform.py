"""docs/adding-a-platform.md, walked: its recipe loads, a made-up platform on the host runtime enters the
release matrix and one without an adapter stays recipe only, and the keys and functions it lists are the
ones the code has, so the guide cannot go stale."""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import re
import shutil
from pathlib import Path
from types import ModuleType

import pytest
from support.paths import REPO
from torch_fl_packaging import cmake_config
from torch_fl_packaging.recipe import DeviceSpec, load_recipe_file

GUIDE = REPO / "docs" / "adding-a-platform.md"


def _guide() -> str:
    return GUIDE.read_text(encoding="utf-8")


def _guide_recipe() -> str:
    blocks = re.findall(r"```toml\n(.*?)```", _guide(), re.S)
    assert len(blocks) == 1, "the guide shows one recipe"
    return blocks[0]


def _table_keys(heading: str) -> list[str]:
    """The first column of the Markdown table under ``heading``."""
    text = _guide()
    section = text[text.index(heading):]
    rows = re.findall(r"^\| `([a-z0-9_]+)` \|", section.split("\n#", 1)[0], re.M)
    assert rows, heading
    return rows


def _generator() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("generate_matrix", str(REPO / "ci" / "generate-matrix"))
    spec = importlib.util.spec_from_loader("generate_matrix", loader)
    assert spec
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A source tree with the real recipes, the adapter folders (their presence is what counts) and the
    guide's made-up platform."""
    root = tmp_path / "src"
    shutil.copytree(REPO / "bundlers", root / "bundlers")
    for adapter in (REPO / "csrc" / "runtime").iterdir():
        if adapter.is_dir():
            (root / "csrc" / "runtime" / adapter.name).mkdir(parents=True)
    (root / "bundlers" / "acme.toml").write_text(_guide_recipe())
    return root


def test_the_guides_recipe_loads_and_is_recipe_only_without_its_adapter(tree: Path) -> None:
    recipe = load_recipe_file(tree / "bundlers" / "acme.toml")
    assert recipe.platform == "acme" and recipe.device.runtime == "acme"
    assert recipe.recipe_only(tree)
    generator = _generator()
    assert "acme" in generator.recipe_only(tree / "bundlers", tree)
    assert "acme" not in {row["platform"] for row in generator.rows(tree / "bundlers", tree)}


def test_a_made_up_platform_on_the_host_runtime_is_released(tree: Path) -> None:
    path = tree / "bundlers" / "acme.toml"
    path.write_text(_guide_recipe().replace('runtime = "acme"', 'runtime = "host"')
                    .replace('kernel_device = "none"', 'kernel_device = "cpu"')
                    .replace('distributed = "none"', 'distributed = "gloo"').replace('compile = "none"', 'compile = "cpp"'))
    recipe = load_recipe_file(path)
    assert not recipe.recipe_only(tree)
    rows = {row["platform"]: row for row in _generator().rows(tree / "bundlers", tree)}
    assert rows["acme"]["runtime"] == "host" and rows["acme"]["runs_on"] == ["self-hosted", "linux", "acme-npu"]
    values = cmake_config.cmake_values(recipe)
    assert values["FLAGOS_RUNTIME"] == "host" and values["FLAGOS_DISTRIBUTED"] == "gloo"
    assert values["FLAGOS_PLUGIN_RPATH"] == "/opt/acme/lib;$ORIGIN/../torch/lib"
    # The adapter appears: the same recipe with its own runtime family is released too.
    path.write_text(_guide_recipe())
    (tree / "csrc" / "runtime" / "acme").mkdir()
    assert "acme" in {row["platform"] for row in _generator().rows(tree / "bundlers", tree)}


def test_the_guides_device_keys_are_the_platform_tables() -> None:
    assert _table_keys("### The platform table") == [f.name for f in dataclasses.fields(DeviceSpec)]


def test_the_guides_functions_are_the_runtime_interface() -> None:
    header = (REPO / "csrc" / "runtime" / "DeviceRuntime.h").read_text()
    body = header[header.index("namespace torch_fl::runtime {"):]
    declared = re.findall(r"^[A-Za-z][\w:<>,\s*]*?\b(\w+)\([^;]*\)\s*(?:noexcept)?;", body, re.M)
    assert len(declared) > 20
    assert _table_keys("## 1. The runtime adapter") == declared
