// torch_fl._C's memory controls beyond the statistics: the per-process memory fraction (every platform),
// and the allocation history and snapshot of an allocator that owns its blocks (runtime/MemoryHistory.h;
// the host platform).  torch_fl/memory.py drives them and gives them torch.cuda.memory's names.
#pragma once

#include <Python.h>

namespace torch_fl::python {

// Adds _set_memory_fraction, _memory_fraction, _record_memory_history and _memory_snapshot to `module`.
void add_memory_controls(PyObject* module);

}  // namespace torch_fl::python
