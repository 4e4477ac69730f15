"""The optimizers' foreach operators on the cuda platform, most of which CUDA's foreach kernels run on the
flagos tensors themselves (no kernel views; UnboxedKernels.cpp, "direct" kernels): every overload of each,
on PyTorch's own foreach OpInfo samples, against native CUDA on the same values, out of place and in place."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
from foreach_cases import results

pytestmark = pytest.mark.gpu
pytest.importorskip("expecttest", reason="PyTorch's OpInfo database needs expecttest")

# The foreach operators of PyTorch's optimizers and gradient clipping (each with its overloads: Scalar, List,
# ScalarList, Tensor).
OPTIMIZER_FOREACH = ("_foreach_add", "_foreach_mul", "_foreach_div", "_foreach_lerp", "_foreach_maximum",
                     "_foreach_addcmul", "_foreach_addcdiv", "_foreach_sqrt", "_foreach_zero", "_foreach_norm")
DTYPES = (torch.float32, torch.bfloat16)
# A short list, and one longer than a CUDA foreach launch takes (its kernels split lists into chunks).
LIST_LENGTHS = (3, 40)
DATABASES = ("foreach_unary_op_db", "foreach_binary_op_db", "foreach_pointwise_op_db", "foreach_reduce_op_db",
             "foreach_other_op_db")


def optimizer_ops() -> list[Any]:
    from torch.testing._internal import common_methods_invocations as database

    return [op for name in DATABASES for op in getattr(database, name) if op.name in OPTIMIZER_FOREACH]


def make_cases() -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every sample of each operator and dtype, as plain data (made on the CPU), for each variant."""
    cases = {}
    for op in optimizer_ops():
        for dtype in DTYPES:
            variants = [op.op.__name__] + ([op.inplace_variant.__name__] if op.inplace_variant else [])
            cases[(op.name, str(dtype))] = [
                {"fn": fn, "inputs": list(s.input), "args": list(s.args), "kwargs": dict(s.kwargs)}
                for n in LIST_LENGTHS for s in op.sample_inputs("cpu", dtype, num_input_tensors=[n])
                for fn in variants]
    return cases


@pytest.fixture(scope="module")
def cases() -> dict[tuple[str, str], list[dict[str, Any]]]:
    return make_cases()


@pytest.fixture(scope="module")
def native(cases: dict) -> dict[tuple[str, str], list[dict[str, Any]]]:
    import reference
    from support.tools import missing

    try:
        python = reference.interpreter()
    except reference.Unavailable as e:
        missing(str(e))
    # One reference call for every case (each call starts an interpreter), regrouped by operator and dtype.
    keyed = [(key, case) for key, group in cases.items() for case in group]
    computed = reference.call("foreach_cases:results", [case for _, case in keyed], "cuda", python=python)
    out: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for (key, _), result in zip(keyed, computed):
        out[key].append(result)
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPTIMIZER_FOREACH)
def test_foreach_matches_native_cuda(name: str, dtype: torch.dtype, cases: dict, native: dict) -> None:
    key = (name, str(dtype))
    assert cases[key], f"{name}: no OpInfo samples for {dtype}"
    for case, expected, actual in zip(cases[key], native[key], results(cases[key], "flagos")):
        where = f"{case['fn']} over {len(case['inputs'])} tensors, args {case['args']!r:.80}, kwargs {case['kwargs']}"
        assert ("error" in actual) == ("error" in expected), f"{where}: native {expected}, flagos {actual}"
        if "error" in expected:
            continue
        assert actual["devices"] in ([], ["flagos"]), f"{where}: results on {actual['devices']}"
        for part in ("out", "written"):
            torch.testing.assert_close(actual[part], expected[part], equal_nan=True, msg=lambda m: f"{where}: {m}")
