"""Inductor's code generation for flagos on the cuda platform: its Triton backend.

On the cuda platform a flagos device *is* the CUDA device of the same index, its
memory comes from PyTorch's CUDA caching allocator, and a flagos stream is the
CUDA stream of the same id (csrc/runtime/cuda/CudaGuard.cpp), so the Triton
kernels inductor writes for CUDA tensors are correct for flagos tensors: Triton's
launcher takes their data pointers, which are CUDA device pointers.  Three things
tie inductor's work to the device type:

* Triton picks its compiler backend and launcher from the device type in the
  kernel's device properties (``GPUTarget(device_props.type, ...)``,
  ``CachingAutotuner`` asks dynamo's interface of that type for the device and
  stream) and knows no ``flagos``; ``DeviceProperties.create`` therefore describes
  a flagos device as the CUDA device it is, so the kernels compile, launch and
  autotune through Triton's CUDA driver, on the stream the wrapper passes.
* The generated wrapper's stream, device guard and synchronisation go through
  ``torch.flagos`` and flagos's current stream (``CudaDeviceOpOverrides``);
  buffers come from flagos's direct allocation (``buffer_allocation``).
* Inductor plans a graph for a GPU by asking ``is_gpu(device.type)``, which knows
  a fixed list of types (``utils.GPU_TYPES``): input alignment (and with it
  vectorised loads), device guards, fusion and loop ordering, CPU scalars passed
  to kernels as values, and the missing-Triton error.  ``treat_as_cuda`` adds
  flagos to that list, and makes flagos the GPU of the process
  (``get_gpu_type``), which is where its constructor-moving and bmm passes aim.

Inductor still singles out ``cuda`` by name for a few optimisations: the two
that are on by default (online softmax, mix-order reduction) are granted to
flagos graphs in ``cuda_features``; native Triton matmul, TMA descriptors and
PDL, off by default, stay off for them.

Triton and its CUDA driver run through ``torch.cuda``, so inductor needs a CUDA
build of torch here: with the ``cuda-assets`` wheel on stock torch+cpu this
module is not used and the first inductor compile fails with that fix named
(``inductor_backend``).  CUDA graphs: see ``cuda_graphs``.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import torch
from torch._inductor import utils
from torch._inductor.codegen.cuda.device_op_overrides import CUDADeviceOpOverrides
from torch._inductor.codegen.triton import TritonScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

from torch_fl.compile import inductor_names, post_import
from torch_fl.compile.buffer_allocation import AllocatesFlagosDirectly

__all__ = ["CudaDeviceOpOverrides", "CudaWrapperCodegen", "TritonScheduling", "prepare", "treat_as_cuda"]

_DEVICE = "flagos"


class CudaDeviceOpOverrides(CUDADeviceOpOverrides):
    """CUDA's, with the stream, device and synchronisation of the generated wrapper taken from torch.flagos."""

    def import_get_raw_stream_as(self, name: str) -> str:
        # The cudaStream_t of flagos's current stream (flagos's current stream *is* CUDA's current stream).  The
        # wrapper calls it before every kernel launch: a C function, as CUDA's wrapper imports.
        return f"from torch_fl._C import _current_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.flagos.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.flagos.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.flagos.device({device_idx})"


class CudaSubgraphWrapperCodegen(AllocatesFlagosDirectly, SubgraphPythonWrapperCodegen):
    """The wrapper of a subgraph (the branches of ``cond``, the body of ``while_loop``)."""


class CudaWrapperCodegen(AllocatesFlagosDirectly, PythonWrapperCodegen):
    """The Python wrapper of a flagos graph on the cuda platform."""

    @staticmethod
    def create(is_subgraph: bool, subgraph_name: str | None, parent_wrapper: PythonWrapperCodegen | None,
               partition_signatures: Any = None) -> PythonWrapperCodegen:
        if is_subgraph:
            assert subgraph_name is not None and parent_wrapper is not None
            return CudaSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return CudaWrapperCodegen()


def _describe_as_cuda(hints: ModuleType) -> None:
    """Make ``DeviceProperties.create(flagos:i)`` the properties of ``cuda:i`` (Triton's view of the device)."""
    original = hints.DeviceProperties.create

    @functools.cache
    def create(_cls: type, device: torch.device) -> Any:
        if device.type == _DEVICE:
            device = torch.device("cuda", device.index)
        return original(device)

    hints.DeviceProperties.create = classmethod(create)  # type: ignore[arg-type]


@functools.cache
def treat_as_cuda() -> None:
    """Make inductor plan flagos graphs as GPU graphs, with flagos the process's GPU (see the module docstring)."""
    if _DEVICE not in utils.GPU_TYPES:
        utils.GPU_TYPES.append(_DEVICE)  # the list is_gpu reads, shared by every module that imported it

    def get_gpu_type() -> str:
        # get_gpu_type asserts that a single type in GPU_TYPES is available; in a CUDA build cuda is, too.
        return _DEVICE

    inductor_names.replace(utils, "get_gpu_type", get_gpu_type)


@functools.cache
def prepare() -> None:
    """Point Triton's view of the device at CUDA and make inductor plan flagos graphs as GPU graphs."""
    post_import.after_import("torch._inductor.runtime.hints", _describe_as_cuda)
    treat_as_cuda()
