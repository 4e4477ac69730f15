"""Fake tensors on flagos across PyTorch's OpInfo database: what dynamo and AOTAutograd trace with.

A compiled graph is planned on fake tensors (metadata only) and then runs the real kernels, so the fake
result of every op must describe its real result: shape, dtype, strides, storage offset, and the flagos
device.  As PyTorch's own test_fake does for its backends, each sample runs for real and under
``FakeTensorMode`` on the CPU and on flagos; wherever the CPU's fake results describe its real ones, flagos's
must too.  One dtype per op (float32 where the CPU has it), its first samples (opinfo_runner.MAX_SAMPLES).
Samples whose results depend on the data (``nonzero``, ``unique``, ``item``) raise PyTorch's data-dependent
errors under fake tensors on both devices and are not compared; samples flagos rejects for real are the
eager tier's (test_op_db.py).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

pytest.importorskip("expecttest", reason="PyTorch's OpInfo database needs expecttest (ci/requirements-test.txt)")

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402
from torch._prims_common import compare_tensor_meta  # noqa: E402
from torch._subclasses.fake_tensor import (  # noqa: E402
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)
from torch.testing._internal.opinfo.core import SampleInput  # noqa: E402

import torch_fl  # noqa: E402,F401  (registers the device)

from expected_failures import EXPECTED_FAKE_MISMATCHES  # noqa: E402
from opinfo_runner import _error, _samples, _to_device, one_dtype_case_ids, parse_case  # noqa: E402

pytestmark = pytest.mark.opinfo

OK = "ok"


def _outcome(op: Any, sample: Any, device: str) -> tuple[str, str]:
    """(OK, "") when the fake results describe the real ones; else what happened, and the detail."""
    moved = _to_device(sample, device)
    with warnings.catch_warnings(action="ignore"):  # ops warn once per process; the metadata is what is compared here
        try:
            real = op(moved.input, *moved.args, **moved.kwargs)
        except Exception as e:  # noqa: BLE001 - rejected for real: the eager tier's business
            return "real error", _error(e)
        try:
            with FakeTensorMode() as mode:
                fake_sample = moved.transform(lambda t: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t)
                fake = op(fake_sample.input, *fake_sample.args, **fake_sample.kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException) as e:
            return "data-dependent", type(e).__name__
        except Exception as e:  # noqa: BLE001 - the outcome is the result
            return "fake error", _error(e)
    fakes, reals = pytree.tree_leaves(fake), pytree.tree_leaves(real)
    if len(fakes) != len(reals):
        return "mismatch", f"{len(fakes)} fake results, {len(reals)} real ones"
    for k, (f, r) in enumerate(zip(fakes, reals)):
        if isinstance(f, torch.Tensor) != isinstance(r, torch.Tensor):
            return "mismatch", f"result {k}: fake {type(f).__name__}, real {type(r).__name__}"
        if not isinstance(r, torch.Tensor) or r.layout != torch.strided:
            continue
        try:
            compare_tensor_meta(f, r, check_strides=True)  # device, shape, dtype, strides
        except Exception as e:  # noqa: BLE001
            return "mismatch", f"result {k}: {_error(e)}"
        if f.storage_offset() != r.storage_offset():
            return "mismatch", f"result {k}: storage offset {f.storage_offset()} fake, {r.storage_offset()} real"
    return OK, ""


def _params() -> list[object]:
    params: list[object] = []
    for case_id in one_dtype_case_ids():
        reason = EXPECTED_FAKE_MISMATCHES.get(case_id.rpartition("-")[0])
        marks = [pytest.mark.xfail(reason=reason, strict=True, raises=AssertionError)] if reason else []
        params.append(pytest.param(case_id, id=case_id, marks=marks))
    return params


@pytest.mark.parametrize("case_id", _params())
def test_fake_results_describe_the_real_ones(case_id: str) -> None:
    op, dtype = parse_case(case_id)
    compared = 0
    for k, sample in enumerate(_samples(op, dtype)):
        if _outcome(op, sample, "cpu") != (OK, ""):
            continue  # the CPU's own fake results do not describe it here (or it cannot run): no reference
        outcome, detail = _outcome(op, sample, "flagos")
        if outcome == "real error":
            continue
        assert outcome == OK, f"sample {k}: {outcome}: {detail}"
        compared += 1
    if not compared:
        pytest.skip("no sample whose fake results the CPU describes and flagos runs")


@torch.library.custom_op("torch_fl_tests::column_major", mutates_args=())
def _column_major(x: torch.Tensor) -> torch.Tensor:
    return x.t().contiguous().t()


@_column_major.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)  # misdescribes the strides on purpose


def test_a_fake_result_that_misdescribes_the_real_one_is_caught() -> None:
    sample = SampleInput(torch.randn(3, 4))
    assert _outcome(torch.add, SampleInput(torch.randn(3, 4), args=(1.5,)), "flagos") == (OK, "")
    outcome, detail = _outcome(_column_major, sample, "flagos")
    assert outcome == "mismatch" and "Stride mismatch" in detail, (outcome, detail)
