"""``python -m torch_fl.flaggems calibrate``/``merge`` with the stand-in flag_gems, whose ``sqrt`` is wrong, ``tanh``
slower and ``sinh`` faster only from about 2000 elements (by sleeping, with margins of 8x or more, so the outcome cannot flake): the table
keeps the first two on the kernel device and routes the third by size; resume, shards and merge; the per-shape
rule at call time; the shipped table and its one warning."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

WORKLOAD = Path(__file__).with_name("calibration_workload.py")
CALIBRATE = ["calibrate", "--ops", "sqrt,tanh,sinh", "--dtypes", "float32", "--samples", "4", "--warmup", "1",
             "--reps", "5", "--record-workload", "calibration_workload:step"]
SCHEMA = json.loads((Path(__file__).parents[2] / "torch_fl/flaggems/route_evidence.schema.json").read_text())


def _flaggems(args: list[str], cwd: Path, standin: Path, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_", "PYTHONPATH"))}
    environ.update({"PYTHONPATH": f"{standin}{os.pathsep}{cwd}", "COLUMNS": "200", **(env or {})})
    shutil.copyfile(WORKLOAD, cwd / WORKLOAD.name)
    return subprocess.run([sys.executable, "-m", "torch_fl.flaggems", *args], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=300, check=False)


def _routes(conf: Path) -> dict[str, list[str]]:
    routes: dict[str, list[str]] = {}
    for line in conf.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            op, _, route = (p.strip() for p in line.partition("="))
            routes.setdefault(op, []).append(route)
    return routes


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory, standin: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    work = tmp_path_factory.mktemp("calibrate")
    result = _flaggems([*CALIBRATE, "--out", "routes.conf"], work, standin)
    assert result.returncode == 0, result.stderr
    return work, result


def test_wrong_and_slower_stay_off_flaggems_and_faster_is_routed_by_size(calibrated: Any) -> None:
    work, result = calibrated
    assert _routes(work / "routes.conf") == {
        "default": ["host"],
        "sinh": ["flaggems if dtype in float32 and numel >= 8192"],  # 2^13 and 2^14 measured faster, 256 slower
        "sqrt": ["host"],
        "tanh": ["host"],
    }
    ops = json.loads((work / "routes.evidence.json").read_text())["ops"]
    assert ops["sqrt"]["category"] == "wrong" and "0.25" in ops["sqrt"]["reason"]
    assert ops["tanh"]["category"] == "slower"
    assert ops["sinh"]["category"] == "faster-in-size"
    buckets = ops["sinh"]["dtypes"]["float32"]["buckets"]
    assert {b: v["routed"] for b, v in buckets.items() if b in ("9", "14", "15")} == {"9": False, "14": True,
                                                                                    "15": True}
    # The summary table and the tolerance used.
    assert "float32 rtol=1.3e-06 atol=1e-05" in result.stderr
    assert "routes: 1 faster-in-size, 1 slower, 1 wrong" in result.stdout


def test_the_evidence_records_versions_device_settings_and_cases(calibrated: Any) -> None:
    work, _ = calibrated
    document = json.loads((work / "routes.evidence.json").read_text())
    jsonschema.validate(document, SCHEMA)
    assert document["calibrated"] is True
    environment = document["environment"]
    assert environment["flag_gems"] == "5.0.2+standin" and environment["platform"] == "host"
    assert environment["device"].endswith("CPU") and environment["torch"]
    assert document["settings"]["timer"] == "perf_counter" and document["settings"]["reps"] == 5
    assert document["settings"]["tolerances"] == {"float32": {"rtol": 1.3e-06, "atol": 1e-05}}
    assert document["cases"]["run"] >= 12 and document["command"].startswith("python -m torch_fl.flaggems calibrate")
    assert "# Evidence: routes.evidence.json" in (work / "routes.conf").read_text()


def test_a_rerun_skips_finished_cases_and_records_an_unfinished_one_as_failed(calibrated: Any, standin: Path,
                                                                                tmp_path: Path) -> None:
    work, _ = calibrated
    lines = (work / "routes.state.jsonl").read_text().splitlines()
    cases = [json.loads(line) for line in lines if json.loads(line)["kind"] == "case"]
    # A run killed inside a tanh case: its start line written, its result never.
    victim = next(c for c in cases if c["op"] == "tanh")
    kept = [line for line in lines if json.loads(line).get("id") != victim["id"] or json.loads(line)["kind"] != "case"]
    (tmp_path / "routes.state.jsonl").write_text("\n".join(kept) + "\n")
    result = _flaggems([*CALIBRATE, "--out", "routes.conf"], tmp_path, standin)
    assert result.returncode == 0, result.stderr
    assert f"0 cases measured, {len(cases) - 1} done in an earlier run" in result.stderr
    ops = json.loads((tmp_path / "routes.evidence.json").read_text())["ops"]
    assert ops["tanh"]["category"] == "wrong"
    assert "did not finish in an earlier run" in ops["tanh"]["reason"]


def test_shards_merge_into_the_single_runs_table(calibrated: Any, standin: Path, tmp_path: Path) -> None:
    work, _ = calibrated
    for k in (1, 2):
        result = _flaggems([*CALIBRATE, "--shard", f"{k}/2", "--state", f"shard{k}.jsonl"], tmp_path, standin)
        assert result.returncode == 0, result.stderr
        assert f"shard {k}/2 done" in result.stderr
    assert not list(tmp_path.glob("*.conf"))  # a shard writes no table
    result = _flaggems(["merge", "--out", "merged.conf", "shard1.jsonl", "shard2.jsonl"], tmp_path, standin)
    assert result.returncode == 0, result.stderr
    assert _routes(tmp_path / "merged.conf") == _routes(work / "routes.conf")
    document = json.loads((tmp_path / "merged.evidence.json").read_text())
    jsonschema.validate(document, SCHEMA)
    assert document["settings"]["shards"] == 2


def test_merge_writes_the_provider_the_calibration_ran_against(calibrated: Any, standin: Path, tmp_path: Path) -> None:
    # A state measured on a GPU machine and merged elsewhere: its calls not routed to flaggems run on the provider
    # it recorded, not on the merging process's kernel device.
    work, _ = calibrated
    entries = [json.loads(line) for line in (work / "routes.state.jsonl").read_text().splitlines()]
    assert {e["settings"]["kernel_provider"] for e in entries if e["kind"] == "run"} == {"host"}
    for entry in entries:
        if entry["kind"] == "run":
            entry["settings"]["kernel_provider"] = "cuda"
    (tmp_path / "gpu.jsonl").write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    result = _flaggems(["merge", "--out", "gpu.conf", "gpu.jsonl"], tmp_path, standin)
    assert result.returncode == 0, result.stderr
    routes = _routes(tmp_path / "gpu.conf")
    assert routes["default"] == ["cuda"] and routes["sqrt"] == ["cuda"]
    assert json.loads((tmp_path / "gpu.evidence.json").read_text())["ops"]["sqrt"]["route"] == ["cuda"]
    # A state file that records none takes --kernel-provider.
    for entry in entries:
        entry.get("settings", {}).pop("kernel_provider", None)
    (tmp_path / "old.jsonl").write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    result = _flaggems(["merge", "--out", "old.conf", "--kernel-provider", "cuda", "old.jsonl"], tmp_path, standin)
    assert result.returncode == 0, result.stderr
    assert _routes(tmp_path / "old.conf")["default"] == ["cuda"]


def test_merge_refuses_states_from_another_flag_gems(calibrated: Any, standin: Path, tmp_path: Path) -> None:
    work, _ = calibrated
    lines = (work / "routes.state.jsonl").read_text().splitlines()
    other = [json.loads(line) for line in lines]
    for entry in other:
        if entry["kind"] == "run":
            entry["environment"]["flag_gems"] = "5.0.1"
    (tmp_path / "other.jsonl").write_text("\n".join(json.dumps(e) for e in other) + "\n")
    result = _flaggems(["merge", str(work / "routes.state.jsonl"), "other.jsonl"], tmp_path, standin)
    assert result.returncode == 2 and result.stdout == ""
    assert "was measured elsewhere" in result.stderr and "flag_gems 5.0.1 (not 5.0.2+standin)" in result.stderr


def test_an_operator_past_its_time_budget_stays_on_the_kernel_device(standin: Path, tmp_path: Path) -> None:
    # A budget shorter than any case: every operator's cases are recorded as not measured, none is timed.
    result = _flaggems([*CALIBRATE, "--op-budget", "1e-9", "--out", "routes.conf"], tmp_path, standin)
    assert result.returncode == 0, result.stderr
    assert _routes(tmp_path / "routes.conf") == {"default": ["host"], "sinh": ["host"], "sqrt": ["host"],
                                                 "tanh": ["host"]}
    document = json.loads((tmp_path / "routes.evidence.json").read_text())
    jsonschema.validate(document, SCHEMA)
    assert document["settings"]["op_budget_s"] == 1e-9 and document["cases"]["run"] == 0
    assert {op["category"] for op in document["ops"].values()} == {"not-measured"}
    assert document["ops"]["sinh"]["reason"] == "not measured: the operator's time budget (1e-09 s) ran out"
    lines = [json.loads(line) for line in (tmp_path / "routes.state.jsonl").read_text().splitlines()]
    assert not [line for line in lines if line["kind"] == "start"]


def test_screened_states_from_another_machine_are_refused(calibrated: Any, standin: Path, tmp_path: Path) -> None:
    work, _ = calibrated
    lines = (work / "routes.state.jsonl").read_text().splitlines()
    run = json.loads(lines[0])
    run["environment"]["device"] = "another GPU"
    (tmp_path / "screen.jsonl").write_text("\n".join([json.dumps(run), *lines[1:]]) + "\n")
    result = _flaggems([*CALIBRATE, "--screened", str(tmp_path / "screen.jsonl")], tmp_path, standin)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "--screened was measured elsewhere" in result.stderr and "another GPU" in result.stderr


def test_usage_errors_are_one_line(standin: Path, tmp_path: Path) -> None:
    result = _flaggems(["calibrate", "--ops", "sinhh"], tmp_path, standin)
    assert result.returncode == 2
    assert result.stderr.strip() == ("python -m torch_fl.flaggems calibrate: --ops: flag_gems 5.0.2+standin offers no "
                                     "routable operator 'sinhh' (did you mean 'sinh'?); `python -m torch_fl.flaggems` "
                                     "lists them")
    result = _flaggems(["calibrate", "--shard", "3/2"], tmp_path, standin)
    assert result.returncode == 2 and "--shard: expected K/N with 1 <= K <= N, got '3/2'" in result.stderr


def test_the_size_rule_picks_the_kernel_on_either_side_of_the_threshold(run_flagos, tmp_path: Path) -> None:
    config = tmp_path / "routes.conf"
    config.write_text("default = host\n"
                      "sinh = flaggems if dtype in float32 and numel >= 1000\n"
                      "sinh = flaggems if dtype in bfloat16 and numel >= 10 and numel < 20\n")
    result = run_flagos("""
        import torch, torch_fl, flag_gems
        ran = []
        for n, dtype in ((999, torch.float32), (1000, torch.float32), (4096, torch.float32), (4096, torch.float64),
                         (9, torch.bfloat16), (10, torch.bfloat16), (20, torch.bfloat16)):
            before = len(flag_gems.calls)
            x = torch.full((n,), 0.5, dtype=dtype)
            y = torch.sinh(x.to("flagos")).cpu()
            ran.append(f"{n}-{str(dtype)[6:]}:{'flaggems' if len(flag_gems.calls) > before else 'host'}")
            assert torch.allclose(y.double(), torch.sinh(x.double()), rtol=1e-2), n
        print("ran", *ran)
        print("route", torch_fl.route("sinh"))
        print("reason", torch_fl.route("sinh").reason)
        """, {"FLAGOS_BACKEND_CONFIG": str(config), "FLAGOS_LOG_DISPATCH": "1"})
    assert ("ran 999-float32:host 1000-float32:flaggems 4096-float32:flaggems 4096-float64:host 9-bfloat16:host "
            "10-bfloat16:flaggems 20-bfloat16:host") in result.stdout
    assert "route Route(requested='flaggems', effective='flaggems')" in result.stdout
    assert ("flaggems runs calls with dtype in float32 and numel >= 1000 or dtype in bfloat16 and numel >= 10 and "
            "numel < 20, the others (below size) run on host") in result.stdout
    assert "aten::sinh -> host (outside its flaggems size rule)" in result.stderr


@pytest.mark.parametrize(("line", "error"), [
    ("sinh = host if numel >= 4", "only provider flaggems takes a condition"),
    ("sinh = flaggems if numel > 4", "cannot read 'numel > 4'"),
    ("sinh = flaggems if dtype in float33", "unknown dtype 'float33'"),
    ("sinh = flaggems if numel >= 8 and numel < 8", "matches no call"),
    ("default = flaggems if numel >= 8", "'default' takes no condition"),
])
def test_a_condition_that_cannot_be_used_names_the_line(line: str, error: str, tmp_path: Path) -> None:
    from torch_fl import _C, routing

    bad = tmp_path / "routes.conf"
    bad.write_text(f"default = host\n{line}\n")
    with pytest.raises(routing.RoutingError, match=f"routes.conf:2: .*{error}"):
        routing.parse_file(bad, list(_C._provider_names()))


def test_use_flaggems_takes_the_shipped_table_calibrated_here(calibrated: Any, run_flagos, tmp_path: Path) -> None:
    work, _ = calibrated
    shipped = tmp_path / "configs"
    shipped.mkdir()
    for suffix in (".conf", ".evidence.json"):
        (shipped / f"flaggems_routes_here{suffix}").write_bytes((work / f"routes{suffix}").read_bytes())
    code = f"""
        import warnings, torch, torch_fl
        from torch_fl import routing
        from torch_fl.flaggems import shipped
        shipped._CONFIG_DIR = __import__("pathlib").Path({str(shipped)!r})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            routing.install(routing.load("host", environ={{"FLAGOS_USE_FLAGGEMS": "1"}}), log_dispatch=False)
        for op in ("sinh", "tanh", "sqrt", "add.Tensor"):
            print(op, torch_fl.route(op).effective, "|", torch_fl.route(op).reason)
        print("warnings", len(caught), *[str(w.message) for w in caught])
        """
    lines = run_flagos(code).stdout.splitlines()
    assert any(line.startswith("sinh flaggems | calibrated: correct, and faster") for line in lines), lines
    assert any(line.startswith("tanh host | calibrated: slower") for line in lines), lines
    assert any(line.startswith("sqrt host | calibrated: wrong") for line in lines), lines
    # Offered, but the table (complete: it has evidence) does not send it to flaggems.
    assert any(line.startswith("add.Tensor host | the default of") for line in lines), lines
    assert "warnings 0" in lines


def test_use_flaggems_without_a_matching_table_warns_once(run_flagos) -> None:
    result = run_flagos("""
        import torch, torch_fl
        from torch_fl import routing
        routing.install(routing.load("host", environ={"FLAGOS_USE_FLAGGEMS": "1"}), log_dispatch=False)
        print("route", torch_fl.route("add.Tensor").effective)
        """, {"FLAGOS_USE_FLAGGEMS": "1"})
    warnings = [line for line in result.stderr.splitlines() if "FlagGemsWarning" in line]
    assert len(warnings) == 1, result.stderr
    assert ("FLAGOS_USE_FLAGGEMS=1 routes every operator flag_gems 5.0.2+standin offers to it unverified: no shipped "
            "route table was calibrated with flag_gems 5.0.2+standin, triton None on") in warnings[0]
    assert warnings[0].endswith("run `python -m torch_fl.flaggems calibrate`, or keep provider host")
    assert "route flaggems" in result.stdout
