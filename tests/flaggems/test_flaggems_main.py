"""``python -m torch_fl.flaggems``: argparse's help, and the provider's status as one JSON document."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_", "PYTHONPATH"))}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "torch_fl.flaggems", *args], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=300, check=False)


def test_help_is_argparse_help(tmp_path: Path) -> None:
    result = _run(["--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m torch_fl.flaggems [-h]")
    assert "FLAGOS_USE_FLAGGEMS=1" in result.stdout and "{" not in result.stdout  # help, not the JSON


def test_unknown_option_is_a_usage_error(tmp_path: Path) -> None:
    result = _run(["--bogus"], tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines()[-1].endswith("error: unrecognized arguments: --bogus")


def test_status_document(tmp_path: Path, standin: Path) -> None:
    result = _run([], tmp_path, {"PYTHONPATH": str(standin), "FLAGOS_USE_FLAGGEMS": "1"})
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["version"] == 1 and doc == {"version": 1, **doc}
    assert any("add.Tensor" in json.dumps(v) for v in doc.values())
