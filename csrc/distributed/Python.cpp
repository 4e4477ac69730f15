// torch.distributed's Backend objects are pybind11 objects of torch._C holding
// c10::intrusive_ptr; torch's own pybind11 headers (torch/csrc/utils/pybind.h)
// declare that holder, so the casts below share torch._C's type registry.
#include "distributed/Python.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include "distributed/KernelViewBackend.h"

namespace torch_fl::distributed {

namespace py = pybind11;

PyObject* py_kernel_view_backend(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  PyObject* engine_obj = nullptr;
  const char* name = nullptr;
  if (!PyArg_ParseTuple(args, "Os", &engine_obj, &name)) return nullptr;
  auto engine = py::handle(engine_obj).cast<c10::intrusive_ptr<c10d::Backend>>();
  TORCH_CHECK_TYPE(engine, "expected a torch.distributed Backend as the engine, got None");
  c10::intrusive_ptr<c10d::Backend> backend = c10::make_intrusive<KernelViewBackend>(std::move(engine), name);
  return py::cast(backend).release().ptr();
  END_HANDLE_TH_ERRORS
}

PyObject* py_kernel_view_engine(PyObject*, PyObject* backend_obj) {
  HANDLE_TH_ERRORS
  auto backend = py::handle(backend_obj).cast<c10::intrusive_ptr<c10d::Backend>>();
  if (auto* flagos = dynamic_cast<KernelViewBackend*>(backend.get())) {
    return py::cast(flagos->engine()).release().ptr();
  }
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

}  // namespace torch_fl::distributed
