"""Inductor's backend for ``flagos``, handed to inductor through the device module.

Inductor registers a PrivateUse1 device's code generators from its device module
(``torch.flagos.Scheduling``, ``PythonWrapperCodegen``, ``CppWrapperCodegen``,
``WrapperFxCodegen``; ``torch._inductor.codegen.common.init_backend_registration``)
the first time it compiles.  The attributes are resolved lazily, because importing
inductor's code generators costs seconds that ``import torch`` must not pay; the
first lookup also registers flagos's device op overrides, which inductor asks for
right after.  Which generators is the platform table's ``compile`` (the recipe's
``[device] compile``, read from the build config): ``cpp`` where flagos memory is
host memory (inductor's C++ backend), ``triton`` where it is CUDA memory (its
Triton backend).  Where there is none, the Scheduling raises why, once inductor
generates kernels for a flagos graph (``unsupported``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from torch_fl import _build_config

__all__ = ["ATTRIBUTES", "device_module_attribute"]

_DEVICE = "flagos"
ATTRIBUTES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def _without_kernel_backend(reason: str) -> dict[str, Any]:
    from torch._inductor.codegen.common import DeviceOpOverrides, register_device_op_overrides
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    from torch_fl.compile.unsupported import CppWrapperUnsupported, scheduling_unavailable

    register_device_op_overrides(_DEVICE, DeviceOpOverrides())  # the wrapper asks for them before any kernel
    return {"Scheduling": scheduling_unavailable(reason), "PythonWrapperCodegen": PythonWrapperCodegen,
            "CppWrapperCodegen": CppWrapperUnsupported, "WrapperFxCodegen": WrapperFxCodegen}


@functools.cache
def _codegen() -> dict[str, Any]:
    from torch._inductor.codegen.common import register_device_op_overrides
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    from torch_fl.compile.unsupported import CppWrapperUnsupported

    backend = _build_config.COMPILE
    platform = _build_config.PLATFORM
    if backend == "cpp":
        from torch_fl.compile import host_codegen

        host_codegen.treat_as_cpu()
        host_codegen.prefer_flagos_to_cpu()
        register_device_op_overrides(_DEVICE, host_codegen.HostDeviceOpOverrides())
        return {"Scheduling": host_codegen.CppScheduling, "PythonWrapperCodegen": host_codegen.HostWrapperCodegen,
                "CppWrapperCodegen": CppWrapperUnsupported, "WrapperFxCodegen": WrapperFxCodegen}
    if backend == "triton" and not torch.cuda._is_compiled():
        return _without_kernel_backend(
            f"torch.compile with inductor on the flagos {platform} platform needs a CUDA build of torch (Triton "
            f"compiles and launches through torch.cuda), and this torch ({torch.__version__}) is CPU-only; install the "
            "torch_fl wheel built against the CUDA torch, or compile with backend='aot_eager'")
    if backend == "triton":
        from torch_fl.compile import cuda_codegen

        cuda_codegen.prepare()
        register_device_op_overrides(_DEVICE, cuda_codegen.CudaDeviceOpOverrides())
        return {"Scheduling": cuda_codegen.TritonScheduling, "PythonWrapperCodegen": cuda_codegen.CudaWrapperCodegen,
                "CppWrapperCodegen": CppWrapperUnsupported, "WrapperFxCodegen": WrapperFxCodegen}
    return _without_kernel_backend(
        f"torch.compile with inductor has no kernel backend for the flagos {platform} platform yet; "
        "compile with backend='aot_eager' (the flagos kernels, traced and run as one graph)")


def device_module_attribute(name: str) -> Any:
    """``torch.flagos.<name>`` for inductor's code generator attributes (the device module's ``__getattr__``)."""
    if name not in ATTRIBUTES:
        raise AttributeError(f"module 'torch.flagos' has no attribute {name!r}")
    return _codegen()[name]
