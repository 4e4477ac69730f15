"""Facts about a flagos device, in ``torch.cuda``'s shapes: properties, capability, bf16, utilization.

Where a platform's flagos device *is* a device of its kernel device (the platform table's
``kernel_device``: on the cuda runtime, flagos device ``i`` is CUDA device ``i``), the answers are that
torch device module's.  Elsewhere (the host platform's
emulated devices) a ``DeviceProperties`` describes the device with the fields the runtime knows;
``major``/``minor`` are absent, as on a CPU: there is no compute capability to report, and
``get_device_capability`` answers ``(0, 0)``.  Inductor (``torch_fl.compile``) reads the same
properties.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from torch_fl import _build_config, _C

__all__ = ["DeviceProperties", "device_capability", "device_properties", "is_bf16_supported", "kernel_device_module",
           "utilization"]



@dataclass(frozen=True)
class DeviceProperties:
    """An emulated flagos device, described with what its runtime knows."""

    name: str
    """The device's name, as ``torch.flagos.get_device_name`` gives it."""
    total_memory: int
    """Bytes of device memory, as the runtime reports it (``torch.flagos.mem_get_info(i)[1]``)."""
    multi_processor_count: int
    """Compute units: the host CPUs this process may run on (the emulated device's kernels are CPU kernels)."""
    type: str = "flagos"
    """The device type, for code that checks ``props.type``."""


def kernel_device_module() -> ModuleType | None:
    """``torch.cuda`` where the flagos devices are that module's devices and this torch can ask it, else None."""
    # The host runtime's kernel device is the CPU, whose module describes no devices (no properties).
    module: ModuleType | None = getattr(torch, _build_config.KERNEL_DEVICE, None)
    if module is None or not hasattr(module, "get_device_properties"):
        return None
    # A stock torch+cpu beside the cuda-assets wheel has no CUDA Python bindings to ask.
    compiled = getattr(module, "_is_compiled", lambda: False)()
    return module if compiled else None


def device_properties(index: int, name: str) -> Any:
    module = kernel_device_module()
    if module is not None:
        return module.get_device_properties(index)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return DeviceProperties(name=name, total_memory=_C._mem_get_info(index)[1], multi_processor_count=cpus)


def device_capability(index: int, name: str) -> tuple[int, int]:
    props = device_properties(index, name)
    return (getattr(props, "major", 0), getattr(props, "minor", 0))


def is_bf16_supported(including_emulation: bool = True) -> bool:
    module = kernel_device_module()
    if module is not None:
        return bool(module.is_bf16_supported(including_emulation))
    # The emulated device's kernels are PyTorch's CPU kernels, which compute bfloat16.
    return True


def utilization(index: int) -> int:
    """Percent of time a kernel ran over the last sample period, where the runtime reports it."""
    module = kernel_device_module()
    if module is None:
        raise RuntimeError(f"torch.flagos.utilization: the {_C._platform()} runtime does not report device "
                           "utilization; measure the process's CPU time instead")
    return int(module.utilization(index))
