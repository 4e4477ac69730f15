"""tools/gpu-calibrate.sh's stages on the host platform with the stand-in flag_gems (its ``sqrt`` is wrong,
``tanh`` slower, ``sinh`` faster above a size): screening shards side by side in the background, wait (their
state files copied to RESULTS), the timing of what the screening left open (its state file copied to RESULTS),
merge; the table routes as a single calibration run does.  Bad input is one line and exit 2."""

from __future__ import annotations

import json
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
    started = _stage(env, str(work), "screen", "2", *ARGS)
    assert started.returncode == 0, started.stderr
    waited = _stage({**env, "RESULTS": str(results)}, str(work), "wait", "300")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert "0 of 2 screening shards still running" in waited.stdout
    assert sorted(p.name for p in results.iterdir()) == ["screen-1.jsonl", "screen-2.jsonl"]
    timed = _stage({**env, "RESULTS": str(results)}, str(work), "time", *ARGS)
    assert timed.returncode == 0, timed.stdout + (work / "time.log").read_text()
    assert (results / "time.jsonl").is_file()
    # sqrt's wrong results are the screening's: no case of it was timed again.
    lines = [json.loads(line) for line in (work / "time.jsonl").read_text().splitlines()]
    started_ids = {line["id"] for line in lines if line["kind"] == "start"}
    sqrt_cases = [line for line in lines if line["kind"] == "case" and line["op"] == "sqrt"]
    assert sqrt_cases and not started_ids & {line["id"] for line in sqrt_cases}
    assert "taken from the screening" in (work / "time.log").read_text()
    merged = _stage(env, str(work), "merge", str(tmp_path / "routes.conf"))
    assert merged.returncode == 0, merged.stderr
    routes = _routes(tmp_path / "routes.conf")
    assert routes["default"] == "host" and routes["sqrt"] == "host" and routes["tanh"] == "host"
    assert routes["sinh"].startswith("flaggems if ") and "numel >=" in routes["sinh"]
    document = json.loads((tmp_path / "routes.evidence.json").read_text())
    assert document["settings"]["screen"]["files"] == 2 and document["wall_s"] > document["settings"]["screen"]["wall_s"]


@pytest.mark.parametrize(("args", "message"), [
    (["screen", "zero"], "give a count of shards"),
    (["time"], "the screening left no state file"),
    (["wait", "1"], "run screen first"),
    (["merge", "routes.conf"], "run time first"),
    (["unpack"], "unknown stage unpack"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, env: dict[str, str],
                                          tmp_path: Path) -> None:
    if args[0] == "time":
        (tmp_path / "shards").write_text("2\n")
    result = _stage(env, str(tmp_path), *args)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
