"""torch.autocast("flagos") applies CUDA's autocast policy: the same ops, in the same dtypes.

The op lists are PyTorch's own: the ops with an AutocastCUDA kernel in the dispatcher, and the cases of
PyTorch's CUDA autocast tests (torch.testing._internal.autocast_test_lists), run on flagos in float16 as
test_cuda.py runs them on CUDA: each op's result has the expected dtype and equals, bit for bit, the op on
inputs cast by hand outside autocast."""

from __future__ import annotations

import collections.abc
from typing import Any

import pytest
import torch

import torch_fl  # noqa: F401

LISTS = pytest.importorskip("torch.testing._internal.autocast_test_lists").AutocastTestLists


def _ops_with_kernel(key: str) -> set[str]:
    return {name for name in torch._C._dispatch_get_all_op_names()
            if torch._C._dispatch_has_kernel_for_dispatch_key(name, key)}


def test_the_ops_autocast_covers_are_cudas() -> None:
    assert _ops_with_kernel("AutocastPrivateUse1") == _ops_with_kernel("AutocastCUDA")


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, collections.abc.Iterable) and not isinstance(value, str):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, collections.abc.Iterable) and not isinstance(a, str):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _first_dtype(result: Any) -> torch.dtype | None:
    if isinstance(result, torch.Tensor):
        return result.dtype
    if isinstance(result, tuple | list) and result:
        return _first_dtype(result[0])
    return None


def _cases() -> list[Any]:
    """(id, op name, module or None for the Tensor method, args, kwargs, run-as dtype, result dtype)."""
    lists = LISTS(torch.device("flagos"))
    nn, linalg = torch._C._nn, torch._C._linalg
    cases = []

    def add(group: str, entries: list, module: Any, run_as: torch.dtype, *, third: str = "kwargs") -> None:
        for k, entry in enumerate(entries):
            name, args = entry[0], entry[1]
            kwargs: dict[str, Any] = {}
            out = run_as
            if len(entry) > 2:
                if third == "skip":  # torch_fp16's third element: skip on ROCm (and einsum's, which test_cuda skips)
                    if entry[2] is not False:
                        continue
                elif third == "out":
                    out = entry[2]
                else:
                    kwargs = entry[2]
            cases.append(pytest.param(name, module, args, kwargs, run_as, out, id=f"{group}-{name}-{k}"))

    add("torch_fp16", lists.torch_fp16, torch, torch.float16, third="skip")
    add("nn_fp16", lists.nn_fp16, nn, torch.float16)
    add("linalg_fp16", lists.linalg_fp16, linalg, torch.float16)
    add("methods_fp16", lists.methods_fp16, None, torch.float16)
    add("torch_fp32", lists.torch_fp32, torch, torch.float32)
    add("nn_fp32", lists.nn_fp32, nn, torch.float32)
    add("methods_fp32", lists.methods_fp32, None, torch.float32)
    add("torch_need_autocast_promote", lists.torch_need_autocast_promote, torch, torch.float32)
    add("torch_expect_builtin_promote", lists.torch_expect_builtin_promote, torch, torch.float32, third="out")
    add("methods_expect_builtin_promote", lists.methods_expect_builtin_promote, None, torch.float32, third="out")
    return cases


def _call(name: str, module: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    if module is not None:
        return getattr(module, name)(*args, **kwargs)
    return getattr(args[0], name)(*args[1:], **kwargs)


@pytest.mark.filterwarnings("ignore:.*is deprecated:UserWarning")  # chain_matmul's and cross's own notes
@pytest.mark.parametrize(("name", "module", "args", "kwargs", "run_as", "out"), _cases())
def test_cudas_autocast_case(name: str, module: Any, args: Any, kwargs: dict[str, Any], run_as: torch.dtype,
                             out: torch.dtype) -> None:
    try:
        control = _call(name, module, _cast(args, run_as), kwargs)
    except NotImplementedError as e:  # cudnn_convolution: a CUDA library's op, run by the cuda platform only
        pytest.skip(f"{name} has no kernel on this platform: {str(e).splitlines()[0][:80]}")
    with torch.autocast("flagos", dtype=torch.float16):
        result = _call(name, module, args, kwargs)
    if isinstance(result, torch.Tensor):
        assert result.dtype == out and result.device.type == "flagos", (result.dtype, result.device)
    assert type(result) is type(control) and _same(result, control), f"{name}: not what casting by hand gives"


def test_binary_cross_entropy_is_refused_as_on_cuda() -> None:
    p, t = torch.rand(4, 4, device="flagos"), torch.rand(4, 4, device="flagos")
    with torch.autocast("flagos", dtype=torch.float16), pytest.raises(RuntimeError, match="unsafe to autocast"):
        torch.nn.functional.binary_cross_entropy(p, t)
    torch.nn.functional.binary_cross_entropy(p, t)  # outside autocast it runs
