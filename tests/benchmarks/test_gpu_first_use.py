"""benchmarks/device/gpu_first_use.py without a GPU: the order of the sides, the report, the tiny Llama's first
`generate` on the host platform, and the one-line refusal where there is no CUDA GPU."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "device"))
import gpu_first_use as first_use  # noqa: E402


def test_the_side_that_goes_first_alternates() -> None:
    assert [first_use.order_of(i)[0] for i in range(4)] == ["flagos", "native", "flagos", "native"]
    assert set(first_use.order_of(1)) == {"flagos", "native"}


def _runs(seconds: dict[str, list[float]], workload: str = "step") -> list[dict[str, object]]:
    return [{"round": i, "workload": workload, "side": side, "seconds": s}
            for side, times in seconds.items() for i, s in enumerate(times)]


def test_report_gives_medians_ratio_and_ratio_per_order() -> None:
    runs = _runs({"flagos": [1.0, 3.0, 1.2, 0.9], "native": [2.0, 1.0, 1.0, 1.0]})
    runs += _runs({"flagos": [0.5, 0.5], "native": [0.5, 0.4]}, "generate")
    report = first_use.summarise(runs)
    step = report["step"]
    assert step["flagos"]["median_s"] == 1.1 and step["native"]["median_s"] == 1.0
    assert step["ratio"] == 1.1 and step["met"]
    # flagos started rounds 0 and 2 (ratios 0.5, 1.2), native rounds 1 and 3 (3.0, 0.9)
    assert step["median_round_ratio_by_order"] == {"flagos_first": 0.85, "native_first": 1.95}
    assert report["generate"]["ratio"] == pytest.approx(0.5 / 0.45, abs=1e-4)
    assert not report["generate"]["met"]


def test_a_workload_the_reference_cannot_run_is_reported_skipped() -> None:
    runs = _runs({"flagos": [1.0], "native": [1.0]})
    runs += [{"round": 0, "workload": "generate", "side": "native", "skipped": "transformers is not installed"},
             {"round": 0, "workload": "generate", "side": "flagos", "seconds": 0.3}]
    report = first_use.summarise(runs)
    assert report["generate"] == {"skipped": "transformers is not installed"}
    assert report["step"]["ratio"] == 1.0


@pytest.mark.parametrize("device", ["cpu", "flagos"])
def test_first_generate_runs_the_tiny_llama(device: str) -> None:
    pytest.importorskip("transformers")
    assert first_use.first_generate(device) > 0


def test_without_a_cuda_gpu_it_says_so_in_one_line_and_exits_2() -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "device" / "gpu_first_use.py")], capture_output=True,
                          text=True, timeout=300, cwd=REPO / "benchmarks" / "device", check=False)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1 and "GPU" in done.stderr
