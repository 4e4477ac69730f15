"""The platform table: each recipe's [device] entry reaches CMake (torch_fl_packaging.cmake_config) and
torch_fl (the build config template), CMake keeps no list or RPATH of its own, and the docs' table is the
recipes'."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging_support import BUNDLERS
from torch_fl_packaging import cmake_config
from support.paths import REPO
from torch_fl_packaging.recipe import available_platforms, load_recipe

PLATFORMS = available_platforms(BUNDLERS)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_cmake_reads_the_recipe(platform: str, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = load_recipe(platform, BUNDLERS)
    if recipe.sdk and recipe.sdk.env:
        monkeypatch.delenv(recipe.sdk.env, raising=False)
    values = cmake_config.cmake_values(recipe)
    d = recipe.device
    assert (values["FLAGOS_RUNTIME"], values["FLAGOS_KERNEL_DEVICE"], values["FLAGOS_DISTRIBUTED"],
            values["FLAGOS_COMPILE"], values["FLAGOS_FP8"]) == (d.runtime, d.kernel_device, d.distributed, d.compile,
                                                                d.fp8)
    assert values["FLAGOS_PLUGIN_RPATH"].split(";") == list(recipe.bundle.plugin_rpath)
    assert values["FLAGOS_CUDA_TOOLKIT_ROOT"] == (d.cuda_toolkit or "")
    text = cmake_config.render(recipe)
    assert all(f'set({name} "' in text for name in values)


def test_the_cuda_toolkit_follows_the_sdk_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    recipe = load_recipe("ppu", BUNDLERS)
    assert recipe.builds_cuda_runtime and recipe.device.cuda_toolkit == "/usr/local/PPU_SDK/CUDA_SDK"
    monkeypatch.setenv("PPU_SDK", str(tmp_path / "sdk"))
    assert cmake_config.cmake_values(recipe)["FLAGOS_CUDA_TOOLKIT_ROOT"] == str(tmp_path / "sdk" / "CUDA_SDK")


def test_the_command_writes_the_file_and_refuses_an_unknown_platform(tmp_path: Path) -> None:
    out = tmp_path / "flagos_platform.cmake"
    env_path = f"{REPO / 'packaging' / 'src'}:{REPO / 'preflight' / 'src'}"
    run = [sys.executable, "-m", "torch_fl_packaging.cmake_config", "--source", str(REPO), "--out", str(out)]
    done = subprocess.run([*run, "--platform", "host"], capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": env_path})
    assert done.returncode == 0, done.stderr
    assert 'set(FLAGOS_PLUGIN_RPATH "$ORIGIN/lib;$ORIGIN/../torch/lib")' in out.read_text()
    done = subprocess.run([*run, "--platform", "hots"], capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": env_path})
    assert done.returncode == 2 and "did you mean 'host'" in done.stderr and "\n" not in done.stderr.strip()


def test_cmake_keeps_no_list_or_rpath_of_its_own() -> None:
    text = (REPO / "CMakeLists.txt").read_text()
    assert "FLAGOS_RUNTIMES" not in text
    assert "$ORIGIN" not in text, "the plugin's RPATH comes from the recipe (bundle.plugin_rpath) alone"
    assert 'INSTALL_RPATH "${FLAGOS_PLUGIN_RPATH}"' in text
    assert "torch_fl_packaging.cmake_config" in text


def test_the_build_config_carries_the_table() -> None:
    template = (REPO / "torch_fl" / "_build_config.py.in").read_text()
    for name in ("FLAGOS_RUNTIME", "FLAGOS_KERNEL_DEVICE", "FLAGOS_DISTRIBUTED", "FLAGOS_COMPILE", "FLAGOS_FP8"):
        assert f"@{name}@" in template


def test_the_docs_table_is_the_recipes() -> None:
    text = (REPO / "docs" / "building-wheels.md").read_text()
    section = text[text.index("## Platforms and their runtimes"):]
    rows = {m.group(1): [c.strip().strip("`") for c in m.group(2).split("|")]
            for m in re.finditer(r"^\| `([a-z0-9-]+)` \|(.*)\|$", section, re.M)}
    assert set(rows) == set(PLATFORMS)
    for platform, cells in rows.items():
        recipe = load_recipe(platform, BUNDLERS)
        d = recipe.device
        assert cells[:5] == [d.runtime, d.kernel_device, d.distributed, d.compile, d.fp8], platform
        status = cells[5]
        if recipe.stand_in:
            assert status.startswith("stand-in"), platform
        elif recipe.recipe_only(REPO):
            assert status == "recipe only", platform
        else:
            assert status.startswith("released"), platform
