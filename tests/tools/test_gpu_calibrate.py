"""tools/gpu-calibrate.sh's stages on the host platform with the stand-in flag_gems (its ``sqrt`` is wrong,
``tanh`` slower, ``sinh`` faster above a size): compile shards side by side in the background, wait, timing
shards one after the other (with their state files copied to RESULTS), merge; the table routes as a single
calibration run does.  Bad input is one line and exit 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO

SCRIPT = REPO / "tools" / "gpu-calibrate.sh"
ARGS = ["--ops", "sqrt,tanh,sinh", "--dtypes", "float32", "--samples", "2", "--warmup", "1", "--reps", "5",
        "--record-workload", "calibration_workload:step"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    (site / "flag_gems").mkdir(parents=True)
    shutil.copyfile(REPO / "tests" / "flaggems" / "standin_flag_gems.py", site / "flag_gems" / "__init__.py")
    shutil.copyfile(REPO / "tests" / "flaggems" / "calibration_workload.py", site / "calibration_workload.py")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_", "PYTHONPATH"))}
    return {**environ, "PYTHON": sys.executable, "PYTHONPATH": str(site), "COLUMNS": "200"}


def _stage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600,
                          check=False)


def _routes(conf: Path) -> dict[str, str]:
    lines = (line.split("#", 1)[0].strip() for line in conf.read_text().splitlines())
    return {op.strip(): route.strip() for op, _, route in (line.partition("=") for line in lines if line)}


def test_the_stages_write_a_table_that_routes_as_one_run_does(env: dict[str, str], tmp_path: Path) -> None:
    work, results = tmp_path / "work", tmp_path / "results"
    started = _stage(env, str(work), "compile", "2", *ARGS)
    assert started.returncode == 0, started.stderr
    waited = _stage(env, str(work), "wait", "300")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert "0 of 2 compile shards still running" in waited.stdout
    # Each compile shard had caches of its own.
    assert all((work / f"compile-{k}.jsonl").is_file() for k in (1, 2))
    timed = _stage({**env, "RESULTS": str(results)}, str(work), "time", *ARGS)
    assert timed.returncode == 0, timed.stdout + (work / "time-1.log").read_text()
    assert sorted(p.name for p in results.iterdir()) == ["time-1.jsonl", "time-2.jsonl"]
    merged = _stage(env, str(work), "merge", str(tmp_path / "routes.conf"))
    assert merged.returncode == 0, merged.stderr
    routes = _routes(tmp_path / "routes.conf")
    assert routes["default"] == "host" and routes["sqrt"] == "host" and routes["tanh"] == "host"
    assert routes["sinh"].startswith("flaggems if ") and "numel >=" in routes["sinh"]
    assert (tmp_path / "routes.evidence.json").is_file()


@pytest.mark.parametrize(("args", "message"), [
    (["compile", "zero"], "give a count of shards"),
    (["time", "1-9"], "give shards within"),
    (["wait", "1"], "run compile first"),
    (["unpack"], "unknown stage unpack"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, env: dict[str, str],
                                          tmp_path: Path) -> None:
    if args[0] == "time":
        (tmp_path / "shards").write_text("2\n")
    result = _stage(env, str(tmp_path), *args)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
