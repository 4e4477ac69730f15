"""PyTorch's ModuleInfo database (torch.nn modules, as test_modules.py tests them) on flagos against the CPU.

Every ModuleInfo, float32 (float64 where it has no float32), its first module inputs: the module is built
once, copied to each device, and run forward; outputs, and the gradients of a fixed random weighting of its
differentiable outputs with respect to its parameters and inputs, must equal the CPU's within PyTorch's
default tolerances.  Modules whose training and evaluation modes differ (dropout, batch norm) are run in
both.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest

pytest.importorskip("expecttest", reason="PyTorch's test databases need expecttest (ci/requirements-test.txt)")

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402
from torch.testing._internal.common_modules import module_db  # noqa: E402

import torch_fl  # noqa: E402,F401  (registers the device)

from opinfo_runner import _error, _to_cpu, assert_all_close  # noqa: E402

pytestmark = pytest.mark.opinfo

MAX_INPUTS = 3


def _dtype(info: Any) -> torch.dtype:
    return torch.float32 if torch.float32 in info.dtypes else torch.float64


def _params() -> list[object]:
    params = []
    for info in module_db:
        for training in ([True, False] if info.train_and_eval_differ else [True]):
            mode = "train" if training else "eval"
            params.append(pytest.param(info, training, id=f"{info.formatted_name}-{mode}"))
    return params


def _run(module: torch.nn.Module, forward_input: Any, device: str) -> tuple[list[Any], list[Any] | None] | str:
    """Outputs and gradients (parameters, then tensor inputs) as CPU tensors, or the error as its line."""
    module = module.to(device)

    def move(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        return x.detach().to(device).requires_grad_(x.requires_grad)

    args, kwargs = pytree.tree_map(move, forward_input.args), pytree.tree_map(move, forward_input.kwargs)
    torch.manual_seed(1)
    try:
        out = module(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the error is the result; the CPU's decides whether it counts
        return _error(e)
    outputs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
    weighted = [o for o in outputs if o.requires_grad and (o.is_floating_point() or o.is_complex())]
    if not weighted:
        return [_to_cpu(o) for o in outputs], None
    gen = torch.Generator().manual_seed(2)
    try:
        sum((o * torch.randn(o.shape, dtype=o.dtype, generator=gen).to(o.device)).sum() for o in weighted).backward()
    except Exception as e:  # noqa: BLE001
        return f"backward: {_error(e)}"
    tensors = [*module.parameters(), *[x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]]
    return [_to_cpu(o) for o in outputs], [None if t.grad is None else _to_cpu(t.grad) for t in tensors]


@pytest.mark.parametrize(("info", "training"), _params())
def test_module_matches_cpu(info: Any, training: bool) -> None:
    dtype = _dtype(info)
    with warnings.catch_warnings(action="ignore"):  # modules and their inputs warn once per process (deprecations)
        inputs = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=True, training=training)
        compared = 0
        for k, module_input in enumerate(inputs[:MAX_INPUTS]):
            if module_input.forward_input is None:
                continue
            torch.manual_seed(0)
            construct = module_input.constructor_input
            module = info.module_cls(*construct.args, **construct.kwargs).to(dtype).train(training)
            expected = _run(copy.deepcopy(module), module_input.forward_input, "cpu")
            if isinstance(expected, str):
                continue  # an input the CPU rejects
            actual = _run(module, module_input.forward_input, "flagos")
            assert not isinstance(actual, str), f"input {k}: the CPU ran it, flagos raised {actual}"
            assert_all_close(actual[0], expected[0], f"input {k} output")
            assert (actual[1] is None) == (expected[1] is None), f"input {k}: gradients on one device only"
            assert_all_close(actual[1] or [], expected[1] or [], f"input {k} gradient")
            compared += 1
    if not compared:
        pytest.skip("the CPU rejects every module input")
