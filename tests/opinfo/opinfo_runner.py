"""PyTorch's OpInfo database run on a device and compared against a reference device.

Every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` is a
*case* per dtype of ``DTYPES`` that PyTorch's CPU kernels support.  A case takes a
few of the op's own sample inputs (generated on the CPU from a fixed seed, so
every interpreter and device sees the same values), runs the op forward and,
where the op and dtype support autograd, backward with fixed output gradients,
and returns what it computed as CPU tensors.  ``compare`` then holds the device's
results to the reference's with PyTorch's default per-dtype tolerances
(``torch.testing.assert_close``), NaNs equal, dtypes exact.

The same functions serve the host platform's CI tier (flagos against CPU in one
process) and the GPU tier (flagos against native CUDA, the reference possibly in
another interpreter: ``run_case`` takes only names and plain data, and its
result pickles with ``torch.save``).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD
from torch.utils import _pytree as pytree

DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.float16,
    torch.complex64,
    torch.int64,
    torch.bool,
)
DTYPE_NAMES = {dtype: str(dtype).removeprefix("torch.") for dtype in DTYPES}

# Sample inputs per case: enough to reach the op's main code paths (the
# OpInfo generators put the plain case first, then broadcasting, scalars,
# empty and non-contiguous inputs), few enough for CI.
MAX_SAMPLES = 3
SEED = 1234

# Ops whose output is uninitialised memory: only its metadata is comparable.
UNINITIALISED_OUTPUT = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)


@functools.cache
def op_db() -> dict[str, Any]:
    from torch.testing._internal.common_methods_invocations import op_db as database

    return {op_id(op): op for op in database}


def op_id(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def case_ids(*, inplace: bool = False) -> list[str]:
    """``<op>[.<variant>]-<dtype>`` for every OpInfo and dtype its CPU kernels support (``inplace``: only
    OpInfos with an in-place variant)."""
    out = []
    for name, op in op_db().items():
        if inplace and op.inplace_variant is None:
            continue
        supported = op.supported_dtypes("cpu")
        out.extend(f"{name}-{DTYPE_NAMES[d]}" for d in DTYPES if d in supported)
    return out


def one_dtype_case_ids(keep: Callable[[Any], bool] = lambda _op: True) -> list[str]:
    """One case per OpInfo that ``keep`` accepts: float32 where its CPU kernels have it, else the first of
    DTYPES they have: the tiers that run once per op (fake tensors, out=, non-contiguous samples, forward-mode
    and second-order gradients)."""
    out = []
    for name, op in op_db().items():
        if not keep(op):
            continue
        supported = op.supported_dtypes("cpu")
        dtype = torch.float32 if torch.float32 in supported else next((d for d in DTYPES if d in supported), None)
        if dtype is not None:
            out.append(f"{name}-{DTYPE_NAMES[dtype]}")
    return out


def parse_case(case_id: str) -> tuple[Any, torch.dtype]:
    name, _, dtype_name = case_id.rpartition("-")
    dtype = next(d for d, n in DTYPE_NAMES.items() if n == dtype_name)
    return op_db()[name], dtype


@dataclass
class SampleResult:
    """What one sample computed, as CPU tensors (``None`` where the run raised)."""

    forward: list[Any] | None = None
    grads: list[torch.Tensor | None] | None = None
    error: str | None = None


@dataclass
class CaseResult:
    case_id: str
    samples: list[SampleResult] = field(default_factory=list)

    def to_plain(self) -> dict[str, Any]:
        """Lists, dicts, tensors and strings only: loadable with ``torch.load(weights_only=True)``."""
        return {"case_id": self.case_id,
                "samples": [{"forward": s.forward, "grads": s.grads, "error": s.error} for s in self.samples]}

    @classmethod
    def from_plain(cls, plain: dict[str, Any]) -> CaseResult:
        return cls(plain["case_id"], [SampleResult(**s) for s in plain["samples"]])


def _seed(device_type: str, seed: int) -> None:
    torch.manual_seed(seed)
    module = getattr(torch, device_type, None)
    if device_type != "cpu" and module is not None and hasattr(module, "manual_seed"):
        module.manual_seed(seed)


def _to_device(sample: Any, device: str) -> Any:
    def move(t: torch.Tensor) -> torch.Tensor:
        moved = t.detach().to(device)
        if moved is t or (t.layout == torch.strided and moved.data_ptr() == t.data_ptr()):
            moved = moved.clone()  # each run gets inputs of its own
        return moved.requires_grad_(t.requires_grad)

    return sample.transform(lambda x: move(x) if isinstance(x, torch.Tensor) else x)


def _leaves(tree: Any) -> list[Any]:
    return pytree.tree_leaves(tree)


def _to_cpu(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x._is_zerotensor():  # efficient zero tensors (some gradients) have no memory and do not pickle
            return torch.zeros(x.shape, dtype=x.dtype)
        return x.resolve_conj().resolve_neg().to("cpu")
    if isinstance(x, torch.dtype | torch.device | torch.Size | int | float | complex | bool | str | type(None)):
        return x
    return repr(type(x))


def supports_backward(op: Any, dtype: torch.dtype) -> bool:
    return bool(op.supports_autograd) and dtype in op.supported_backward_dtypes("cpu")


def _samples(op: Any, dtype: torch.dtype) -> list[Any]:
    torch.manual_seed(SEED)
    requires_grad = supports_backward(op, dtype)
    samples = []
    with warnings.catch_warnings(action="ignore"):  # beta-API warnings of the generators themselves (sparse CSR)
        for sample in op.sample_inputs("cpu", dtype, requires_grad=requires_grad):
            samples.append(sample)
            if len(samples) == MAX_SAMPLES:
                break
    return samples


def _error(e: BaseException) -> str:
    first_line = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {first_line}"


def _run_sample(op: Any, sample: Any, device: str, backward: bool, inplace: bool = False) -> SampleResult:
    try:
        moved = _to_device(sample, device)
        _seed(device, SEED)
        if inplace:  # the in-place variant on a copy of the input, without autograd
            with torch.no_grad():
                out = op.inplace_variant(moved.input.clone(), *moved.args, **moved.kwargs)
            return SampleResult(forward=[_to_cpu(x) for x in _leaves(out)])
        out = op(moved.input, *moved.args, **moved.kwargs)
        out = moved.output_process_fn_grad(out)
    except Exception as e:  # noqa: BLE001 - the error is the result; the reference decides whether it counts
        return SampleResult(error=_error(e))
    result = SampleResult(forward=[_to_cpu(x) for x in _leaves(out)])
    if not backward:
        return result
    inputs = [t for t in _leaves((moved.input, moved.args, moved.kwargs)) if isinstance(t, torch.Tensor) and t.requires_grad]
    outputs = [
        t
        for t in _leaves(out)
        if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())
    ]
    if not inputs or not outputs:
        return result
    gen = torch.Generator().manual_seed(SEED + 1)
    grad_outputs = [torch.randn(o.shape, dtype=o.dtype, generator=gen).to(o.device) for o in outputs]
    try:
        grads = torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)
    except Exception as e:  # noqa: BLE001 - as above
        result.error = f"backward: {_error(e)}"
        return result
    result.grads = [None if g is None else _to_cpu(g) for g in grads]
    return result


def second_order_grads(op: Any, sample: Any, device: str) -> list[torch.Tensor | None] | str | None:
    """Gradients of a weighted sum of the sample's first-order gradients (taken with ``create_graph``) with
    respect to its inputs and the output gradients, as CPU tensors; an error as its line; None where the
    sample has no differentiable output or no first-order gradient that depends on the inputs."""
    moved = _to_device(sample, device)
    gen = torch.Generator().manual_seed(SEED + 2)
    with warnings.catch_warnings(action="ignore"):  # as _run_quietly
        try:
            _seed(device, SEED)
            out = moved.output_process_fn_grad(op(moved.input, *moved.args, **moved.kwargs))
            inputs = [t for t in _leaves((moved.input, moved.args, moved.kwargs))
                      if isinstance(t, torch.Tensor) and t.requires_grad]
            outputs = [t for t in _leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad
                       and (t.is_floating_point() or t.is_complex())]
            if not inputs or not outputs:
                return None
            grad_outputs = [torch.randn(o.shape, dtype=o.dtype, generator=gen).to(o.device).requires_grad_()
                            for o in outputs]
            grads = torch.autograd.grad(outputs, inputs, grad_outputs, create_graph=True, allow_unused=True)
            differentiable = [g for g in grads if g is not None and g.requires_grad]
            if not differentiable:
                return None
            weights = [torch.randn(g.shape, dtype=g.dtype, generator=gen).to(g.device) for g in differentiable]
            second = torch.autograd.grad(differentiable, inputs + grad_outputs, weights, allow_unused=True)
        except Exception as e:  # noqa: BLE001 - the error is the result; the reference decides whether it counts
            return _error(e)
    return [None if g is None else _to_cpu(g) for g in second]


def forward_ad(op: Any, sample: Any, device: str) -> list[tuple[torch.Tensor, torch.Tensor | None]] | str:
    """Forward-mode AD (jvp): each tensor result's primal and tangent as CPU tensors, with a fixed random
    tangent for every floating input that requires grad; an error as its line."""
    moved = _to_device(sample, device)
    gen = torch.Generator().manual_seed(SEED + 3)

    def dual(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if t.requires_grad and (t.is_floating_point() or t.is_complex()):
            return fwAD.make_dual(t.detach(), torch.randn(t.shape, dtype=t.dtype, generator=gen).to(t.device))
        return t.detach()

    with warnings.catch_warnings(action="ignore"), fwAD.dual_level():  # as _run_quietly
        try:
            _seed(device, SEED)
            out = op(dual(moved.input), *pytree.tree_map(dual, moved.args), **pytree.tree_map(dual, moved.kwargs))
            unpacked = [fwAD.unpack_dual(o) for o in _leaves(out) if isinstance(o, torch.Tensor)]
        except Exception as e:  # noqa: BLE001 - the error is the result; the reference decides whether it counts
            return _error(e)
        return [(_to_cpu(primal), None if tangent is None else _to_cpu(tangent)) for primal, tangent in unpacked]


def export_samples(case_id: str) -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """The case's sample inputs as plain data (input, args, kwargs), for a reference in another interpreter,
    whose own OpInfo database may generate other values: it computes on exactly these."""
    op, dtype = parse_case(case_id)
    return [(s.input, tuple(s.args), dict(s.kwargs)) for s in _samples(op, dtype)]


def _run_quietly(op: Any, sample: Any, device: str, backward: bool, inplace: bool) -> SampleResult:
    # Ops warn once per process (deprecations, beta APIs): whichever device ran first would see the warning,
    # and the suite turns warnings into errors.  The values are what is compared here.
    with warnings.catch_warnings(action="ignore"):
        return _run_sample(op, sample, device, backward, inplace)


# PyTorch compares two devices' kernels (native CUDA against the CPU) with 1e-3 each (test_ops.py, test_compare_cpu).
CROSS_DEVICE = {"rtol": 1e-3, "atol": 1e-3}


def native_results(ids: list[str], python: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The travelling cases' samples (case id -> export_samples) and, for each, native CUDA's and the CPU's results
    (case id -> {"cuda": plain, "cpu": plain}) from the reference interpreter (tests/gpu/reference.py), one call."""
    import reference  # tests/gpu: present where the GPU tiers run

    payload = {cid: s for cid in ids if travels(s := export_samples(cid))}
    here = Path(__file__).resolve().parent
    return payload, reference.call("opinfo_runner:run_exported", payload, ["cuda", "cpu"], python=python,
                                   paths=[here], timeout=3600)


def travels(samples: Any) -> bool:
    """Whether ``samples`` (export_samples) survive torch.save and torch.load(weights_only=True), the way to a
    reference interpreter; a few OpInfos pass callables or other objects that do not."""
    import io

    buffer = io.BytesIO()
    try:
        torch.save(samples, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception:  # noqa: BLE001 - any failure means the samples cannot travel
        return False
    return True


@dataclass(frozen=True)
class PreparedCase:
    """A case's op, dtype and samples, made on the CPU once; run_prepared() runs them on a device."""

    case_id: str
    op: Any
    backward: bool
    samples: list[Any]


def prepare_case(case_id: str, samples: list[tuple[Any, Any, Any]] | None = None) -> PreparedCase:
    """The case's own samples, or ``samples`` (export_samples) in their place."""
    op, dtype = parse_case(case_id)
    own = _samples(op, dtype)
    if samples is not None:
        from torch.testing._internal.opinfo.core import SampleInput

        # Outputs defined only up to a sign or phase (svd, eig, ...) are made comparable by the sample's own
        # output_process_fn_grad, which depends on the sample's arguments, not on its values.
        own = [
            SampleInput(inp, args=tuple(args), kwargs=dict(kwargs),
                        output_process_fn_grad=own[k].output_process_fn_grad if k < len(own) else (lambda x: x))
            for k, (inp, args, kwargs) in enumerate(samples)
        ]
    return PreparedCase(case_id, op, supports_backward(op, dtype), own)


def noncontiguous(case: PreparedCase) -> PreparedCase:
    """The case with every tensor of its samples made non-contiguous, the same values (test_ops.py's
    test_noncontiguous_samples does this for PyTorch's own backends)."""
    return dataclasses.replace(case, samples=[s.noncontiguous() for s in case.samples])


def run_prepared(case: PreparedCase, device: str, *, inplace: bool = False) -> CaseResult:
    """Runs a prepared case on ``device`` ("cpu", "flagos", "cuda"); results on the CPU.  ``inplace``: the op's
    in-place variant instead, forward only."""
    result = CaseResult(case.case_id)
    for sample in case.samples:
        result.samples.append(_run_quietly(case.op, sample, device, case.backward and not inplace, inplace))
    return result


def run_case(case_id: str, device: str, samples: list[tuple[Any, Any, Any]] | None = None, *,
             inplace: bool = False) -> CaseResult:
    """Runs one case on ``device``, on its own samples or on ``samples`` (export_samples); results on the CPU."""
    return run_prepared(prepare_case(case_id, samples), device, inplace=inplace)


def run_exported(payload: dict[str, list[Any]], devices: list[str]) -> dict[str, dict[str, Any]]:
    """The reference side: every case of ``payload`` (case id -> export_samples) on each device, as plain data.
    A case this interpreter's OpInfo database lacks is left out."""
    known = set(case_ids())
    results = {}
    for cid, samples in payload.items():
        if cid in known:
            case = prepare_case(cid, samples)
            results[cid] = {d: run_prepared(case, d).to_plain() for d in devices}
    return results


def _assert_close(actual: Any, expected: Any, what: str, metadata_only: bool, tol: dict[str, float]) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what}: got {type(actual).__name__}, expected a tensor"
        if metadata_only:
            assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype), what
            return
        torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{what}: {m}", **tol)
    else:
        assert actual == expected or (actual != actual and expected != expected), f"{what}: {actual!r} != {expected!r}"


def assert_all_close(actual: list[Any], expected: list[Any], what: str) -> None:
    """Tensors pairwise equal within PyTorch's default tolerances (NaN equal to NaN); None only where the
    other is None.  ``what`` names them in the message: "sample 0 gradient" -> "sample 0 gradient 2: ..."."""
    assert len(actual) == len(expected), f"{what}: {len(actual)} of them, the CPU has {len(expected)}"
    for j, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert (a is None) == (e is None), f"{what} {j}: defined on one device only"
        if e is not None:
            torch.testing.assert_close(a, e, equal_nan=True, msg=lambda m, j=j: f"{what} {j}: {m}")


def compare(actual: CaseResult, expected: CaseResult, *, rtol: float | None = None, atol: float | None = None) -> None:
    """Raises AssertionError naming the first sample, output or gradient that differs.

    Tolerances are PyTorch's defaults per dtype unless both ``rtol`` and ``atol`` are given (PyTorch compares
    two different devices' kernels, as native CUDA against the CPU, with 1e-3 each: test_ops.py test_compare_cpu)."""
    tol = {"rtol": rtol, "atol": atol} if rtol is not None and atol is not None else {}
    op, _ = parse_case(expected.case_id)
    metadata_only = op.name in UNINITIALISED_OUTPUT
    assert len(actual.samples) == len(expected.samples), "sample counts differ"
    for k, (a, e) in enumerate(zip(actual.samples, expected.samples, strict=True)):
        if e.forward is None:
            continue  # the reference rejects this sample too (an error-input case)
        assert a.forward is not None, f"sample {k}: the reference computed it but the device raised {a.error}"
        assert len(a.forward) == len(e.forward), f"sample {k}: {len(a.forward)} outputs, expected {len(e.forward)}"
        for j, (x, y) in enumerate(zip(a.forward, e.forward, strict=True)):
            _assert_close(x, y, f"sample {k} output {j}", metadata_only, tol)
        if e.grads is None:
            if e.error is None:
                continue
            assert a.error is not None, f"sample {k}: backward raised on the reference only ({e.error})"
            continue
        assert a.grads is not None, f"sample {k}: backward raised on the device only: {a.error}"
        for j, (x, y) in enumerate(zip(a.grads, e.grads, strict=True)):
            if y is None:
                assert x is None or not x.any(), f"sample {k} grad {j}: the reference has none"
                continue
            assert x is not None, f"sample {k} grad {j}: missing on the device"
            _assert_close(x, y, f"sample {k} grad {j}", metadata_only, tol)
