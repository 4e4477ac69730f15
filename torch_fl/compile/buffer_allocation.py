"""Flagos buffers in the wrappers inductor generates, allocated without the dispatcher.

A compiled graph's wrapper allocates its buffers on every call.  For ``cpu``,
``cuda``, ``xpu`` and ``mtia`` buffers inductor writes a direct allocation
(``empty_strided_cuda(size, stride, dtype)``: a C++ function that skips
``torch.empty_strided``'s argument parser and the dispatcher); for any other
device type it writes ``empty_strided(size, stride, device=..., dtype=...)``,
which costs about a microsecond more per buffer, hundreds of times per training
step.  ``AllocatesFlagosDirectly`` gives flagos buffers flagos's direct
allocation, ``torch_fl._C._empty_strided``: the kernel the dispatcher would
reach, on the current flagos device, which the wrapper's device guard sets as it
does for CUDA.
"""

from __future__ import annotations

from typing import Any

from torch._inductor import config
from torch._inductor.codegen.wrapper import SubgraphPythonWrapperCodegen

__all__ = ["AllocatesFlagosDirectly"]

_DEVICE = "flagos"
_NAME = "empty_strided_flagos"


class AllocatesFlagosDirectly:
    """A PythonWrapperCodegen mixin: flagos buffers come from ``torch_fl._C._empty_strided``."""

    def write_header(self) -> None:
        super().write_header()  # type: ignore[misc]
        if not isinstance(self, SubgraphPythonWrapperCodegen):  # a subgraph's code lives in its parent's module
            self.header.writeline(f"from torch_fl._C import _empty_strided as {_NAME}")  # type: ignore[attr-defined]

    def make_allocation(self, name: str, device: Any, dtype: Any, shape: Any, stride: Any,
                        allocation_shape: Any = None, is_pinned: bool = False) -> str:
        if device.type != _DEVICE or config.test_configs.track_memory_lifecycle:
            return super().make_allocation(  # type: ignore[misc]
                name, device, dtype, shape, stride, allocation_shape, is_pinned)
        tuple_of = self.codegen_python_shape_tuple  # type: ignore[attr-defined]
        shape_code, stride_code = tuple_of(shape), tuple_of(stride)
        allocation_code = shape_code if allocation_shape is None else tuple_of(allocation_shape)
        line = f"{name} = {_NAME}({allocation_code}, {stride_code}, {dtype})"
        if allocation_code != shape_code:  # a larger allocation viewed as the buffer, as inductor does
            line += f".as_strided({shape_code}, {stride_code})"
        return line
