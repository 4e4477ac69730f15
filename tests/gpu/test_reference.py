"""The reference-interpreter protocol (reference.py) with a CPU reference: the real computations of
the GPU suite run on `cpu` in a child interpreter and come back equal to the same run in-process."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import reference
import torch
from gpu_cases import all_results, forward_outputs, make_inputs


def assert_same(a: object, b: object) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)  # type: ignore[union-attr, arg-type]
    elif isinstance(a, dict):
        assert a.keys() == b.keys()  # type: ignore[attr-defined]
        for k in a:
            assert_same(a[k], b[k])  # type: ignore[index]
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)  # type: ignore[arg-type]
        for x, y in zip(a, b):  # type: ignore[call-overload]
            assert_same(x, y)
    else:
        assert a == b


@pytest.mark.slow
def test_the_suites_computations_come_back_from_the_reference_interpreter() -> None:
    inputs = make_inputs()
    got = reference.call("gpu_cases:all_results", inputs, "cpu", python=sys.executable)
    assert_same(got, all_results(inputs, "cpu"))
    assert {"forward", "backward", "train", "sdpa", "flash"} == got.keys() and len(got["forward"]) > 50


def test_arguments_and_results_keep_their_types() -> None:
    values = [torch.float16, None, 1.5, "text", (1, 2), {"k": torch.arange(3)}]
    assert_same(reference.call("builtins:list", values, python=sys.executable), values)
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    assert_same(reference.call("gpu_cases:forward_outputs", "add", [a, b], "cpu", python=sys.executable),
                forward_outputs("add", [a, b], "cpu"))


def test_extra_paths_reach_the_child(tmp_path: Path) -> None:
    (tmp_path / "tier_cases.py").write_text("def double(x):\n    return x * 2\n")
    out = reference.call("tier_cases:double", torch.ones(2), python=sys.executable, paths=[tmp_path])
    assert torch.equal(out, torch.full((2,), 2.0))


def test_a_failing_call_names_the_error() -> None:
    with pytest.raises(reference.Failed, match=r"gpu_cases:nothing failed .* AttributeError"):
        reference.call("gpu_cases:nothing", python=sys.executable)
    with pytest.raises(ValueError, match="not module:function"):
        reference.call("gpu_cases.all_results", python=sys.executable)


def test_flagos_never_registers_in_the_reference_interpreter() -> None:
    # Importing torch_fl there would make its results flagos-registered ones: refused.
    with pytest.raises(reference.Failed, match="torch_fl was imported"):
        reference.call("importlib:import_module", "torch_fl", python=sys.executable)


def test_the_interpreter_must_have_a_cuda_build_of_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build: it is its own reference")
    monkeypatch.delenv(reference.ENV_VAR, raising=False)
    with pytest.raises(reference.Unavailable, match=f"not a CUDA build.*set {reference.ENV_VAR}"):
        reference.interpreter()
    monkeypatch.setenv(reference.ENV_VAR, sys.executable)
    with pytest.raises(reference.Unavailable, match=re.escape(f"has torch {torch.__version__}, not a CUDA build")):
        reference.interpreter()
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path / "no-python"))
    with pytest.raises(reference.Unavailable, match="cannot run the reference interpreter"):
        reference.interpreter()
