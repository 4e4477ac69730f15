"""Inductor's backend for ``flagos``, handed to inductor through the device module.

Inductor registers a PrivateUse1 device's code generators from its device module
(``torch.flagos.Scheduling``, ``PythonWrapperCodegen``, ``CppWrapperCodegen``,
``WrapperFxCodegen``; ``torch._inductor.codegen.common.init_backend_registration``)
the first time it compiles.  The attributes are resolved lazily, because importing
inductor's code generators costs seconds that ``import torch`` must not pay; the
first lookup also registers flagos's device op overrides, which inductor asks for
right after.  Which generators depends on where flagos memory lives: host memory
on the host platform (inductor's C++ backend), CUDA memory on the cuda platform
(its Triton backend).
"""

from __future__ import annotations

import functools
from typing import Any

from torch_fl import _C

__all__ = ["ATTRIBUTES", "device_module_attribute"]

_DEVICE = "flagos"
ATTRIBUTES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


@functools.cache
def _codegen() -> dict[str, Any]:
    from torch._inductor.codegen.common import register_device_op_overrides
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    from torch_fl.compile.unsupported import CppWrapperUnsupported

    platform = _C._platform()
    if platform == "host":
        from torch_fl.compile import host_codegen

        host_codegen.treat_as_cpu()
        host_codegen.prefer_flagos_to_cpu()
        register_device_op_overrides(_DEVICE, host_codegen.HostDeviceOpOverrides())
        return {"Scheduling": host_codegen.CppScheduling, "PythonWrapperCodegen": host_codegen.HostWrapperCodegen,
                "CppWrapperCodegen": CppWrapperUnsupported, "WrapperFxCodegen": WrapperFxCodegen}
    if platform == "cuda":
        from torch_fl.compile import cuda_codegen

        cuda_codegen.prepare()
        register_device_op_overrides(_DEVICE, cuda_codegen.CudaDeviceOpOverrides())
        return {"Scheduling": cuda_codegen.TritonScheduling, "PythonWrapperCodegen": cuda_codegen.PythonWrapperCodegen,
                "CppWrapperCodegen": CppWrapperUnsupported, "WrapperFxCodegen": WrapperFxCodegen}
    raise NotImplementedError(
        f"torch.compile with inductor has no kernel backend for the flagos {platform} platform yet; "
        "compile with backend='aot_eager' (the flagos kernels, traced and run as one graph)")


def device_module_attribute(name: str) -> Any:
    """``torch.flagos.<name>`` for inductor's code generator attributes (the device module's ``__getattr__``)."""
    if name not in ATTRIBUTES:
        raise AttributeError(f"module 'torch.flagos' has no attribute {name!r}")
    return _codegen()[name]
