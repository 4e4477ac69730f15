"""The route tables shipped with torch_fl (``torch_fl/configs/flaggems_routes_<flag_gems>_<device>.conf``).

``FLAGOS_USE_FLAGGEMS=1`` without a table of the user's (``FLAGOS_BACKEND_CONFIG``) takes the shipped table
whose evidence was calibrated with this process's flag_gems, Triton and device.  Where none matches, every
operator FlagGems offers goes to it unverified, as before there were tables, with one warning that names
the way out: calibrate, or keep the kernel device's provider.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from torch_fl.flaggems import evidence

__all__ = ["select", "tables"]

_CONFIG_DIR = Path(__file__).parent.parent / "configs"
_warned = False


def tables() -> list[Path]:
    """The shipped route tables, by name."""
    return sorted(_CONFIG_DIR.glob("flaggems_routes_*.conf"))


def select(platform: str) -> Path | None:
    """The shipped table calibrated for this process's flag_gems, Triton and device; None (and one warning per
    process) where there is none.  None without a warning where flag_gems cannot serve flagos: the provider
    says why when it installs."""
    global _warned
    from torch_fl.flaggems import provider
    from torch_fl.flaggems.kernels import FlagGemsWarning
    from torch_fl.flaggems.op_table import FlagGemsUnavailable

    try:
        offered = provider.table()
    except FlagGemsUnavailable:
        return None
    kernel_type = provider.kernel_device_type()
    assert kernel_type is not None  # table() succeeded
    here = evidence.environment(platform, kernel_type, offered.version)
    uncalibrated = None
    for path in tables():
        found = evidence.load(str(path.with_name(path.name.removesuffix(".conf") + ".evidence.json")))
        if found is None or evidence.matches(found, here):
            continue
        if found.get("calibrated") is True:
            return path
        uncalibrated = path
    if not _warned:
        _warned = True
        note = f" ({uncalibrated.name} is not calibrated yet)" if uncalibrated else ""
        warnings.warn(
            f"flagos: FLAGOS_USE_FLAGGEMS=1 routes every operator flag_gems {offered.version} offers to it unverified: "
            f"no shipped route table was calibrated with flag_gems {here['flag_gems']}, triton {here['triton']} on "
            f"{here['device']}{note}; run `python -m torch_fl.flaggems calibrate`, or keep provider "
            f"{provider.fallback_provider()}", FlagGemsWarning, stacklevel=2)
    return None
