"""The flagos device a ``torch.flagos`` function is given (an index, a ``torch.device``, a string, or None
for the current device), as the index ``torch_fl._C`` takes."""

from __future__ import annotations

from typing import Union

import torch

from torch_fl import _C

DeviceLike = Union[torch.device, str, int, None]


def device_index(device: DeviceLike = None) -> int:
    """Device index of ``device`` (None: the current device)."""
    if device is None:
        return int(_C._current_device())
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "flagos":
        raise ValueError(f"expected a flagos device, got {d}")
    return int(_C._current_device()) if d.index is None else d.index
