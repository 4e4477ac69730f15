"""The offline install of README.md ("Without network"): torch-fl-preflight goes into the wheelhouse beside
torch_fl, so ``torch-fl-preflight --installed --check-installed`` runs right after the ``--no-index`` install;
there, ``python -m torch_fl`` runs the same preflight in process.

The wheelhouse is made as documented: ``pip wheel --no-deps ./preflight`` and ``pip download`` of its
requirements; the target is a venv holding stock torch (a copy of the ``stock_venv`` session fixture), whose own pip
installs the real host wheel and preflight with ``--no-index --find-links`` only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.bootstrap import site_packages
from support.bootstrap_fixtures import LOCAL_VERSION
from support.paths import REPO

pytestmark = [pytest.mark.wheel, pytest.mark.slow]


def _pip(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True,
                       text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-2000:]


def test_preflight_runs_after_the_offline_install(wheels: dict[str, Path], stock_venv: Path,
                                                  tmp_path: Path) -> None:
    house = tmp_path / "wheels"
    # Build from a copy: an in-tree build would leave build/ and *.egg-info in the repository.
    src = tmp_path / "preflight"
    shutil.copytree(REPO / "preflight", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    _pip("wheel", "--quiet", "--no-deps", "-w", str(house), str(src))
    _pip("download", "--quiet", "--only-binary=:all:", "-d", str(house), "packaging>=22", "jsonschema>=4")
    shutil.copy(wheels["host"], house)
    assert LOCAL_VERSION["host"] in wheels["host"].name
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=300)
    shutil.copytree(site_packages(stock_venv), site_packages(target), dirs_exist_ok=True, symlinks=True)
    r = subprocess.run([str(target / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", "--no-index",
                        "--find-links", str(house), "torch_fl", "torch-fl-preflight"],
                       capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_", "PYTHON", "VIRTUAL_ENV"))}
    r = subprocess.run([str(target / "bin" / "torch-fl-preflight"), "--installed", "--check-installed"],
                       capture_output=True, text=True, env=env, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok   wheel.record: installed files match RECORD" in r.stdout

    # python -m torch_fl on the real wheel: its bundle kind, its cache directory, and the preflight.
    env["FLAGOS_CACHE_DIR"] = str(tmp_path / "cache")
    r = subprocess.run([str(target / "bin" / "python"), "-m", "torch_fl", "--json"], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=600, check=False)
    doc = json.loads(r.stdout)
    assert r.returncode == 0, (doc, r.stderr)
    assert doc["bundle_kind"] == "in-wheel-runtime" and doc["versions"]["torch_fl"].endswith("+host")
    assert doc["location"].startswith(str(target)) and doc["cache_dir"]["path"] == str(tmp_path / "cache")
    pre = doc["preflight"]
    assert pre["ran"] and pre["ok"] and pre["counts"]["fail"] == 0 and pre["counts"]["pass"] > 5, pre

    # The host wheel has no flaggems extra: the advice names the FlagGems release its manifest pins.
    r = subprocess.run([str(target / "bin" / "python"), "-c", "import torch_fl.installation as i; "
                        "print(i.flaggems_install_advice('host'))"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300, check=True)
    assert r.stdout.startswith("the torch_fl wheel of platform host has no flaggems extra: pip install 'flag-gems==")
    assert "torch_fl[" not in r.stdout
