"""out= variants across PyTorch's OpInfo database: flagos writes the tensors it is given as the CPU does.

For every OpInfo with an out= variant (one dtype per op, its first samples), the out= call runs on the CPU
and on flagos with three kinds of ``out``, as PyTorch's own test_out does: one of the right shape, an empty
one (the op resizes it), and a window of a larger tensor (every other element of the last dimension of one
twice as wide).  Each ``out``, and the tensor around a window, is filled with the same value on both devices
first.  flagos must return the tensors it was given where the CPU does, leave them with the CPU's sizes and
strides, and leave the same values in them and around them (some CPU kernels write past a window's strides:
flagos must do what the CPU does, nothing else).  Samples the CPU rejects are not compared.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

pytest.importorskip("expecttest", reason="PyTorch's OpInfo database needs expecttest (ci/requirements-test.txt)")

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

import torch_fl  # noqa: E402,F401  (registers the device)

from expected_failures import EXPECTED_ERRORS  # noqa: E402
from opinfo_runner import (  # noqa: E402
    SEED,
    UNINITIALISED_OUTPUT,
    _error,
    _samples,
    _seed,
    _to_cpu,
    _to_device,
    one_dtype_case_ids,
    op_id,
    parse_case,
)

pytestmark = pytest.mark.opinfo

KINDS = ("right shape", "empty", "window")
FILL = 7


def _out_tensor(like: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, the tensor whose memory it is), filled with FILL."""
    if kind == "empty":
        out = torch.full((0,), FILL, dtype=like.dtype, device=like.device)
        return out, out
    if kind == "right shape" or like.dim() == 0:
        out = torch.full(like.shape, FILL, dtype=like.dtype, device=like.device)
        return out, out
    base = torch.full((*like.shape[:-1], like.shape[-1] * 2), FILL, dtype=like.dtype, device=like.device)
    return base[..., ::2], base


def _calls_with_out(op: Any, sample: Any, device: str) -> dict[str, tuple[str, Any]]:
    """Per kind of ``out``: ("ok", (returned the outs themselves, [(sizes, strides, out values, base values)]))
    or (what went wrong, its detail).  The functional call, which gives the outs' shapes, runs once."""
    moved = _to_device(sample, device)
    with torch.no_grad(), warnings.catch_warnings(action="ignore"):  # ops warn once per process
        try:
            _seed(device, SEED)
            leaves = pytree.tree_leaves(op(moved.input, *moved.args, **moved.kwargs))
        except Exception as e:  # noqa: BLE001 - the outcome is the result
            return dict.fromkeys(KINDS, ("error", _error(e)))
        if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
            return dict.fromkeys(KINDS, ("no tensor results", ""))
        outcomes = {}
        for kind in KINDS:
            pairs = [_out_tensor(t, kind) for t in leaves]
            outs = [out for out, _ in pairs]
            try:
                _seed(device, SEED)
                returned = pytree.tree_leaves(
                    op(moved.input, *moved.args, **moved.kwargs, out=outs[0] if len(outs) == 1 else tuple(outs)))
            except Exception as e:  # noqa: BLE001
                outcomes[kind] = ("out= error", _error(e))
                continue
            same = len(returned) == len(outs) and all(r is o for r, o in zip(returned, outs))
            outcomes[kind] = ("ok", (same, [(tuple(out.shape), out.stride(), _to_cpu(out), _to_cpu(base))
                                            for out, base in pairs]))
    return outcomes


@pytest.mark.parametrize("case_id", one_dtype_case_ids(lambda op: op.supports_out))
def test_out_variant_writes_what_the_cpu_writes(case_id: str) -> None:
    op, dtype = parse_case(case_id)
    expected_error = EXPECTED_ERRORS.get(op_id(op))
    compared = 0
    for k, sample in enumerate(_samples(op, dtype)):
        cpu_calls = _calls_with_out(op, sample, "cpu")
        if all(outcome != "ok" for outcome, _ in cpu_calls.values()):
            continue
        flagos_calls = _calls_with_out(op, sample, "flagos")
        for kind in KINDS:
            cpu_outcome, cpu = cpu_calls[kind]
            if cpu_outcome != "ok":
                continue
            outcome, flagos = flagos_calls[kind]
            where = f"sample {k}, {kind} out"
            if expected_error is not None:
                assert outcome in ("error", "out= error") and expected_error[0] in flagos, f"{where}: {flagos}"
                continue
            assert outcome == "ok", f"{where}: {outcome}: {flagos}"
            assert flagos[0] == cpu[0], f"{where}: the CPU returns the given outs: {cpu[0]}, flagos: {flagos[0]}"
            for j, ((sizes, strides, out, base), (cpu_sizes, cpu_strides, cpu_out, cpu_base)) in enumerate(
                    zip(flagos[1], cpu[1], strict=True)):
                assert (sizes, strides) == (cpu_sizes, cpu_strides), f"{where}, result {j}: sizes and strides"
                if op.name in UNINITIALISED_OUTPUT:
                    continue
                torch.testing.assert_close(out, cpu_out, equal_nan=True, msg=lambda m, j=j: f"{where}, out {j}: {m}")
                torch.testing.assert_close(base, cpu_base, equal_nan=True,
                                           msg=lambda m, j=j: f"{where}, around out {j}: {m}")
            compared += 1
    if not compared:
        pytest.skip("the CPU rejects every sample's out= call")
