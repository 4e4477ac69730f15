"""PyTorch's OpInfo database on flagos against the CPU: every op and dtype, forward and backward.

The host platform's kernels are the CPU's own, so flagos must compute what the
CPU computes within PyTorch's default per-dtype tolerances; see
``opinfo_runner.py`` for how cases are built and ``expected_failures.py`` for the
only places it may not, each with its reason.
"""

from __future__ import annotations

import pytest

pytest.importorskip("expecttest", reason="PyTorch's OpInfo database needs expecttest (ci/requirements-test.txt)")

import torch  # noqa: E402

import torch_fl  # noqa: E402,F401  (registers the device)

from expected_failures import EXPECTED_ERRORS, EXPECTED_MISMATCHES  # noqa: E402
from opinfo_runner import (  # noqa: E402
    _samples,
    assert_all_close,
    case_ids,
    compare,
    forward_ad,
    noncontiguous,
    one_dtype_case_ids,
    op_id,
    parse_case,
    prepare_case,
    run_prepared,
    second_order_grads,
    supports_backward,
)

pytestmark = pytest.mark.opinfo


def _params() -> list[object]:
    params: list[object] = []
    for case_id in case_ids():
        reason = EXPECTED_MISMATCHES.get(case_id)
        marks = [pytest.mark.xfail(reason=reason, strict=True, raises=AssertionError)] if reason else []
        params.append(pytest.param(case_id, id=case_id, marks=marks))
    return params


@pytest.mark.parametrize("case_id", _params())
def test_flagos_matches_cpu(case_id: str) -> None:
    case = prepare_case(case_id)  # the samples made once: each run moves copies of them to its device
    expected = run_prepared(case, "cpu")
    actual = run_prepared(case, "flagos")
    op = case.op
    if op_id(op) in EXPECTED_ERRORS:
        text, _why = EXPECTED_ERRORS[op_id(op)]
        computed = [k for k, s in enumerate(expected.samples) if s.forward is not None]
        assert computed, "the CPU rejects every sample: the case no longer shows the rule"
        for k in computed:
            error = actual.samples[k].error or ""
            assert text in error and "\n" not in error, f"sample {k}: expected an error with {text!r}, got {error!r}"
        return
    compare(actual, expected)


@pytest.mark.parametrize("case_id", case_ids(inplace=True))
def test_inplace_variant_matches_cpu(case_id: str) -> None:
    """``x.add_(...)`` and friends write what the CPU writes (no autograd: a copy of the input is written)."""
    case = prepare_case(case_id)
    compare(run_prepared(case, "flagos", inplace=True), run_prepared(case, "cpu", inplace=True))


@pytest.mark.parametrize("case_id", one_dtype_case_ids(lambda op: op_id(op) not in EXPECTED_ERRORS))
def test_noncontiguous_samples_match_cpu(case_id: str) -> None:
    """Every tensor of the samples non-contiguous (one dtype per op): kernel views carry the strides."""
    case = noncontiguous(prepare_case(case_id))
    compare(run_prepared(case, "flagos"), run_prepared(case, "cpu"))


@pytest.mark.parametrize("case_id", one_dtype_case_ids(
    lambda op: op.supports_gradgrad and op.supports_autograd and op_id(op) not in EXPECTED_ERRORS))
def test_second_order_gradients_match_cpu(case_id: str) -> None:
    """Gradients of gradients (gradient penalties, meta-learning), one dtype per op."""
    op, dtype = parse_case(case_id)
    if not supports_backward(op, dtype):
        pytest.skip(f"no autograd for {dtype} on the CPU")
    compared = 0
    for k, sample in enumerate(_samples(op, dtype)):
        expected = second_order_grads(op, sample, "cpu")
        if not isinstance(expected, list):
            continue  # no second-order gradient here, or the CPU rejects the sample
        actual = second_order_grads(op, sample, "flagos")
        assert isinstance(actual, list), f"sample {k}: the CPU computed it, flagos gave {actual!r}"
        assert_all_close(actual, expected, f"sample {k} gradient")
        compared += 1
    if not compared:
        pytest.skip("no sample has a second-order gradient")


@pytest.mark.parametrize("case_id", one_dtype_case_ids(
    lambda op: op.supports_forward_ad and op_id(op) not in EXPECTED_ERRORS))
def test_forward_mode_gradients_match_cpu(case_id: str) -> None:
    """torch.autograd.forward_ad (jvp, torch.func.jvp's engine), one dtype per op: primals and tangents."""
    op, dtype = parse_case(case_id)
    compared = 0
    for k, sample in enumerate(_samples(op, dtype)):
        expected = forward_ad(op, sample, "cpu")
        if isinstance(expected, str):
            continue  # the CPU rejects the sample
        actual = forward_ad(op, sample, "flagos")
        assert not isinstance(actual, str), f"sample {k}: the CPU computed it, flagos raised {actual}"
        assert_all_close([p for p, _ in actual], [p for p, _ in expected], f"sample {k} result")
        assert_all_close([t for _, t in actual], [t for _, t in expected], f"sample {k} tangent")
        compared += 1
    if not compared:
        pytest.skip("the CPU rejects every sample")


def test_every_supported_dtype_is_a_case() -> None:
    """The tier covers each dtype of the seven for every op whose CPU kernels support it."""
    ids = set(case_ids())
    by_dtype = {name: sum(1 for c in ids if c.endswith(f"-{name}")) for name in
                ("float32", "float64", "bfloat16", "float16", "complex64", "int64", "bool")}
    assert all(n > 0 for n in by_dtype.values()), by_dtype
    assert "add-float32" in ids and "add-bool" in ids and "mm-complex64" in ids
    assert torch.float32 in parse_case("add-float32")[0].supported_dtypes("cpu")


def test_expected_lists_name_real_cases() -> None:
    ops = {c.rpartition("-")[0] for c in case_ids()}
    assert set(EXPECTED_ERRORS) <= ops
    assert set(EXPECTED_MISMATCHES) <= set(case_ids())
