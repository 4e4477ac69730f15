"""The operator table of the installed ``flag_gems``: which aten operators it offers, and which of them flagos routes.

The table is read from FlagGems' own registration routine, ``flag_gems.enable(lib=...)``, handed a
recorder instead of a ``torch.library.Library``: whatever the installed version registers (its version
conditions, its vendor's exclusions, its C++-patched ops left out) is what the recorder sees, with the
function it would register.  Nothing is registered for the kernel device itself, so native CUDA (or CPU)
kernels stay PyTorch's, and a FlagGems function that calls ``torch.<op>`` on a kernel view reaches them,
never FlagGems or flagos again.  No hand-kept list: an operator missing from the installed FlagGems
cannot be routed to it.

Of what FlagGems offers, flagos routes the operators whose semantics survive a per-device kernel; the
others are listed with the reason (``FlagGemsTable.skipped``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["FlagGemsEntry", "FlagGemsTable", "FlagGemsUnavailable", "load"]

# Ops that move data between devices: they stay with flagos's own copy kernels.
_TRANSFERS = frozenset({"copy_", "_copy_from", "_copy_from_and_resize"})


class FlagGemsUnavailable(RuntimeError):
    """flag_gems cannot serve flagos here (not installed, fails to import, targets another device)."""


@dataclass(frozen=True)
class FlagGemsEntry:
    op: str
    """The aten operator, ``add.Tensor`` or ``abs`` (overload-less)."""
    function: Callable[..., Any]
    """The FlagGems function its registration names."""


@dataclass(frozen=True)
class FlagGemsTable:
    version: str
    """The installed flag_gems version the table was read from."""
    dispatch_key: str
    """The dispatch key FlagGems registers for (``CUDA``): the device type its kernels take."""
    routable: tuple[FlagGemsEntry, ...]
    """Operators flagos may route to FlagGems, in FlagGems' order."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Operators FlagGems offers that flagos does not route, with the reason."""

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(e.op for e in self.routable)


class _Recorder:
    """Stands in for the ``torch.library.Library`` that ``flag_gems.enable`` registers into."""

    def __init__(self) -> None:
        self.registered: list[tuple[str, Any, str]] = []

    def impl(self, op_name: str, fn: Any, dispatch_key: str = "", **_: Any) -> None:
        self.registered.append((str(op_name), fn, dispatch_key))


def _import(kernel_device: str) -> Any:
    if kernel_device == "cuda":
        if not torch.cuda._is_compiled():
            raise FlagGemsUnavailable(
                "FlagGems launches Triton kernels through torch.cuda, and this torch is CPU-only; install the torch_fl "
                "wheel built against the CUDA torch (bundle kind 'none')")
        # The GPU behind the cuda platform is NVIDIA's: FlagGems would otherwise probe every vendor's
        # command-line tool in subprocesses at import to find out (runtime/backend/device.py).
        os.environ.setdefault("GEMS_VENDOR", "nvidia")
    try:
        with warnings.catch_warnings():
            # Shown, never raised: a warnings-as-errors setting of the user's must not make the provider unavailable.
            warnings.simplefilter("default")
            return importlib.import_module("flag_gems")
    except ModuleNotFoundError as e:
        advice = _install_advice()
        if e.name != "flag_gems":
            raise FlagGemsUnavailable(f"flag_gems fails to import: {e}; {advice}") from None
        raise FlagGemsUnavailable(f"flag_gems is not installed; {advice}") from None
    except Exception as e:  # noqa: BLE001 -- any import failure makes the provider unavailable, named
        raise FlagGemsUnavailable(f"flag_gems fails to import: {type(e).__name__}: {e}") from None


def _install_advice() -> str:
    from torch_fl import _build_config
    from torch_fl.installation import flaggems_install_advice

    return flaggems_install_advice(_build_config.PLATFORM)


def _version(module: Any) -> str:
    try:
        return importlib.metadata.version("flag_gems")
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(module, "__version__", "unknown"))


def _schema(op: str) -> Any:
    name, _, overload = op.partition(".")
    return torch._C._get_schema(f"aten::{name}", overload)


def _skip_reason(op: str, fn: Any, all_ops: set[str]) -> str | None:
    """Why flagos does not route ``op`` to FlagGems, or None."""
    if not callable(fn):
        return f"flag_gems names no function for it ({fn!r})"
    if f"aten::{op}" not in all_ops:
        return f"not an operator of torch {torch.__version__}"
    schema = _schema(op)
    name, _, overload = op.partition(".")
    packet = getattr(torch.ops.aten, name)
    overload_op = getattr(packet, overload or "default")
    types = [str(a.type) for a in schema.arguments]
    if not any("Tensor" in t for t in types):
        return "a factory: it allocates on the flagos device itself"
    if any("Generator" in t for t in types) or torch.Tag.nondeterministic_seeded in overload_op.tags:
        return "random: its generator lives on the flagos device"
    if name in _TRANSFERS:
        return "a copy across devices: flagos's own copy kernels"
    # "Device?" on some torch versions, "Optional[Device]" on others.
    if any("Device" in t for t in types):
        return "chooses its result's device"
    if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        return "returns a view: flagos builds views itself"
    if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", "CompositeImplicitAutograd"):
        # A backend kernel for a CompositeImplicitAutograd op replaces its decomposition below autograd, which
        # then has no derivative for it (backward would pass no gradient); its parts are routed instead.
        return "decomposes (CompositeImplicitAutograd): a device kernel would cut autograd"
    return None


def load(kernel_device: str) -> FlagGemsTable:
    """Imports flag_gems and reads its operator table; ``kernel_device`` is the type of flagos kernel views."""
    module = _import(kernel_device)
    version = _version(module)
    enable = getattr(module, "enable", None)
    if not callable(enable):
        raise FlagGemsUnavailable(f"flag_gems {version} has no enable(); use a FlagGems release that has one")
    recorder = _Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its notes about registration settings are not the user's business here
        try:
            enable(lib=recorder, unused=[])
        except Exception as e:  # noqa: BLE001
            raise FlagGemsUnavailable(f"flag_gems {version}'s enable() fails: {type(e).__name__}: {e}") from None
    keys = {key for _, _, key in recorder.registered}
    expected = kernel_device.upper()
    if keys and keys != {expected}:
        raise FlagGemsUnavailable(
            f"flag_gems {version} registers for {', '.join(sorted(keys))}, but flagos kernel views here are "
            f"{kernel_device} tensors ({expected}); install the FlagGems build for this device")
    if not recorder.registered:
        raise FlagGemsUnavailable(f"flag_gems {version} offers no operators here")
    all_ops = set(torch._C._dispatch_get_all_op_names())
    # A later registration of the same op replaces an earlier one, as in torch.library.
    functions = {op.removeprefix("aten::"): fn for op, fn, _ in recorder.registered}
    routable: list[FlagGemsEntry] = []
    skipped: dict[str, str] = {}
    for op, fn in functions.items():
        reason = _skip_reason(op, fn, all_ops)
        if reason is None:
            routable.append(FlagGemsEntry(op, fn))
        else:
            skipped[op] = reason
    return FlagGemsTable(version, expected, tuple(routable), skipped)
