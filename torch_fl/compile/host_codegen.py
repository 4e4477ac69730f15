"""Inductor's code generation for flagos on the host platform: its C++ (CPU) backend.

Host-platform device memory is host memory, so the kernels inductor's C++
backend writes for CPU tensors are correct for flagos tensors as they are: they
take raw data pointers, and the wrapper allocates their buffers with flagos's
direct allocation (``buffer_allocation``).  Only the wrapper's kernel call needs
flagos added, because PythonWrapperCodegen emits a plain C++ kernel call for the
``cpu`` and ``mps`` device types and raises "device ... nyi" for any other.
Extern kernels (matmul, convolution, SDPA) stay flagos operators, routed as in
eager mode.

Inductor also decides, by asking whether a node "is CPU", which of its fusion and
loop transformations the C++ backend can take (``BaseSchedulerNode.is_cpu``,
``ir.is_cpu``: loop reordering and pointwise reindexing are Triton-only, CPU
graphs realise buffers at other thresholds), and which backend writes a device's
kernels by ``torch._inductor.utils.get_current_backend``, which answers
``config.cpu_backend`` for ``cpu`` and ``config.cuda_backend`` ("triton") for any
other device type.  The C++ backend depends on that answer while it generates
code: the ops handler (``CSEProxy._default`` in codegen/common.py) fills in the
dtype of a C++ kernel's variables only when the backend is "cpp", so with
"triton" an indirect load (an embedding's index) reaches the vectorised bounds
check (``CppVecKernel.indirect_assert``) without a dtype and inductor asserts.
``treat_as_cpu`` makes all three answer as for the CPU on flagos, so inductor
plans and generates a flagos graph exactly as the CPU graph its C++ backend is
written for.

One question must still single flagos out from the CPU: a pointwise op whose
inputs sit on several devices (a flagos tensor times a CPU scalar tensor) runs
on the first input that ``is_gpu`` (``make_pointwise`` in lowering.py), else on
the first input's device.  Eager mode puts the result on flagos, so
``prefer_flagos_to_cpu`` makes that choice, and only that one, count flagos as
the accelerator it is.
"""

from __future__ import annotations

import functools
from typing import Any

from torch._inductor import ir, lowering, scheduler, utils
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

from torch_fl.compile import inductor_names
from torch_fl.compile.buffer_allocation import AllocatesFlagosDirectly

__all__ = ["CppScheduling", "HostDeviceOpOverrides", "HostWrapperCodegen", "prefer_flagos_to_cpu", "treat_as_cpu"]

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


class HostSubgraphWrapperCodegen(_CallsHostKernels, AllocatesFlagosDirectly, SubgraphPythonWrapperCodegen):
    """The wrapper of a subgraph (the branches of ``cond``, the body of ``while_loop``)."""


class HostWrapperCodegen(_CallsHostKernels, AllocatesFlagosDirectly, PythonWrapperCodegen):
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
    _answer_cpp_backend()


def _answer_cpp_backend() -> None:
    """``get_current_backend`` answers "cpp" for flagos, in inductor's modules that imported it by name too."""
    original = utils.get_current_backend

    @functools.wraps(original)
    def get_current_backend(device_type: str | None = None) -> str:
        if (device_type or V.graph.get_current_device_or_throw().type) == _DEVICE:
            return "cpp"  # the backend of CppScheduling, flagos's Scheduling on this platform
        return original(device_type)

    inductor_names.replace(utils, "get_current_backend", get_current_backend)


@functools.cache
def prefer_flagos_to_cpu() -> None:
    """Lowering's device choice for a pointwise op over flagos and CPU tensors picks flagos (see the docstring).

    Only lowering's own binding of ``is_gpu`` changes: everywhere else a flagos node stays a CPU-like one.
    """
    is_gpu = utils.is_gpu

    def is_gpu_or_flagos(device: str | None) -> bool:
        return device == _DEVICE or is_gpu(device)

    lowering.is_gpu = is_gpu_or_flagos  # type: ignore[attr-defined]
