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

from torch_fl import _C, _build_config
from torch_fl.flaggems.kernels import FlagGemsWarning, KernelSet
from torch_fl.flaggems.op_table import FlagGemsTable, FlagGemsUnavailable, load

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


def install(requested: bool, log_dispatch: bool) -> None:
    """Registers the FlagGems kernels the installed routing table asks for (``requested``: it names flaggems)."""
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
    _kernels = KernelSet(routed, fallback_provider(), kernel_type, log_dispatch)
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
        "offered": list(offered.ops),
        "skipped": dict(sorted(offered.skipped.items())),
        "registration_failed": dict(sorted(_kernels.failed.items())) if _kernels else {},
    }
