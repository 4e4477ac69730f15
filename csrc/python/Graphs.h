// torch_fl._C's graph capture on platforms whose streams are CUDA streams (cuda):
// PyTorch's at::cuda::CUDAGraph, which torch.flagos.CUDAGraph and torch.flagos.graph
// drive (torch_fl/graphs.py).  Other platforms add nothing, and torch_fl/graphs.py
// says so where a user asks for a graph.
#pragma once

#include <Python.h>

namespace torch_fl::python {

// Adds _Graph, _graph_pool_handle and _is_current_stream_capturing to `module` (cuda platform only).
void add_graph_capture(PyObject* module);

}  // namespace torch_fl::python
