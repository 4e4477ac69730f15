// The flaggems provider's kernels (torch_fl/flaggems/kernels.py registers them).  Each operator routed to
// FlagGems gets a boxed PrivateUse1 kernel written here: a plain call (tensors and scalars) makes its kernel
// views, calls FlagGems' function once and maps the results back with no Python of the provider's around the
// call (its cost per call: benchmarks/device/flaggems_provider_cost.py); every other call goes to the
// operator's Python kernel.
#pragma once

#include <Python.h>

namespace torch_fl::python {

// Adds _FlagGemsLibrary (a set of registrations: impl(op, function, python_kernel), close()) and
// _flaggems_depth(delta) to `module`.
void add_flaggems_kernels(PyObject* module);

}  // namespace torch_fl::python
