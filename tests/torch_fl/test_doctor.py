"""``python -m torch_fl`` (torch_fl/__main__.py), the info/doctor command, on this environment's development install
in fresh interpreters.  On the real host wheel with torch-fl-preflight beside it: tests/preflight/test_offline_install.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


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
