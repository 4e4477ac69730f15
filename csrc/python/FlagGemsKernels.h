// The flaggems provider's kernels (torch_fl/flaggems/kernels.py registers them).  Each operator routed to
// FlagGems gets a boxed PrivateUse1 kernel written here: a plain call (tensors and scalars) makes its kernel
// views, calls FlagGems' function once and maps the results back without Python code of its own around the
// call, which held the provider's cost per call to the Python wrapper's (benchmarks/device/gpu_flaggems.py,
// provider_cost_us); every other call goes to the operator's Python kernel.
#pragma once

#include <Python.h>

namespace torch_fl::python {

// Adds _FlagGemsLibrary (a set of registrations: impl(op, function, python_kernel), close()) and
// _flaggems_depth(delta) to `module`.
void add_flaggems_kernels(PyObject* module);

}  // namespace torch_fl::python
