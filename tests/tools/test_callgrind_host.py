"""tools/callgrind_host.py under valgrind for real: one training step of its small encoder on the CPU and on
flagos, counted whole.  The device layer's own library runs on flagos only, and the step runs more
instructions there; bad input is one line and exit 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO

TOOL = REPO / "tools" / "callgrind_host.py"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, cwd=cwd, timeout=900)


def test_counts_a_step_on_both_devices(tmp_path: Path) -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("needs valgrind")
    pytest.importorskip("torch_fl")
    out = tmp_path / "counts.json"
    result = run("--workload", "train", "--units", "1", "--top", "5", "--json", str(out), cwd=tmp_path)
    if result.returncode == 2 and "client-request shim" in result.stderr:
        pytest.skip("needs valgrind's headers and a C compiler")
    assert result.returncode == 0, result.stderr
    counts = json.loads(out.read_text())
    totals = counts["per_unit_totals"]
    assert totals["flagos"][0] > totals["cpu"][0] > 1e6
    layer = counts["per_unit_by_library"]["_C"]
    assert layer["flagos"][0] > 2 * layer.get("cpu", [0, 0])[0]
    misses = result.stdout.split("flagos minus cpu, simulated L1i misses per step")[1].split("\n\n")[0]
    # The plugin's own code is among the largest differences (named where the plugin is built unstripped).
    assert "[_C]" in misses


@pytest.mark.parametrize("args", [("--units", "0"), ("--top", "-1")])
def test_bad_counts_are_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--units" in result.stderr
