"""The release matrix is generated from bundlers/*.toml, and the committed workflow agrees with it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import tomllib
from support.paths import REPO

GENERATE = REPO / "ci" / "generate-matrix"


def generate(*args: str, repo: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(repo / "ci" / "generate-matrix"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def recipes() -> dict[str, dict[str, Any]]:
    """The recipes read as plain TOML, independently of the loader the generator uses."""
    return {p.stem: tomllib.loads(p.read_text()) for p in sorted((REPO / "bundlers").glob("*.toml"))}


def test_committed_workflow_agrees_with_recipes() -> None:
    done = generate("--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_matrix_rows_are_the_recipes_facts() -> None:
    done = generate("--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["version"] == 1
    rows = {row["platform"]: row for row in document["include"]}
    # Released: not a stand-in, and its runtime family has an adapter in this tree (else "recipe only").
    built = {name: r for name, r in recipes().items() if not r.get("stand_in", False)}
    released = {name: r for name, r in built.items() if (REPO / "csrc" / "runtime" / r["device"]["runtime"]).is_dir()}
    assert set(rows) == set(released), "one job per released platform, none for stand-ins or recipe-only platforms"
    assert sorted(document["recipe_only"]) == sorted(set(built) - set(released))
    assert released and set(document["recipe_only"]), "both kinds of platform exist in this tree"
    for name, recipe in released.items():
        row = rows[name]
        assert row["kind"] == recipe["kind"]
        assert row["runtime"] == recipe["device"]["runtime"]
        assert row["python"] == recipe["wheel"]["python"]
        assert row["lane"] == recipe["wheel"]["index_lane"]
        assert row["runner"] == recipe["ci"]["runner"]
        assert row["image"] == recipe["ci"].get("image", "")
        if row["hosted"]:
            assert row["runs_on"] == recipe["ci"]["runner"]
        else:
            assert row["runs_on"] == ["self-hosted", "linux", recipe["ci"]["runner"]]
    workflow = (REPO / ".github" / "workflows" / "release.yml").read_text()
    for name in released:
        assert f'- platform: "{name}"' in workflow
    for name in document["recipe_only"]:
        assert f'- platform: "{name}"' not in workflow, f"{name} is recipe only: a release job for it cannot build"


def _copy_runtime_adapters(copy: Path) -> None:
    """The adapter folders (their presence is what the generator reads), without their sources."""
    for adapter in (REPO / "csrc" / "runtime").iterdir():
        if adapter.is_dir():
            (copy / "csrc" / "runtime" / adapter.name).mkdir(parents=True)


def test_a_new_adapter_puts_its_platforms_in_the_matrix(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    for part in ("bundlers", "packaging/src", "preflight/src", ".github", "manifests"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _copy_runtime_adapters(copy)
    (copy / "ci").mkdir()
    shutil.copy2(GENERATE, copy / "ci" / "generate-matrix")
    assert "metax" in generate("--recipe-only", repo=copy).stdout.split()
    (copy / "csrc" / "runtime" / "maca").mkdir()  # metax's runtime family gets its adapter
    stale = generate("--check", repo=copy)
    assert stale.returncode == 1 and '+          - platform: "metax"' in stale.stdout
    assert "metax" not in generate("--recipe-only", repo=copy).stdout.split()


def test_a_changed_recipe_makes_the_check_fail(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    for part in ("bundlers", "packaging/src", "preflight/src", ".github", "manifests"):
        if (REPO / part).exists():
            shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _copy_runtime_adapters(copy)
    (copy / "ci").mkdir()
    shutil.copy2(GENERATE, copy / "ci" / "generate-matrix")
    recipe = copy / "bundlers" / "ppu.toml"
    recipe.write_text(recipe.read_text().replace('runner = "thead-ppu"', 'runner = "thead-ppu2"'))

    stale = generate("--check", repo=copy)
    assert stale.returncode == 1
    assert '+            runner: "thead-ppu2"' in stale.stdout
    assert "+    - thead-ppu2" in stale.stdout  # actionlint's runner labels follow the recipes too
    assert "run ci/generate-matrix" in stale.stderr

    assert generate(repo=copy).returncode == 0
    assert generate("--check", repo=copy).returncode == 0


def test_missing_markers_is_one_line_exit_2(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "bundlers", copy / "bundlers")
    for part in ("packaging/src", "preflight/src"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (copy / "ci").mkdir()
    shutil.copy2(GENERATE, copy / "ci" / "generate-matrix")
    (copy / ".github" / "workflows").mkdir(parents=True)
    (copy / ".github" / "workflows" / "release.yml").write_text("name: release\n")
    done = generate("--check", repo=copy)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no generated block" in done.stderr and "Traceback" not in done.stderr
