"""docs/performance.md's tables are generated from benchmarks/results/ (benchmarks/report_tables.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import report_tables  # noqa: E402

PERFORMANCE = REPO / "docs" / "performance.md"
SCRIPT = REPO / "benchmarks" / "report_tables.py"
MATMUL = {"version": 1, "gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "cuda": "13.0", "torch_fl": "cuda",
          "benchmark": "gpu_matmul", "shape": [8, 8, 8], "dtype": "bfloat16", "native": {"ms": 1.5, "tflops": 700.0},
          "flagos": {"ms": 1.5, "tflops": 699.0}, "ratio": 0.999, "goal_min_ratio": 0.99,
          "command": "python benchmarks/device/gpu_matmul.py --out m.json", "commit": "0123abc"}


def test_the_committed_tables_are_the_generated_ones() -> None:
    text = PERFORMANCE.read_text(encoding="utf-8")
    assert report_tables.render_into(text) == text, \
        "stale: run python benchmarks/report_tables.py --update docs/performance.md"


def test_every_result_with_an_entry_has_a_table_that_names_its_source() -> None:
    block = report_tables.render_block()
    rendered = [r for r in report_tables.discover() if r.benchmark in report_tables.ENTRIES]
    assert len(rendered) >= 10
    for result in rendered:
        assert f"- source: `{result.path.relative_to(REPO).as_posix()}" in block


def test_a_stale_document_exits_1_with_the_fix(tmp_path: Path) -> None:
    text = PERFORMANCE.read_text(encoding="utf-8")
    stale = tmp_path / "performance.md"
    stale.write_text(text.replace("| flagos |", "| flagos (edited by hand) |", 1), encoding="utf-8")
    done = subprocess.run([sys.executable, str(SCRIPT), "--check", str(stale)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 1
    assert f"--update {stale}" in done.stderr
    fixed = subprocess.run([sys.executable, str(SCRIPT), "--update", str(stale)], check=False)
    assert fixed.returncode == 0 and stale.read_text(encoding="utf-8") == text
    ok = subprocess.run([sys.executable, str(SCRIPT), "--check", str(PERFORMANCE)], check=False)
    assert ok.returncode == 0


def test_unknown_results_are_skipped_and_known_ones_rendered(tmp_path: Path) -> None:
    results = tmp_path / "results"
    (results / "gpu" / "gpu_matmul_runs").mkdir(parents=True)
    (results / "gpu" / "gpu_matmul.json").write_text(json.dumps(MATMUL))
    (results / "gpu" / "gpu_matmul_runs" / "run1.json").write_text(json.dumps(MATMUL))  # no runs table for it
    (results / "gpu" / "gpu_decode_new.json").write_text(json.dumps({"benchmark": "gpu_decode_new", "x": 1}))
    (results / "gpu" / "partial.json").write_text('{"benchmark": "gpu_matmul", "cut')  # a partial write
    (results / "notes.json").write_text("[1, 2]")
    block = report_tables.render_block(results)
    assert block.count("### ") == 1
    assert "| flagos | 1.50 | 699.00 |" in block
    assert "- command: `python benchmarks/device/gpu_matmul.py --out m.json`" in block  # the file's own command
    assert "- commit: `0123abc`" in block
    # Files that are not a JSON object (a partial write, a list) are no results at all.
    assert {p.name for p in report_tables.skipped(results)} == {"gpu_decode_new.json", "gpu_matmul_runs"}


def test_a_known_result_with_other_fields_names_the_file_and_the_entry(tmp_path: Path) -> None:
    (tmp_path / "gpu_matmul.json").write_text(json.dumps({**MATMUL, "native": None}))
    expected = r"gpu_matmul.json: its gpu_matmul table cannot be made .*ENTRIES\['gpu_matmul'\]"
    with pytest.raises(ValueError, match=expected):
        report_tables.render_block(tmp_path)


def emitted_report(device: Path, out: Path) -> dict:
    """The report `_report.emit_json` writes for a bare benchmark, run from the `benchmarks/device` folder `device`."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import _report; "
            "_report.emit_json({'benchmark': 'x'}, sys.argv[2])")
    subprocess.run([sys.executable, "-c", code, str(device), str(out)], check=True, capture_output=True)
    return json.loads(out.read_text())


def test_a_report_records_its_command_and_commit(tmp_path: Path) -> None:
    report = emitted_report(REPO / "benchmarks" / "device", tmp_path / "r.json")
    assert report["command"].startswith("python ")
    assert "commit" in report


def test_a_report_from_a_changed_tree_names_its_commit_dirty(tmp_path: Path) -> None:
    """Code that differs from HEAD is no commit's: the report says so instead of naming HEAD alone."""
    device = tmp_path / "benchmarks" / "device"
    device.mkdir(parents=True)
    shutil.copy(REPO / "benchmarks" / "device" / "_report.py", device)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()

    assert emitted_report(device, tmp_path / "r.json")["commit"] == head
    (device / "_report.py").write_text((device / "_report.py").read_text() + "\n# changed\n")
    assert emitted_report(device, tmp_path / "r.json")["commit"] == f"{head}-dirty"
