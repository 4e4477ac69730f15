"""benchmarks/device/gpu_opinfo_first_call.py without a GPU: which case stands for each op, one real OpInfo case timed
through tests/opinfo/opinfo_runner.py, the report with run-time-compiled ops apart, and the one-line refusal where
there is no CUDA GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO

pytest.importorskip("expecttest", reason="PyTorch's OpInfo database needs expecttest (ci/requirements-test.txt)")

sys.path.insert(0, str(REPO / "benchmarks" / "device"))
import gpu_opinfo_first_call as first_call  # noqa: E402


def test_each_op_is_run_in_float32_or_else_its_first_dtype() -> None:
    ids = ["add-float64", "add-float32", "logical_not-bool", "logical_not-int64", "exp-bfloat16", "exp-complex64"]
    order = ["float32", "float64", "bfloat16", "float16", "complex64", "int64", "bool"]
    assert first_call.one_case_per_op(ids, order) == ["add-float32", "logical_not-int64", "exp-bfloat16"]


def test_every_op_of_the_database_gets_one_case() -> None:
    r = first_call.runner()
    chosen = first_call.one_case_per_op(r.case_ids(), [r.DTYPE_NAMES[d] for d in r.DTYPES])
    assert len(chosen) == len(r.op_db()) - sum(not r.op_db()[n].supported_dtypes("cpu") & set(r.DTYPES)
                                               for n in r.op_db())
    assert "add-float32" in chosen and len({c.rpartition("-")[0] for c in chosen}) == len(chosen)


@pytest.mark.parametrize("device", ["cpu", "flagos"])
def test_a_real_case_is_timed_on_its_exported_samples(device: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_KERNEL_CACHE_PATH", str(tmp_path))
    r = first_call.runner()
    samples = r.export_samples("mul-float32")
    record = first_call.timed_case("mul-float32", device, samples)
    assert record["s"] > 0 and record["raised"] == [False] * len(samples) and record["compiled"] is False


def test_kernels_in_the_cache_folder_are_counted(tmp_path: Path) -> None:
    assert first_call.kernel_count(tmp_path) == 0
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "kernel_a").write_bytes(b"cubin")
    (tmp_path / "kernel_b").write_bytes(b"cubin")
    assert first_call.kernel_count(tmp_path) == 2


def _record(seconds: float, raised: tuple[bool, ...] = (False,), *, compiled: bool = False) -> dict[str, object]:
    return {"s": seconds, "raised": list(raised), "compiled": compiled}


def test_report_keeps_compiled_ops_apart_and_drops_differing_outcomes() -> None:
    flagos = {"a": _record(0.010), "b": _record(0.032), "jit": _record(0.600, compiled=True),
              "odd": _record(0.001, raised=(True,)), "mine": _record(0.5)}
    native = {"a": _record(0.010), "b": _record(0.020), "jit": _record(0.400),
              "odd": _record(0.001)}
    rounds = [{"order": ["flagos", "native"], "flagos": flagos, "native": native},
              {"order": ["native", "flagos"], "flagos": {**flagos, "a": _record(0.012)}, "native": native}]
    report = first_call.summarise(rounds, top=2)
    plain = report["without_run_time_compilation"]
    assert plain["ops"] == 2
    assert plain["total_s"] == {"flagos": 0.043, "native": 0.03}  # a: median(0.010, 0.012) = 0.011
    assert plain["total_ratio"] == round(0.043 / 0.03, 4)
    assert plain["median_op_ratio"] == round(0.0215 / 0.015, 4)
    assert report["run_time_compiled"]["cases"] == ["jit"] and report["run_time_compiled"]["total_ratio"] == 1.5
    assert report["not_counted"] == {"outcome_differs": ["odd"], "run_by_one_side_only": 1}
    assert [row["case"] for row in report["largest_ratios"]] == ["b", "jit"]  # 1.6, 1.5
    assert not report["met"]


def test_without_a_cuda_gpu_it_says_so_in_one_line_and_exits_2() -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "device" / "gpu_opinfo_first_call.py")],
                          capture_output=True, text=True, timeout=300, cwd=REPO / "benchmarks" / "device", check=False)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1 and "GPU" in done.stderr
