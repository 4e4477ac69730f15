"""Inductor's code generation for flagos on the cuda platform: its Triton backend.

On the cuda platform a flagos device *is* the CUDA device of the same index, and
a flagos stream is the CUDA stream of the same id (csrc/runtime/cuda/CudaGuard.cpp),
so the Triton kernels inductor writes for CUDA tensors are correct for flagos
tensors.  Two things tie the generated code to the device type:

* Triton picks its compiler backend from the device type of the kernel's device
  properties (``GPUTarget(device_props.type, ...)``) and knows no ``flagos``;
  ``DeviceProperties.create`` therefore describes a flagos device as the CUDA
  device it is, so the kernels compile and launch through Triton's CUDA driver.
* The wrapper's stream, device switch and synchronisation go through
  ``torch.flagos`` (``CudaDeviceOpOverrides``).

Triton and its CUDA driver need a CUDA build of torch: with the ``cuda-assets``
wheel on stock torch+cpu the first inductor compile fails with that fix named.
CUDA graphs stay off: inductor captures graphs of ``cuda`` devices only, and the
one-line note in the log says so.
"""

from __future__ import annotations

import functools
import logging
from textwrap import dedent
from types import ModuleType
from typing import Any

import torch
from torch._inductor.codegen.cuda.device_op_overrides import CUDADeviceOpOverrides
from torch._inductor.codegen.triton import TritonScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen

from torch_fl.compile import post_import

__all__ = ["CudaDeviceOpOverrides", "PythonWrapperCodegen", "TritonScheduling", "prepare"]

_log = logging.getLogger("torch_fl.compile")


class CudaDeviceOpOverrides(CUDADeviceOpOverrides):
    """CUDA's, with the stream, device and synchronisation of the generated wrapper taken from torch.flagos."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return dedent(f"""
            def {name}(index):
                return torch.accelerator.current_stream(index).native_handle
            """)

    def set_device(self, device_idx: int) -> str:
        return f"torch.flagos.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.flagos.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.flagos.device({device_idx})"


def _describe_as_cuda(hints: ModuleType) -> None:
    """Make ``DeviceProperties.create(flagos:i)`` the properties of ``cuda:i`` (Triton's view of the device)."""
    original = hints.DeviceProperties.create

    @functools.cache
    def create(cls: type, device: torch.device) -> Any:
        if device.type == "flagos":
            device = torch.device("cuda", device.index)
        return original(device)

    hints.DeviceProperties.create = classmethod(create)


@functools.cache
def prepare() -> None:
    """Check that Triton can run here, point its view of the device at CUDA, and note that CUDA graphs are off."""
    if not torch.cuda._is_compiled():
        raise RuntimeError(
            "torch.compile with inductor on the flagos cuda platform needs a CUDA build of torch (Triton launches "
            "through torch.cuda), and this torch is CPU-only; install the torch_fl wheel built against the CUDA torch "
            "(bundle kind 'none') or compile with backend='aot_eager'")
    post_import.after_import("torch._inductor.runtime.hints", _describe_as_cuda)
    _log.info("torch_fl: inductor's CUDA graphs are off on flagos devices (it captures graphs of 'cuda' devices only)")
