"""``python -m torch_fl``: the info/doctor command, in this environment's development install (fresh
interpreters), and in a stock-torch venv holding the real host wheel and torch-fl-preflight."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.bootstrap import site_packages


def _doctor(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLAGOS_")}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "torch_fl", *args], capture_output=True, text=True, env=environ,
                          cwd=tmp_path, timeout=300, check=False)


def test_json_document(tmp_path: Path) -> None:
    result = _doctor(tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["version"] == 1 and doc["ok"] is True
    assert doc["platform"] == "host"
    import torch

    assert doc["versions"]["torch"] == torch.__version__
    assert doc["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert doc["devices"]["count"] == 2 and doc["devices"]["devices"][1]["name"] == "flagos host device 1"
    assert doc["routing"]["usable"] and doc["routing"]["default"] == "host"
    assert doc["routing"]["source"].endswith("configs/backends_host.conf")
    assert doc["cache_dir"]["path"] and doc["cache_dir"]["error"] is None
    # This environment's torch_fl is `pip install .` of the tree: no manifest, so no preflight.
    assert doc["bundle_kind"] is None and doc["preflight"]["ran"] is False
    assert "development install" in doc["preflight"]["reason"]


def test_text_report(tmp_path: Path) -> None:
    result = _doctor(tmp_path, env={"FLAGOS_OP_mm": "cpu"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("platform ") and "host" in lines[0]
    assert any(line.split()[:1] == ["routing"] and "default host" in line for line in lines)
    assert any("per operator: mm=cpu" in line for line in lines)
    assert lines[-1] == "OK"


def test_an_unusable_setting_fails_the_check(tmp_path: Path) -> None:
    result = _doctor(tmp_path, "--json", env={"FLAGOS_OP_add__Tensor": "nosuch"})
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["routing"]["usable"] is False
    assert doc["routing"]["error"].startswith("FLAGOS_OP_add__Tensor: unknown provider 'nosuch'")
    assert doc["routing"]["settings"] == {"FLAGOS_OP_add__Tensor": "nosuch"}
    text = _doctor(tmp_path, env={"FLAGOS_HOST_DEVICES": "two"})
    assert text.returncode == 1 and "UNUSABLE: FLAGOS_HOST_DEVICES='two'" in text.stdout
    assert text.stdout.splitlines()[-1].startswith("FAILED")


def test_help_and_usage(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGOS_")}
    ran = subprocess.run([sys.executable, "-m", "torch_fl", "--help"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300, check=False)
    assert ran.returncode == 0 and ran.stdout.startswith("usage: python -m torch_fl [-h] [--json]")
    ran = subprocess.run([sys.executable, "-m", "torch_fl", "--bogus"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300, check=False)
    assert ran.returncode == 2 and ran.stdout == ""


@pytest.mark.wheel
@pytest.mark.slow
def test_real_wheel_with_preflight(wheels: dict[str, Path], stock_venv: Path, tmp_path: Path) -> None:
    """The host wheel on stock torch, with torch-fl-preflight beside it: the doctor names the bundle kind
    and the preflight of the installed wheel passes."""
    target = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True, timeout=300)
    shutil.copytree(site_packages(stock_venv), site_packages(target), dirs_exist_ok=True, symlinks=True)
    src = tmp_path / "preflight"
    shutil.copytree(Path(__file__).resolve().parents[2] / "preflight", src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--ignore-installed", "--prefix", str(target), str(wheels["host"]), str(src)],
                   check=True, timeout=600, capture_output=True)
    # preflight's own requirements (packaging, jsonschema and theirs) are this environment's: a .pth names
    # this site-packages last, so the target's torch stays the stock one it holds.
    (site_packages(target) / "zz_test_requirements.pth").write_text(f"{site_packages(Path(sys.prefix))}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_", "PYTHON", "VIRTUAL_ENV"))}
    env["FLAGOS_CACHE_DIR"] = str(tmp_path / "cache")
    ran = subprocess.run([str(target / "bin" / "python"), "-m", "torch_fl", "--json"], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=600, check=False)
    doc = json.loads(ran.stdout)
    assert ran.returncode == 0, (doc, ran.stderr)
    assert doc["bundle_kind"] == "in-wheel-runtime" and doc["versions"]["torch_fl"] == "2.13.0+host"
    assert doc["location"].startswith(str(target))
    assert doc["cache_dir"]["path"] == str(tmp_path / "cache")
    pre = doc["preflight"]
    assert pre["ran"] and pre["ok"] and pre["counts"]["fail"] == 0 and pre["counts"]["pass"] > 5, pre
    # The host wheel has no flaggems extra: the advice names the FlagGems release its manifest pins.
    ran = subprocess.run([str(target / "bin" / "python"), "-c", "import torch_fl.installation as i; "
                          "print(i.flaggems_install_advice('host'))"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300, check=True)
    assert ran.stdout.startswith("the torch_fl wheel of platform host has no flaggems extra: pip install 'flag-gems==")
    assert "torch_fl[" not in ran.stdout
