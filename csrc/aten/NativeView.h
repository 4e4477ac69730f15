// CPU views of flagos tensors, for runtimes whose device memory is
// host-addressable (runtime::device_memory_is_host_addressable()).
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_fl::aten {

// A CPU tensor over the same bytes as `device_tensor` (same sizes, strides,
// offset and dtype), without copying.  Its storage does not own the memory and
// is resizable, so a CPU kernel that grows it (an out= argument of the wrong
// size) gets fresh CPU memory instead of failing; sync_from_host_view() then
// carries the change back.
at::Tensor host_view(const at::Tensor& device_tensor);

// After a kernel ran on `view` = host_view(device_tensor): make device_tensor
// match the view's geometry, and its data if the kernel reallocated the view.
void sync_from_host_view(const at::Tensor& device_tensor, const at::Tensor& view);

// A flagos tensor on `device` holding the values of CPU tensor `cpu`.
at::Tensor to_device(const at::Tensor& cpu, c10::Device device);

}  // namespace torch_fl::aten
