"""float8 matmuls where the hardware has no FP8 units: the platform table's ``fp8 = emulated``.

A platform whose recipe says ``fp8 = "native"`` (cuda on Hopper and later) runs ``aten::_scaled_mm`` on its
kernel device's own kernel (cuBLASLt's FP8 GEMM).  One that says ``"emulated"`` (host, ppu) gets flagos
kernels of its own for ``_scaled_mm`` and ``_scaled_mm.out`` (``scaled_mm.py``): the float8 operands are
widened to float32 (exactly: every float8 value is a float32 value), multiplied with float32 accumulation on
the kernel device, scaled, biased, and rounded once to the output dtype, float8 included.  That is what an
FP8 tensor core computes, less its reduced-precision fast accumulation.  Casts to and from float8 need no
emulation: they are rounding arithmetic that the kernel devices (CPU, CUDA at any compute capability)
carry out in software.

``FLAGOS_FP8`` (``native`` or ``emulated``) overrides the platform table, for example to compare the
emulation with a GPU's FP8 units.
"""

from __future__ import annotations

import os

from torch_fl import _build_config
from torch_fl.routing import RoutingError

__all__ = ["MODES", "active_mode", "install", "mode_from_env"]

MODES = ("native", "emulated")
_active: str | None = None
_library = None  # the torch.library.Library holding the emulated kernels, kept alive while installed


def mode_from_env() -> str:
    """The float8 mode this process runs: FLAGOS_FP8, else the platform table's; RoutingError for a bad value."""
    value = os.environ.get("FLAGOS_FP8")
    if value is None:
        return _build_config.FP8
    if value not in MODES:
        raise RoutingError(f"FLAGOS_FP8={value!r} is not a float8 mode; use one of {', '.join(MODES)}", "FLAGOS_FP8")
    return value


def install(mode: str) -> None:
    """Registers the emulated float8 kernels for flagos when ``mode`` is ``emulated`` (once per process)."""
    global _active, _library
    _active = mode
    if mode != "emulated" or _library is not None:
        return
    from torch_fl.fp8 import scaled_mm

    _library = scaled_mm.register()


def active_mode() -> str | None:
    """``native`` or ``emulated`` once routing installed the float8 kernels, else None."""
    return _active
