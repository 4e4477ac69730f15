"""Inductor's code generation for flagos on the host platform: its C++ (CPU) backend.

Host-platform device memory is host memory, so the kernels inductor's C++
backend writes for CPU tensors are correct for flagos tensors as they are: they
take raw data pointers, and the wrapper allocates their buffers with
``empty_strided(..., device='flagos')``.  Only the wrapper's kernel call needs
flagos added, because PythonWrapperCodegen emits a plain C++ kernel call for the
``cpu`` and ``mps`` device types and raises "device ... nyi" for any other.
Extern kernels (matmul, convolution, SDPA) stay flagos operators, routed as in
eager mode.

Inductor also decides, by asking whether a node "is CPU", which of its fusion and
loop transformations the C++ backend can take (``BaseSchedulerNode.is_cpu``,
``ir.is_cpu``: loop reordering and pointwise reindexing are Triton-only, CPU
graphs realise buffers at other thresholds).  ``treat_as_cpu`` makes both answer
yes for flagos buffers, so inductor plans a flagos graph exactly as the CPU graph
its C++ backend is written for.
"""

from __future__ import annotations

import functools
from typing import Any

from torch._inductor import ir, scheduler
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

__all__ = ["CppScheduling", "HostDeviceOpOverrides", "HostWrapperCodegen", "treat_as_cpu"]

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


@functools.cache
def treat_as_cpu() -> None:
    """Make inductor's "is this node on the CPU" questions answer yes for flagos nodes (see the module docstring)."""
    node_is_cpu = scheduler.BaseSchedulerNode.is_cpu
    ir_is_cpu = ir.is_cpu

    def is_cpu_node(self: scheduler.BaseSchedulerNode) -> bool:
        device = self.get_device()
        return (device is not None and device.type == _DEVICE) or node_is_cpu(self)

    def is_cpu(x: Any) -> bool:
        return ir.get_device_type(x) == _DEVICE or ir_is_cpu(x)

    scheduler.BaseSchedulerNode.is_cpu = is_cpu_node  # type: ignore[method-assign]
    ir.is_cpu = is_cpu
