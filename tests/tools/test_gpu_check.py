"""tools/gpu-check.sh and its recorder (tools/gpu_check_results.py) on a machine without a GPU: argument
handling, the steps' behaviour there (the demo does not crash, the suite skips, the benchmarks refuse)
and the verdicts of results.json."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.paths import REPO

SCRIPT = REPO / "tools" / "gpu-check.sh"
RECORD = REPO / "tools" / "gpu_check_results.py"


def check(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False)


def steps(out: Path) -> dict[str, dict]:
    return {s["name"]: s for s in json.loads((out / "results.json").read_text())["steps"]}


@pytest.mark.parametrize(("args", "message"), [
    ((), "no --out folder given"),
    (("--out", "o", "--only", "demo,lint"), "unknown step in --only (lint)"),
    (("--out", "o", "--python", "no-such-python"), "no Python at no-such-python"),
    (("--out", "o", "--wheel", "missing.whl"), "no wheel at missing.whl"),
    (("--out", "o", "--bogus"), "unknown argument (--bogus)"),
    (("--out", "o", "--opinfo-shards", "four"), "--opinfo-shards four is not a count"),
    (("--out", "o", "--pgo"), "--pgo shapes the build — pass --build with it"),
])
def test_unusable_input_is_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    done = check(*args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may answer here")
def test_without_a_gpu_it_refuses_unless_told(tmp_path: Path) -> None:
    done = check("--python", sys.executable, "--out", str(tmp_path))
    assert done.returncode == 2 and "no NVIDIA GPU answers here" in done.stderr and "--expect-no-gpu" in done.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may answer here")
def test_without_a_gpu_every_step_behaves_as_it_must(tmp_path: Path) -> None:
    done = check("--expect-no-gpu", "--python", sys.executable, "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["passed"] and doc["no_gpu"]
    by = steps(tmp_path)
    benches = ["bench-gpu_small_ops", "bench-gpu_matmul", "bench-gpu_transformer"]
    if torch.distributed.is_nccl_available():
        benches.append("bench-gpu_ddp_step")
    shards = [f"gpu-opinfo-{k}" for k in range(4)]
    assert list(by) == ["demo", "gpu-suite", *shards, *benches]
    suite = by["gpu-suite"]["tests"]
    assert suite["tests"] > 100 and suite["skipped"] == suite["tests"]
    # The OpInfo tier is not in the suite's step: the shards hold it, each a quarter of it.
    parts = [by[name]["tests"]["tests"] for name in shards]
    assert all(part > 500 and by[name]["tests"]["skipped"] == part for name, part in zip(shards, parts))
    assert max(parts) - min(parts) <= 1
    for name in benches:
        assert by[name]["rc"] == 2 and "no CUDA GPU" in by[name]["log_tail"][-1]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may answer here")
def test_an_unknown_benchmark_is_refused_before_any_step(tmp_path: Path) -> None:
    done = check("--expect-no-gpu", "--benchmarks", "gpu_matmul,gpu_nothing", "--python", sys.executable,
                 "--out", str(tmp_path))
    assert done.returncode == 2 and "benchmarks/device/gpu_nothing.py" in done.stderr
    assert not (tmp_path / "results.json").exists()


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may answer here")
def test_preflight_runs_on_the_given_wheel(tmp_path: Path) -> None:
    wheels = sorted(Path(os.environ.get("FLAGOS_TEST_WHEEL_DIR", "-")).glob("torch_fl-*+host-*.whl"))
    preflight = Path(sys.executable).with_name("torch-fl-preflight")
    if not wheels or not preflight.exists():
        pytest.skip("needs FLAGOS_TEST_WHEEL_DIR's host wheel and torch-fl-preflight (ci/test makes both)")
    done = check("--expect-no-gpu", "--only", "preflight", "--python", sys.executable, "--wheel", str(wheels[0]),
                 "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    report = steps(tmp_path)["preflight"]["report"]
    assert report["version"] and report["subjects"][0]["findings"]


def record(results: Path, step: str, rc: int, expect: str) -> None:
    subprocess.run([sys.executable, str(RECORD), "record", "--results", str(results), "--step", step, "--rc", str(rc),
                    "--expect", expect], check=True)


@pytest.mark.parametrize(("rc", "expect", "as_expected"), [
    (0, "ok", True), (1, "ok", False), (1, "fail", True), (139, "fail", False), (0, "clean", True),
    (1, "clean", True), (-11, "clean", False), (2, "refuse", True), (1, "refuse", False), (1, "record", True),
])
def test_expectations(tmp_path: Path, rc: int, expect: str, as_expected: bool) -> None:
    record(tmp_path / "results.json", "s", rc, expect)
    assert steps(tmp_path)["s"]["as_expected"] is as_expected


def test_finish_names_the_failed_steps_and_ignores_informational_ones(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    record(results, "demo", 0, "ok")
    record(results, "bench-x", 1, "ok")
    record(results, "machine-nvidia-import", 1, "record")
    done = subprocess.run([sys.executable, str(RECORD), "finish", "--results", str(results)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 1 and "FAILED at bench-x" in done.stderr and "machine-nvidia" not in done.stderr
    assert json.loads(results.read_text())["passed"] is False
