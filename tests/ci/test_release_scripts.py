"""The release workflow's step scripts, run as the workflow runs them (no build: a fixture wheel)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.paths import REPO
from support.publish import PyPIServer, make_wheel, publish_env


def release_venv(tmp_path: Path) -> Path:
    """A stand-in for .venv-release whose torch-fl-publish is the one under test."""
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    tool = bindir / "torch-fl-publish"
    tool.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m torch_fl_publish "$@"\n')
    tool.chmod(0o755)
    return tmp_path / "venv"


def run_step(script: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "ci" / script), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_publish_step_writes_the_json_and_publishes(pypi: PyPIServer, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    wheel = make_wheel(dist, version="2.13.0+host")
    env = publish_env(
        pypi, RELEASE_VENV=str(release_venv(tmp_path)), RELEASE_DIST=str(dist), TORCH_FL_INDEX_URL=pypi.url
    )
    env.pop("RELEASE_TAG", None)
    done = run_step("release-publish.sh", ["host"], env)
    assert done.returncode == 0, done.stderr
    document = json.loads((dist / "publish.json").read_text())
    assert document["version"] == 1 and document["lane"] == "host" and document["ok"]
    assert [p.name for p in pypi.packages.iterdir()] == [wheel.name]


def test_publish_step_without_index_url_names_the_setting(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    make_wheel(dist)
    env = publish_env(None, RELEASE_VENV=str(release_venv(tmp_path)), RELEASE_DIST=str(dist))
    env.pop("TORCH_FL_INDEX_URL", None)
    done = run_step("release-publish.sh", ["host"], env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "TORCH_FL_INDEX_URL is not set — set it in the release-host environment (the upload URL; {lane} is replaced)"
    ]


def test_steps_need_exactly_one_wheel(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    env = publish_env(None, RELEASE_VENV=str(release_venv(tmp_path)), RELEASE_DIST=str(dist), TORCH_FL_INDEX_URL="http://127.0.0.1:9/")
    for script in ("release-publish.sh", "release-preflight.sh"):
        done = run_step(script, ["host"] if script == "release-publish.sh" else [], env)
        assert done.returncode == 2 and "run ci/release-build.sh first" in done.stderr


def test_build_step_outside_a_tag_asks_for_the_torch_version(tmp_path: Path) -> None:
    env = publish_env(None, RELEASE_VENV=str(tmp_path / "venv"), RELEASE_DIST=str(tmp_path / "dist"))
    for name in ("RELEASE_TAG", "TORCH_VERSION"):
        env.pop(name, None)
    done = run_step("release-build.sh", ["host", "3.11"], env)
    assert done.returncode == 2
    assert "set TORCH_VERSION=X.Y.Z" in done.stderr
    assert not (tmp_path / "dist").exists(), "nothing is touched before the inputs are known"
