"""The flaggems provider of this process: the FlagGems table read once, the kernels of the routed operators.

``routing.install`` calls ``install`` after every table it sets: the previous kernels are unregistered,
and when the table routes anything to ``flaggems`` the installed flag_gems is read (once per process) and
a kernel is registered for each operator it offers whose route now says ``flaggems``; the C++ routing then
learns that set (``_C._set_flaggems_ops``), so ``torch_fl.route(op)`` reports ``flaggems`` exactly for the
operators that have a FlagGems kernel.

Where the provider runs: a platform whose kernel views are tensors of a device type FlagGems registers
for: ``cuda`` (CUDA tensors; FlagGems' Triton kernels, a CUDA build of torch) and ``host`` (CPU tensors;
a FlagGems that registers for the CPU, as the test suite's stand-in does).  The installed flag_gems says
which device it serves (the dispatch key it registers for); a mismatch makes the provider unavailable,
with the reason, and the operators fall back to the platform's kernel-device provider.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch

from torch_fl import _C, _build_config
from torch_fl.flaggems.kernels import FlagGemsWarning, KernelSet
from torch_fl.flaggems.op_table import FlagGemsTable, FlagGemsUnavailable, load
from torch_fl.flaggems.size_rules import SizeRule

__all__ = ["fallback_provider", "install", "kernel_device_type", "status", "table"]

# The kernel views' device type, and the provider running PyTorch's kernels on them (named by the runtime
# family): the platform table's facts, from the recipe through the build config.
_KERNEL_DEVICE = (_build_config.KERNEL_DEVICE, _build_config.RUNTIME) if _build_config.KERNEL_DEVICE != "none" else None

_table: FlagGemsTable | None = None
_unavailable: str | None = None
_kernels: KernelSet | None = None
_warned_unavailable = False


def kernel_device_type() -> str | None:
    """The device type of flagos kernel views on this platform, or None where FlagGems cannot serve it."""
    return _KERNEL_DEVICE[0] if _KERNEL_DEVICE else None


def fallback_provider() -> str:
    """Where an operator FlagGems cannot run goes: the platform's kernel-device provider."""
    return _KERNEL_DEVICE[1] if _KERNEL_DEVICE else "cpu"


def table() -> FlagGemsTable:
    """The installed flag_gems' operator table, read once; raises FlagGemsUnavailable with the reason."""
    global _table, _unavailable
    if _table is not None:
        return _table
    if _unavailable is not None:
        raise FlagGemsUnavailable(_unavailable)
    device = kernel_device_type()
    try:
        if device is None:
            raise FlagGemsUnavailable(f"the flaggems provider runs where a torch device shares flagos memory, "
                                      f"and the {_C._platform()} runtime has none")
        _table = load(device)
    except FlagGemsUnavailable as e:
        _unavailable = str(e)
        raise
    return _table


def _functional_twin(op: str, candidate: str) -> bool:
    """Whether ``candidate`` (``mm.default``) is the functional overload of out= variant ``op`` (``mm.out``): the
    C++ routing lets an entry for the one route the other (csrc/aten/routing/Routing.cpp, ``is_functional_twin``)."""
    name, _, overload = op.partition(".")
    other_name, _, other_overload = candidate.partition(".")
    if name != other_name or overload == other_overload:
        return False
    try:
        schema = torch._C._get_schema(f"aten::{name}", overload)
        other = torch._C._get_schema(f"aten::{name}", other_overload)
    except RuntimeError:
        return False
    inputs = [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]
    return schema.is_mutable and len(inputs) < len(schema.arguments) and inputs == [
        (a.name, str(a.type)) for a in other.arguments]


def rules_for(op: str, rules: Mapping[str, tuple[SizeRule, ...]]) -> tuple[SizeRule, ...] | None:
    """The size rules of FlagGems' ``op`` (``add.Tensor``), found as the C++ routing finds its entry: the overload,
    its functional twin, the op's name; None: every call goes to FlagGems."""
    if op in rules:
        return rules[op]
    name = op.partition(".")[0]
    for key, value in rules.items():
        if "." in key and _functional_twin(op, key):
            return value
    return rules.get(name)


def install(requested: bool, log_dispatch: bool, rules: Mapping[str, tuple[SizeRule, ...]] | None = None) -> None:
    """Registers the FlagGems kernels the installed routing table asks for (``requested``: it names flaggems);
    ``rules``: the per-shape rules of ops routed to flaggems with a condition."""
    global _kernels, _warned_unavailable
    if _kernels is not None:
        _kernels.close()
        _kernels = None
    _C._set_flaggems_ops([])
    if not requested:
        return
    try:
        offered = table()
    except FlagGemsUnavailable as e:
        if not _warned_unavailable:
            _warned_unavailable = True
            warnings.warn(f"flagos: the routing table names provider 'flaggems', but {e}; its operators run on "
                          f"provider '{fallback_provider()}'", FlagGemsWarning, stacklevel=3)
        return
    # Offer every op first, so that each route says whether the table sends it to FlagGems.
    _C._set_flaggems_ops(list(offered.ops))
    routed = [entry for entry in offered.routable if _C._route(entry.op)[1] == "flaggems"]
    kernel_type = kernel_device_type()
    assert kernel_type is not None  # table() succeeded
    _kernels = KernelSet(routed, fallback_provider(), kernel_type, log_dispatch,
                         {entry.op: found for entry in routed if (found := rules_for(entry.op, rules or {})) is not None})
    _C._set_flaggems_ops(list(_kernels.ops))


def status() -> dict[str, object]:
    """What the provider does in this process, as plain data (``python -m torch_fl.flaggems`` prints it)."""
    try:
        offered = table()
    except FlagGemsUnavailable as e:
        return {"available": False, "reason": str(e), "routed": []}
    return {
        "available": True,
        "flag_gems": offered.version,
        "dispatch_key": offered.dispatch_key,
        "routed": sorted(_kernels.ops) if _kernels else [],
        "size_rules": {op: [str(rule) for rule in rules] for op, rules in sorted(_kernels.rules.items())}
        if _kernels else {},
        "offered": list(offered.ops),
        "skipped": dict(sorted(offered.skipped.items())),
        "registration_failed": dict(sorted(_kernels.failed.items())) if _kernels else {},
        "table": _table_facts(),
        "reasons": {op: _reason(op) for op in sorted({*offered.ops, *offered.skipped})},
    }


def _table_facts() -> dict[str, object]:
    from torch_fl import routing
    from torch_fl.flaggems import evidence

    installed = routing.installed_table()
    if installed is None:
        return {}
    document = evidence.load(installed.evidence) if installed.evidence else None
    return {"source": installed.source, "evidence": installed.evidence,
            "calibrated": bool(document and document.get("calibrated")),
            "environment": document.get("environment") if document else None}


def _reason(op: str) -> dict[str, str]:
    from torch_fl import routing

    route = routing.route(op)
    return {"provider": route.effective, "reason": route.reason}
