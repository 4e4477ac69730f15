"""Inductor's code generation for flagos on the host platform: its C++ (CPU) backend.

Host-platform device memory is host memory, so the kernels inductor's C++
backend writes for CPU tensors are correct for flagos tensors as they are: they
take raw data pointers, and the wrapper allocates their buffers with
``empty_strided(..., device='flagos')``.  Only the wrapper's kernel call needs
flagos added, because PythonWrapperCodegen emits a plain C++ kernel call for the
``cpu`` and ``mps`` device types and raises "device ... nyi" for any other.
Extern kernels (matmul, convolution, SDPA) stay flagos operators, routed as in
eager mode.
"""

from __future__ import annotations

from typing import Any

from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

__all__ = ["CppScheduling", "HostDeviceOpOverrides", "HostWrapperCodegen"]

_DEVICE = "flagos"


class _CallsHostKernels:
    """Calls inductor's C++ kernels for flagos buffers as PythonWrapperCodegen does for CPU ones."""

    def _generate_kernel_call_helper(self, kernel_name: str, call_args: Any, *, device: Any = None,
                                     triton: bool = True, **kwargs: Any) -> None:
        device = device or V.graph.get_current_device_or_throw()
        if not triton and device.type == _DEVICE:
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))  # type: ignore[attr-defined]
            return
        super()._generate_kernel_call_helper(  # type: ignore[misc]
            kernel_name, call_args, device=device, triton=triton, **kwargs)


class HostSubgraphWrapperCodegen(_CallsHostKernels, SubgraphPythonWrapperCodegen):
    """The wrapper of a subgraph (the branches of ``cond``, the body of ``while_loop``)."""


class HostWrapperCodegen(_CallsHostKernels, PythonWrapperCodegen):
    """The Python wrapper of a flagos graph on the host platform."""

    @staticmethod
    def create(is_subgraph: bool, subgraph_name: str | None, parent_wrapper: PythonWrapperCodegen | None,
               partition_signatures: Any = None) -> PythonWrapperCodegen:
        if is_subgraph:
            assert subgraph_name is not None and parent_wrapper is not None
            return HostSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return HostWrapperCodegen()


class HostDeviceOpOverrides(CpuDeviceOpOverrides):
    """The CPU's: the host platform's C++ kernels need no stream, device switch or synchronisation."""
