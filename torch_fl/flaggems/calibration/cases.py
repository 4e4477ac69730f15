"""The calls calibration measures: every call of an operator FlagGems offers that PyTorch's OpInfo samples and a
workload step make on flagos, as kernel-device tensors.

The samples and the workload run on flagos, so the calls are the ones the provider is asked for (flagos's own
decompositions: ``native_batch_norm`` where CUDA would pick cuDNN), and so autograd runs on the device it is
made for (with flagos registered, PyTorch's autograd engine takes flagos as the accelerator and asserts on a
backward of CUDA tensors).  A ``TorchDispatchMode`` sees each aten call below autograd, with the arguments the
kernel gets; the calls of the wanted operators are kept, their tensors cloned with their storage, offsets and
strides (expanded gradients stay expanded) onto the kernel device.  A call of an out= operator's functional twin (``mm`` for FlagGems' ``mm.out``)
becomes a call of the out= operator with fresh outputs of the result's shape.  Calls alike in operator,
layouts and other arguments are kept once.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from torch_fl import _C
from torch_fl.flaggems.size_rules import call_size, dtype_name

__all__ = ["Case", "bucket_of", "bucket_range", "clone_call", "opinfo_cases", "resolve_workload", "workload_cases"]

Workload = Callable[[str, torch.dtype], None]


def bucket_of(numel: int) -> int:
    """Size bucket of a call: ``k`` holds element counts in [2**(k-1), 2**k) (``0``: empty)."""
    return numel.bit_length()


def bucket_range(bucket: int) -> tuple[int, int]:
    return (0, 1) if bucket == 0 else (1 << (bucket - 1), 1 << bucket)


@dataclass
class Case:
    """One call to measure."""

    id: str
    """``op|dtype|source|index``: stable across runs (samples are seeded), the key of the state file."""
    op: str
    dtype: str
    source: str
    """``opinfo:<name>[.<variant>]:<phase>`` or ``workload:<name>``."""
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    numel: int = 0

    @property
    def bucket(self) -> int:
        return bucket_of(self.numel)

    def identity(self) -> dict[str, Any]:
        """The fields every result line of this case starts with (``state``)."""
        return {"id": self.id, "op": self.op, "dtype": self.dtype, "source": self.source, "numel": self.numel,
                "bucket": self.bucket}


def _clone(x: Any) -> Any:
    """A tensor with its own copy of ``x``'s storage, and ``x``'s offset, sizes and strides."""
    if not isinstance(x, torch.Tensor):
        return x
    t = x.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if t.layout != torch.strided:
        return t.clone()
    copy = torch.empty(0, dtype=t.dtype, device=t.device)
    copy.set_(t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())
    return copy


def _on_kernel_device(x: Any) -> Any:
    """A flagos tensor as a kernel-device tensor of its own, with its storage layout; anything else as it is."""
    if isinstance(x, torch.Tensor) and x.device.type == "flagos":
        return _clone(_C._kernel_view(x))
    return x


def clone_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Fresh copies of a call's arguments (in-place and out= ops write to them)."""
    return tree_map(_clone, args), tree_map(_clone, kwargs)


def _signature(op: str, args: Any, kwargs: Any) -> str:
    def describe(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return ("T", tuple(x.shape), x.stride(), str(x.dtype), x.device.type)
        return repr(x)
    return repr((op, tree_map(describe, args), tree_map(describe, kwargs)))


def _out_names(overload: Any) -> list[str]:
    return [a.name for a in overload._schema.arguments if a.is_out]


def _twin(op: str) -> Any | None:
    """The functional overload of out= variant ``op`` (``mm.out`` -> ``mm.default``), or None."""
    name, _, overload_name = op.partition(".")
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return None
    target = getattr(packet, overload_name or "default")
    outs = _out_names(target)
    if not outs:
        return None
    inputs = [(a.name, str(a.type)) for a in target._schema.arguments if not a.is_out]
    for other in packet.overloads():
        candidate = getattr(packet, other)
        if candidate is not target and [(a.name, str(a.type)) for a in candidate._schema.arguments] == inputs:
            return candidate
    return None


def _overload(op: str) -> Any:
    name, _, overload_name = op.partition(".")
    return getattr(getattr(torch.ops.aten, name), overload_name or "default")


class _Recorder(TorchDispatchMode):
    """Keeps the calls of the wanted operators, cloned, once per signature."""

    def __init__(self, ops: list[str]) -> None:
        super().__init__()
        self.wanted: dict[Any, tuple[str, list[str]]] = {}
        for op in ops:
            try:
                self.wanted.setdefault(_overload(op), (op, []))
            except AttributeError:
                continue
            twin = _twin(op)
            if twin is not None:
                self.wanted.setdefault(twin, (op, _out_names(_overload(op))))
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        wanted = self.wanted.get(func)
        snapshot = clone_call(args, kwargs) if wanted else None
        result = func(*args, **kwargs)
        if wanted and snapshot is not None:
            op, outs = wanted
            call_args, call_kwargs = snapshot
            results = list(result) if isinstance(result, (tuple, list)) else [result]
            if outs:  # a functional twin's call, made a call of the out= op
                if len(outs) != len(results) or not all(isinstance(r, torch.Tensor) for r in results):
                    return result
                call_kwargs = {**call_kwargs, **{n: torch.empty_like(r) for n, r in zip(outs, results)}}
            key = _signature(op, call_args, call_kwargs)
            if key not in self.seen:
                self.seen.add(key)
                self.calls.append((op, call_args, call_kwargs))
        return result


def _stem(op: str) -> str:
    base = op.partition(".")[0].lstrip("_")
    return base.removesuffix("_backward").removesuffix("_").removesuffix("_backward_data")


def opinfos_for(op: str) -> list[Any]:
    """The OpInfos whose samples may call ``op``: those named like it (``_softmax`` -> ``softmax``,
    ``gelu_backward`` -> ``nn.functional.gelu``)."""
    from torch.testing._internal.common_methods_invocations import op_db

    stem = _stem(op)
    return [info for info in op_db if stem in (info.name, info.aten_name, info.name.rpartition(".")[2])]


def _cases(op: str, dtype: torch.dtype, source: str, calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]],
           start: int) -> Iterator[Case]:
    """Cases of ``op`` among ``calls`` made in ``dtype``; a case's own dtype is its call's (``call_size``)."""
    index = start
    for called, args, kwargs in calls:
        if called != op:
            continue
        first, numel = call_size(args, kwargs)
        if numel == 0:  # nothing to compute: no route depends on it
            continue
        name = dtype_name(first if first is not None else dtype)
        yield Case(f"{op}|{dtype_name(dtype)}|{source}|{index}", op, name, source,
                   tree_map(_on_kernel_device, args), tree_map(_on_kernel_device, kwargs), numel)
        index += 1


def opinfo_cases(op: str, dtype: torch.dtype, device: str, samples: int) -> list[Case]:
    """``op``'s calls in the first ``samples`` OpInfo samples of each OpInfo named like it, forward and (where
    the OpInfo has autograd and the dtype gradients) backward, in ``dtype`` on flagos, for the dtypes the OpInfo
    supports on the kernel device ``device``."""
    found: list[Case] = []
    for info in opinfos_for(op):
        if dtype not in info.supported_dtypes(torch.device(device).type):
            continue
        name = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        grad = info.supports_autograd and (dtype.is_floating_point or dtype.is_complex)
        torch.manual_seed(0)
        try:
            sample_list = list(info.sample_inputs("flagos", dtype, requires_grad=grad))[:samples]
        except Exception:  # noqa: BLE001 -- an OpInfo that cannot make samples here gives no cases
            continue
        for sample in sample_list:
            forward, backward = _Recorder([op]), _Recorder([op])
            try:
                with forward:
                    out = info.op(sample.input, *sample.args, **sample.kwargs)
                outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
                inputs = [t for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0]
                          if isinstance(t, torch.Tensor) and t.requires_grad]
                if grad and outs and inputs:
                    grads = [torch.randn_like(t) for t in outs]
                    with backward:
                        torch.autograd.grad(outs, inputs, grads, allow_unused=True)
            except Exception:  # noqa: BLE001 -- a sample the kernel device refuses is no case
                pass
            for phase, recorder in (("forward", forward), ("backward", backward)):
                source = f"opinfo:{name}:{phase}"
                found.extend(_cases(op, dtype, source, recorder.calls,
                                    sum(1 for c in found if c.source == source)))
    return found


def resolve_workload(spec: str) -> tuple[str, Workload]:
    """``MODULE:FUNC`` (or ``builtin``) -> (name, function(device, dtype))."""
    if spec == "builtin":
        return "builtin-transformer", transformer_step
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"--record-workload: expected MODULE:FUNC, got {spec!r}")
    function = getattr(importlib.import_module(module), name)
    if not callable(function):
        raise ValueError(f"--record-workload: {spec} is not a function")
    return spec, function


def workload_cases(ops: list[str], dtype: torch.dtype, name: str, workload: Workload) -> list[Case]:
    """The calls of ``ops`` one run of ``workload("flagos", dtype)`` makes."""
    recorder = _Recorder(ops)
    torch.manual_seed(0)
    with recorder:
        workload("flagos", dtype)
    found: list[Case] = []
    for op in ops:
        found.extend(_cases(op, dtype, f"workload:{name}", recorder.calls, 0))
    return found


def transformer_step(device: str, dtype: torch.dtype) -> None:
    """The built-in workload: one training step of a small transformer encoder (2 layers, width 256, 4 heads,
    batch 8 x 128 tokens; forward, loss, backward, AdamW)."""
    if not dtype.is_floating_point or dtype == torch.float64:
        return
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(1000, 256), torch.nn.TransformerEncoder(layer, 2),
                                torch.nn.Linear(256, 1000)).to(device=device, dtype=dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 1000, (8, 128), device=device)
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
