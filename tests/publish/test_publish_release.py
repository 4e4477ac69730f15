"""Release mode (--tag): version and preflight gate, before anything is uploaded."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from support.paths import REPO
from support.publish import PyPIServer, make_wheel, publish_env, run_publish

FAKE_PREFLIGHT = """\
#!{python}
# Stands in for torch-fl-preflight's command-line contract: --release --wheel W --json,
# exit 0 when the wheel passes, 1 with the failed checks in the JSON otherwise.
import json, sys
wheel = sys.argv[sys.argv.index("--wheel") + 1]
bad = "bad" in wheel
print(json.dumps({{"version": 1, "checks": [{{"id": "manifest.sdk_version", "status": "fail" if bad else "pass"}}]}}))
sys.exit(1 if bad else 0)
"""


def path_with_fake_preflight(tmp_path: Path) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "torch-fl-preflight"
    script.write_text(FAKE_PREFLIGHT.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"


def path_without_preflight() -> str:
    """PATH (with this interpreter's scripts) minus every directory holding a torch-fl-preflight."""
    dirs = [str(Path(sys.executable).parent), *os.environ.get("PATH", "").split(os.pathsep)]
    return os.pathsep.join(d for d in dirs if d and not (Path(d) / "torch-fl-preflight").exists())


def test_release_uploads_when_version_and_preflight_pass(pypi: PyPIServer, tmp_path: Path) -> None:
    wheels = [make_wheel(tmp_path / "d", version="2.13.0+host"), make_wheel(tmp_path / "d", version="2.13.0+cuda13.0")]
    env = publish_env(pypi, PATH=path_with_fake_preflight(tmp_path))
    done = run_publish(
        ["--lane", "host", "--repository-url", pypi.url, "--tag", "v2.13.0", "--json", *map(str, wheels)], env
    )
    assert done.returncode == 0, done.stderr
    assert done.json["tag"] == "v2.13.0"
    assert sorted(p.name for p in pypi.packages.iterdir()) == sorted(w.name for w in wheels)


def test_release_refuses_other_version_and_uploads_nothing(pypi: PyPIServer, tmp_path: Path) -> None:
    good = make_wheel(tmp_path / "d", version="2.13.0+host")
    other = make_wheel(tmp_path / "d", version="2.12.1+host")
    env = publish_env(pypi, PATH=path_with_fake_preflight(tmp_path))
    done = run_publish(
        ["--lane", "host", "--repository-url", pypi.url, "--tag", "v2.13.0", "--json", str(good), str(other)], env
    )
    assert done.returncode == 1
    files = {f["filename"]: f for f in done.json["files"]}
    assert files[other.name]["status"] == "refused" and "differs from tag v2.13.0" in files[other.name]["detail"]
    assert files[good.name]["status"] == "refused" and "another wheel" in files[good.name]["detail"]
    assert sorted(done.json["not_published"]) == sorted([good.name, other.name])
    assert list(pypi.packages.iterdir()) == []


def test_release_refuses_a_wheel_that_fails_preflight(pypi: PyPIServer, tmp_path: Path) -> None:
    bad = make_wheel(tmp_path / "bad", version="2.13.0+host")
    env = publish_env(pypi, PATH=path_with_fake_preflight(tmp_path))
    done = run_publish(["--lane", "host", "--repository-url", pypi.url, "--tag", "v2.13.0", "--json", str(bad)], env)
    assert done.returncode == 1
    (entry,) = done.json["files"]
    assert entry["status"] == "refused" and entry["detail"] == "preflight --release failed: manifest.sdk_version"
    assert list(pypi.packages.iterdir()) == []


def test_release_without_preflight_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "d")
    env = publish_env(None)
    env["PATH"] = path_without_preflight()
    done = run_publish(
        ["--lane", "host", "--repository-url", "http://127.0.0.1:9/", "--tag", "v2.13.0", str(wheel)], env
    )
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert "torch-fl-preflight" in line and "pip install" in line
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize("tag", ["2.13.0", "v2.13.0+host", "vnext", "release-1"])
def test_bad_tag_is_exit_2(tmp_path: Path, tag: str) -> None:
    wheel = make_wheel(tmp_path / "d")
    env = publish_env(None, PATH=path_with_fake_preflight(tmp_path))
    done = run_publish(["--lane", "host", "--repository-url", "http://127.0.0.1:9/", "--tag", tag, str(wheel)], env)
    assert done.returncode == 2
    assert f"not a release tag ({tag})" in done.stderr and "Traceback" not in done.stderr


REAL_PREFLIGHT = shutil.which("torch-fl-preflight") or (
    str(Path(sys.executable).parent / "torch-fl-preflight")
    if (Path(sys.executable).parent / "torch-fl-preflight").exists()
    else None
)


@pytest.mark.skipif(REAL_PREFLIGHT is None, reason="torch-fl-preflight is not installed here")
def test_real_preflight_refuses_a_wheel_without_manifest(pypi: PyPIServer, tmp_path: Path) -> None:
    # The fixture wheel has no torch_fl/compatibility.json: a release must not accept it.
    wheel = make_wheel(tmp_path / "d", version="2.13.0+host")
    done = run_publish(
        ["--lane", "host", "--repository-url", pypi.url, "--tag", "v2.13.0", "--json", str(wheel)], publish_env(pypi)
    )
    assert done.returncode == 1, done.stderr
    (entry,) = done.json["files"]
    assert entry["status"] == "refused" and entry["detail"].startswith("preflight --release")
    assert "compatibility.json" in entry["detail"]
    assert list(pypi.packages.iterdir()) == []


@pytest.mark.parametrize(
    ("platform", "lane", "refusal"),
    [
        ("host", "host", None),
        ("cuda", "host", "platform cuda publishes to lane cuda, not host"),
        ("host-forked", "stand-in", "platform host-forked is a stand-in, never released"),
        ("nosuch", "host", "platform nosuch has no recipe in"),
    ],
)
def test_release_wheel_must_belong_to_the_lane(
    pypi: PyPIServer, tmp_path: Path, platform: str, lane: str, refusal: str | None
) -> None:
    wheel = make_wheel(tmp_path / "d", version="2.13.0+x", platform=platform)
    env = publish_env(pypi, PATH=path_with_fake_preflight(tmp_path))
    args = ["--lane", lane, "--repository-url", pypi.url, "--tag", "v2.13.0", "--json"]
    done = run_publish([*args, "--bundlers", str(REPO / "bundlers"), str(wheel)], env)
    (entry,) = done.json["files"]
    if refusal is None:
        assert done.returncode == 0, done.stderr
        assert entry["status"] == "uploaded"
    else:
        assert done.returncode == 1
        assert entry["status"] == "refused" and entry["detail"].startswith(refusal)
        assert list(pypi.packages.iterdir()) == []


def built_wheels() -> list[Path]:
    """torch_fl wheels made by torch-fl-build, from FLAGOS_TEST_WHEEL_DIR (they carry their manifest)."""
    given = os.environ.get("FLAGOS_TEST_WHEEL_DIR")
    found = sorted(Path(given).glob("torch_fl-*.whl")) if given else []
    out = []
    for path in found:
        with zipfile.ZipFile(path) as archive:
            if "torch_fl/compatibility.json" in archive.namelist():
                out.append(path)
    return out


@pytest.mark.skipif(
    REAL_PREFLIGHT is None or not built_wheels() or importlib.util.find_spec("torch") is None,
    reason="needs torch-fl-preflight, FLAGOS_TEST_WHEEL_DIR wheels, and torch (preflight checks against it)",
)
def test_real_release_of_built_wheels(pypi: PyPIServer, tmp_path: Path) -> None:
    """The whole gate on real artifacts: tag, lane from the recipe, preflight --release; then a no-op re-run."""
    for wheel in built_wheels():
        manifest = json.loads(zipfile.ZipFile(wheel).read("torch_fl/compatibility.json"))
        recipe = tomllib.loads((REPO / "bundlers" / f"{manifest['platform']}.toml").read_text())
        if recipe.get("stand_in"):
            continue
        tag = "v" + wheel.name.split("-")[1].split("+")[0]
        args = ["--lane", recipe["wheel"]["index_lane"], "--repository-url", pypi.url, "--tag", tag, "--json"]
        first = run_publish([*args, str(wheel)], publish_env(pypi))
        assert first.returncode == 0, first.stdout + first.stderr
        assert first.json["files"][0]["status"] == "uploaded"
        again = run_publish([*args, str(wheel)], publish_env(pypi))
        assert again.returncode == 0 and again.json["files"][0]["status"] == "present"
