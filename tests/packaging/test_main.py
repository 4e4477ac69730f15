"""The command: --json prints one document valid against summary.schema.json, in success and failure."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from packaging_support import run_build


def _schema() -> dict:
    return json.loads(resources.files("torch_fl_packaging").joinpath("summary.schema.json").read_text())


@pytest.mark.compile
def test_json_summary_matches_its_schema(platform_inputs, tmp_path: Path) -> None:
    inputs = platform_inputs("host")
    res = run_build([*inputs.args, "--out", str(tmp_path / "out"), "--json"])
    assert res.rc == 0, res.stderr
    jsonschema.validate(res.json, _schema())
    assert res.stdout.count("\n{") == 0  # exactly one document
    assert set(res.json["timings"]) == {"configure", "build", "bundle", "repair", "manifest", "write", "verify"}


def test_json_error_matches_its_schema(tmp_path: Path) -> None:
    res = run_build(["--platform", "nope", "--json", "--out", str(tmp_path / "o")])
    assert res.rc == 2
    jsonschema.validate(res.json, _schema())


def test_human_summary_names_the_wheel(platform_inputs, tmp_path: Path) -> None:
    inputs = platform_inputs("host")
    res = run_build([*inputs.args, "--out", str(tmp_path / "out")])
    assert res.rc == 0, res.stderr
    wheel = next((tmp_path / "out").glob("*.whl"))
    assert "sha256" in res.stdout and "libflagos_hostrt.so" in res.stdout
    assert "configure" in res.stderr  # stage lines go to stderr
    assert wheel.name[:20] in res.stdout.replace("\n", "").replace("│", "").replace(" ", "")
