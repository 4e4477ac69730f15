"""benchmarks/device/heap_blocks.py end to end: its report, and unusable input refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from support.paths import REPO

SCRIPT = REPO / "benchmarks" / "device" / "heap_blocks.py"


def test_the_report_counts_every_operator_and_workload_on_both_devices(tmp_path: Path) -> None:
    out = tmp_path / "heap.json"
    result = subprocess.run([sys.executable, str(SCRIPT), "--calls", "20", "--units", "2", "--workloads", "train",
                             "--out", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["benchmark"] == "heap_blocks" and report["reference"] == "cpu" and report["calls"] == 20
    assert set(report["per_unit"]) == {"train"}
    for counts in [*report["per_call"].values(), *report["per_unit"].values()]:
        assert set(counts) == {"cpu", "flagos"}
    # A training step makes tensors on both devices: the counter sees them.
    assert min(report["per_unit"]["train"]["cpu"][0], report["per_unit"]["train"]["flagos"][0]) > 100


@pytest.mark.parametrize(("args", "named"), [
    (["--calls", "0"], "--calls"),
    # CUDA's backward cannot run beside a registered flagos; and on a machine without a GPU there is no CUDA.
    (["--reference", "cuda"], "--workloads decode"),
    (["--reference", "cuda", "--workloads", "decode"], "GPU"),
])
def test_unusable_input_is_refused_in_one_line(tmp_path: Path, args: list[str], named: str) -> None:
    if named == "GPU" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --reference cuda is usable here")
    result = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and named in result.stderr
