"""ci/cibuildwheel.toml, as far as a machine without a container engine can check it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from support.paths import REPO

CONFIG = REPO / "ci" / "cibuildwheel.toml"
pytest.importorskip("cibuildwheel", reason="cibuildwheel is not installed (ci/requirements-test.txt lists it)")


def identifiers(platform: str, *options: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [str(REPO / "ci" / "cibuildwheel.sh"), platform, *options, "--print-build-identifiers"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("platform", "expected"), [("host", "cp311-manylinux_x86_64"), ("ppu", "cp310-manylinux_x86_64")]
)
def test_build_identifier_is_the_recipes_python(platform: str, expected: str) -> None:
    if shutil.which("python3") is None:
        pytest.skip("ci/cibuildwheel.sh needs python3 on PATH")
    done = identifiers(platform)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [expected]


def test_every_python_is_the_configurations_list() -> None:
    if shutil.which("python3") is None:
        pytest.skip("ci/cibuildwheel.sh needs python3 on PATH")
    configured = tomllib.loads(CONFIG.read_text())["tool"]["cibuildwheel"]["build"].split()
    done = identifiers("host", "--every-python")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == configured
    assert len(configured) > 1 and "cp311-manylinux_x86_64" in configured


def test_a_workflow_builds_with_it() -> None:
    release = (REPO / ".github" / "workflows" / "release.yml").read_text()
    assert "ci/cibuildwheel.sh host --every-python" in release


def test_stand_in_is_never_built_for_release() -> None:
    done = identifiers("host-forked")
    assert done.returncode != 0 and "stand-in" in done.stderr


def test_options_resolve_to_this_projects_stages() -> None:
    options_module = pytest.importorskip("cibuildwheel.options")
    args = options_module.CommandLineArguments.defaults()
    args.config_file = str(CONFIG)
    args.package_dir = REPO
    env = {"CIBW_BUILD": "cp311-manylinux_x86_64", "FLAGOS_PLATFORM": "host", "TORCH_VERSION": "2.13.0"}
    options = options_module.compute_options("linux", args, env)
    build = options.build_options("cp311-manylinux_x86_64")
    assert build.repair_command.startswith("torch-fl-build --platform $FLAGOS_PLATFORM --from-wheel {wheel}")
    assert "auditwheel" not in build.repair_command
    assert build.build_frontend.args == ["--no-isolation"]
    assert "torch==$TORCH_VERSION" in build.before_build
    # The test environment gets stock torch+cpu and preflight before the wheel (test-command needs both).
    assert "torch==$TORCH_VERSION" in build.before_test and "{project}/preflight" in build.before_test
    environment = build.environment.as_dictionary(prev_environment=env)
    assert environment["FLAGOS_PLATFORM"] == "host" and environment["TORCH_INDEX_URL"].startswith("https://")


def test_repair_command_runs_this_projects_pipeline(tmp_path: Path) -> None:
    """The rendered repair command, run on its own: torch-fl-build parses it and refuses a missing wheel cleanly."""
    scripts = Path(sys.executable).parent
    if not (scripts / "torch-fl-build").exists() and shutil.which("torch-fl-build") is None:
        pytest.skip("torch-fl-build is not installed (ci/test installs ./packaging)")
    options_module = pytest.importorskip("cibuildwheel.options")
    args = options_module.CommandLineArguments.defaults()
    args.config_file = str(CONFIG)
    args.package_dir = REPO
    options = options_module.compute_options("linux", args, {"CIBW_BUILD": "cp311-manylinux_x86_64"})
    template = options.build_options("cp311-manylinux_x86_64").repair_command
    missing, out = tmp_path / "torch_fl-2.13.0+host-cp311-cp311-linux_x86_64.whl", tmp_path / "repaired"
    command = template.replace("{wheel}", str(missing)).replace("{dest_dir}", str(out))
    env = dict(os.environ, FLAGOS_PLATFORM="host", PATH=f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert missing.name in done.stderr and "Traceback" not in done.stderr
    assert not out.exists() or not any(out.iterdir())
