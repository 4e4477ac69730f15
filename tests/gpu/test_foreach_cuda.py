"""The optimizers' foreach operators on the cuda platform, most of which CUDA's foreach kernels run on the
flagos tensors themselves (no kernel views; UnboxedKernels.cpp, "direct" kernels): PyTorch's own foreach
OpInfo samples, every overload of each, against the CPU's results, out of place and in place."""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

pytestmark = pytest.mark.gpu

# The foreach operators of PyTorch's optimizers and gradient clipping (each with its overloads: Scalar, List,
# ScalarList, Tensor).
OPTIMIZER_FOREACH = ("_foreach_add", "_foreach_mul", "_foreach_div", "_foreach_lerp", "_foreach_maximum",
                     "_foreach_addcmul", "_foreach_addcdiv", "_foreach_sqrt", "_foreach_zero", "_foreach_norm")
DTYPES = (torch.float32, torch.bfloat16)
# A short list, and one longer than a CUDA foreach launch takes (its kernels split lists into chunks).
LIST_LENGTHS = (3, 40)


def foreach_ops() -> list:
    from torch.testing._internal import common_methods_invocations as database

    ops = [op for name in ("foreach_unary_op_db", "foreach_binary_op_db", "foreach_pointwise_op_db",
                           "foreach_reduce_op_db", "foreach_other_op_db") for op in getattr(database, name)]
    return [pytest.param(op, id=op.name) for op in ops if op.name in OPTIMIZER_FOREACH]


def on(device: str, tree: object) -> object:
    return pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), tree)


def run(fn, sample, device: str) -> tuple[object, object]:
    """`fn` over the sample's tensors on `device`: what it returned, and its first list after the call."""
    first = on(device, [t.clone() for t in sample.input])
    out = fn(first, *on(device, sample.args), **on(device, sample.kwargs))
    return out, first


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", foreach_ops())
def test_foreach_matches_cpu(op, dtype: torch.dtype) -> None:
    if dtype not in op.supported_dtypes("cpu"):
        pytest.skip(f"{op.name} has no CPU kernel for {dtype}")
    compared = 0
    for n in LIST_LENGTHS:
        for sample in op.sample_inputs("cpu", dtype, num_input_tensors=[n]):
            variants = [(op.op, False)] + ([(op.inplace_variant, True)] if op.inplace_variant else [])
            for fn, inplace in variants:
                try:
                    expected = run(fn, sample, "cpu")
                except (RuntimeError, TypeError, ValueError):
                    continue  # an overload the CPU refuses for these arguments: nothing to compare
                actual = run(fn, sample, "flagos")
                result, written = actual
                expected_result, expected_written = expected
                flat = [t for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
                assert all(t.device.type == "flagos" for t in flat), f"{op.name}: a result is not on flagos"
                if not inplace:
                    torch.testing.assert_close(on("cpu", result), expected_result, equal_nan=True)
                torch.testing.assert_close(on("cpu", written), expected_written, equal_nan=True)
                compared += 1
    assert compared > 0
