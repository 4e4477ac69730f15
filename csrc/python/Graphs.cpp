// Graph capture for flagos on the cuda platform (Graphs.h).  A flagos stream is
// the CUDA stream of the same id (runtime/cuda/CudaGuard.cpp) and flagos memory
// comes from PyTorch's CUDA caching allocator (CudaDeviceAllocator.cpp), so
// PyTorch's own CUDAGraph captures flagos work unchanged: the capture stream is
// the flagos stream the user made current, and allocations made during capture
// land in the graph's private pool, exactly as for cuda tensors.  The generator
// PyTorch registers with the graph is CUDA's default one, which is flagos's
// engine (runtime::default_generator_engine): random ops replay with fresh offsets.
#include "python/Graphs.h"

#include <utility>

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <torch/csrc/utils/pybind.h>

namespace torch_fl::python {

namespace py = pybind11;

namespace {

// A type of this module's own: a CUDA build of torch binds at::cuda::CUDAGraph itself (torch._C._CUDAGraph),
// and pybind11 binds each C++ type once per process.
struct FlagosGraph {
  at::cuda::CUDAGraph graph;
};

}  // namespace

void add_graph_capture(PyObject* module) {
  auto m = py::reinterpret_borrow<py::module>(module);
  py::class_<FlagosGraph>(m, "_Graph")
      .def(py::init<>())
      .def(
          "capture_begin",
          [](FlagosGraph& self, std::optional<py::tuple> pool, const std::string& mode) {
            auto& graph = self.graph;
            cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
            if (mode == "thread_local") {
              capture_mode = cudaStreamCaptureModeThreadLocal;
            } else if (mode == "relaxed") {
              capture_mode = cudaStreamCaptureModeRelaxed;
            } else {
              TORCH_CHECK(mode == "global", "unknown capture_error_mode '", mode,
                          "'; use 'global', 'thread_local' or 'relaxed'");
            }
            // The pool id type of this torch release (pool() itself may only be asked after a capture).
            decltype(std::declval<at::cuda::CUDAGraph&>().pool()) id{};
            if (pool.has_value()) {
              id.first = (*pool)[0].cast<decltype(id.first)>();
              id.second = (*pool)[1].cast<decltype(id.second)>();
            }
            py::gil_scoped_release no_gil;
            graph.capture_begin(id, capture_mode);
          },
          py::arg("pool") = py::none(), py::arg("capture_error_mode") = "global")
      .def("capture_end", [](FlagosGraph& self) { self.graph.capture_end(); },
           py::call_guard<py::gil_scoped_release>())
      .def("replay", [](FlagosGraph& self) { self.graph.replay(); }, py::call_guard<py::gil_scoped_release>())
      .def("reset", [](FlagosGraph& self) { self.graph.reset(); }, py::call_guard<py::gil_scoped_release>())
      .def("pool", [](FlagosGraph& self) {
        const auto id = self.graph.pool();
        return py::make_tuple(id.first, id.second);
      });
  m.def("_graph_pool_handle", [] {
    const auto id = at::cuda::graph_pool_handle();
    return py::make_tuple(id.first, id.second);
  });
  m.def("_is_current_stream_capturing",
        [] { return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None; });
}

}  // namespace torch_fl::python
