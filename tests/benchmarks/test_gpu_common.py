"""The GPU benchmarks' child protocol (benchmarks/device/_gpu_common.py) with CPU children: commands
and their arguments over the pipe, flagos never registered in the native child and registered in the flagos
one, the two sides taking turns, the flagos side in a child unless asked otherwise."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "device"))
import _gpu_common as common  # noqa: E402

CHILD = '''
import os, sys
sys.path.insert(0, {benchmarks!r})
import torch
from _gpu_common import serve
env = lambda: {{"autoload": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD"), "flagos": hasattr(torch, "flagos"),
               "argv": sys.argv[1:]}}
if "--native-child" in sys.argv:
    serve({{"double": lambda x: {{"value": 2 * int(x)}}, "env": env}})
if "--flagos-child" in sys.argv:
    serve({{"env": env}}, native=False)
'''


def test_the_child_answers_commands_and_never_registers_flagos(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(benchmarks=str(REPO / "benchmarks" / "device")))
    child = common.NativeChild(sys.executable, str(script))
    try:
        assert child.ask("double", "21") == {"value": 42}
        assert child.ask("env") == {"autoload": "0", "flagos": False, "argv": ["--native-child"]}
        env = child.ask("environment")
        assert env["torch"] == common.torch.__version__ and env["cuda"] == common.torch.version.cuda
    finally:
        child.close()
    assert child.child.returncode == 0


def test_the_flagos_child_runs_this_interpreter_with_flagos_registered(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(benchmarks=str(REPO / "benchmarks" / "device")))
    child = common.FlagosChild(str(script), "--width", "8")
    try:
        env = child.ask("env")
        assert env["flagos"] and env["autoload"] != "0" and env["argv"] == ["--flagos-child", "--width", "8"]
    finally:
        child.close()
    assert child.child.returncode == 0


def test_the_flagos_side_runs_in_a_child_unless_asked_otherwise(capsys: pytest.CaptureFixture[str]) -> None:
    p = argparse.ArgumentParser()
    common.flagos_layout(p)
    assert common.flagos_process(p.parse_args([])) == "child"
    assert common.flagos_process(p.parse_args(["--flagos-in-child"])) == "child"
    assert common.flagos_process(p.parse_args(["--flagos-in-process"])) == "benchmark"
    with pytest.raises(SystemExit) as exit_:
        p.parse_args(["--flagos-in-process", "--flagos-in-child"])
    assert exit_.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_the_sides_take_turns_and_medians_are_per_side() -> None:
    order: list[str] = []

    def timer(side: str, values: list[float]):  # noqa: ANN202
        it = iter(values)
        return lambda: (order.append(side), next(it))[1]

    ms = common.median_ms({"cuda": timer("cuda", [1.0, 9.0, 2.0]), "flagos": timer("flagos", [4.0, 3.0, 5.0])},
                          repeats=3)
    assert order == ["cuda", "flagos", "flagos", "cuda", "cuda", "flagos"]
    assert ms == {"cuda": 2.0, "flagos": 4.0}


def test_take_turns_keeps_each_sides_rounds_in_order_whoever_went_first() -> None:
    calls: list[str] = []
    counters = {"native": iter(range(10)), "flagos": iter(range(10, 20))}

    def measure(side: str):  # noqa: ANN202
        return lambda: (calls.append(side), float(next(counters[side])))[1]

    times = common.take_turns({"native": measure("native"), "flagos": measure("flagos")}, rounds=4)
    assert calls == ["native", "flagos", "flagos", "native"] * 2
    assert times == {"native": [0.0, 1.0, 2.0, 3.0], "flagos": [10.0, 11.0, 12.0, 13.0]}
    calls.clear()
    times = common.take_turns({"native": measure("native"), "flagos": measure("flagos")}, rounds=2, per_turn=3)
    assert calls == ["native"] * 3 + ["flagos"] * 6 + ["native"] * 3
    assert times == {"native": [4.0, 5.0, 6.0, 7.0, 8.0, 9.0], "flagos": [14.0, 15.0, 16.0, 17.0, 18.0, 19.0]}


def test_without_a_cuda_build_the_reference_must_be_given(capsys: pytest.CaptureFixture[str]) -> None:
    if common.torch.version.cuda:
        pytest.skip("this torch is a CUDA build: it is its own reference")
    assert common.reference_python("/some/python") == "/some/python"
    with pytest.raises(SystemExit) as exit_:
        common.reference_python(None)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--reference-python" in err
