// The Python entry points of the flagos process group (torch_fl._C).
#pragma once

#include <Python.h>

namespace torch_fl::distributed {

// _kernel_view_backend(engine: torch.distributed.Backend, name: str) -> Backend:
// the flagos backend running `engine`'s collectives on kernel views.
PyObject* py_kernel_view_backend(PyObject* self, PyObject* args);

// _kernel_view_engine(backend) -> the engine of a flagos backend, or None for any other backend.
PyObject* py_kernel_view_engine(PyObject* self, PyObject* backend);

}  // namespace torch_fl::distributed
