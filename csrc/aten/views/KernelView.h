// Kernel views: flagos tensors seen as tensors of the device type whose
// PyTorch kernels run on the runtime's memory in place (runtime::kernel_device_type():
// CPU on the host platform, CUDA on the cuda platform), and the way back.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_fl::aten {

inline bool is_flagos(const at::Tensor& t) { return t.defined() && t.is_privateuseone(); }

// The dispatch key set of the kernel device type's dense kernels (CPU, CUDA):
// what a redispatch to the kernel device's own kernel goes to.
c10::DispatchKeySet kernel_dispatch_keys();

// The kernel device that stands for flagos device `flagos_device`: the CPU (no
// index) on host-addressable runtimes, the CUDA device of the same index on cuda.
c10::Device kernel_device_of(c10::Device flagos_device);

// A tensor of the kernel device type over the same bytes as `flagos_tensor`
// (same sizes, strides, offset, dtype, conjugate and negative bits), without
// copying; for an efficient zero tensor, zeros of its shape.  Its storage does
// not own the memory and is resizable, so a kernel that grows it (an out=
// argument of the wrong size) gets fresh memory instead of failing;
// sync_from_kernel_view() then carries the change back.
at::Tensor kernel_view(const at::Tensor& flagos_tensor);

// kernel_view(flagos_tensor) over `kernel_storage`, the storage of another view of the same flagos storage.
at::Tensor kernel_view_sharing(const at::Tensor& flagos_tensor, const c10::Storage& kernel_storage);

// kernel_view(flagos_tensor) for an operator call, handed out again to later
// calls on the same thread while it still is what kernel_view() would build:
// parameters, gradients and optimizer state get one view, not one per call.
// The view is checked against everything it carries by value (storage
// identity, data pointer, byte size, sizes, strides, offset, dtype, conjugate
// and negative bits) on every use, so set_, resize_, as_strided_, `.data =`,
// torch.utils.swap_tensors or a storage resize can never leave a stale one in use.
at::Tensor cached_kernel_view(const at::Tensor& flagos_tensor);

// Drops the calling thread's cached view of `flagos_tensor`, if it has one.
void forget_kernel_view(const at::Tensor& flagos_tensor);

// A flagos tensor as `t` is, or `t` when it is not a flagos tensor.
inline at::Tensor kernel_view_if_flagos(const at::Tensor& t) {
  return is_flagos(t) ? kernel_view(t) : t;
}

// After a kernel ran on `view` = kernel_view(flagos_tensor): make flagos_tensor
// match the view's geometry, and its data if the kernel reallocated the view.
void sync_from_kernel_view(const at::Tensor& flagos_tensor, const at::Tensor& view);

// Before sync_from_kernel_view() of an argument the kernel reallocated (an out= argument it resized): where
// nothing but `view` holds the view's storage and its new memory is device memory, that memory moves into
// flagos_tensor's storage and the view is left borrowing it, a view that later calls can take again.  False
// where the memory stays the view's (sync_from_kernel_view() then shares or copies it).
bool move_reallocated_memory(const at::Tensor& flagos_tensor, const at::Tensor& view);

// Gives `to` the conjugate and negative bits of `from`.
void copy_lazy_bits(const at::Tensor& from, const at::Tensor& to);

// A flagos tensor on `device` for a kernel's result: the result's own memory
// where the kernel allocator hands out device memory (adopted, no copy),
// otherwise a copy into device memory.  A result passed as an rvalue that
// nothing else holds becomes that flagos tensor in place (no second
// TensorImpl); one still held elsewhere is left as it is.
at::Tensor from_kernel_result(at::Tensor result, c10::Device device);

// from_kernel_result() for the usual result, in one pass over its fields: a fresh dense kernel device tensor
// that nothing else holds, over device memory that nothing else holds, becomes a flagos tensor on `device` in
// place.  False, and `result` as it was, for any other.
bool adopt_fresh_in_place(at::Tensor& result, c10::Device device);

// Nothing but the caller holds `t` or its storage (no other tensor, storage, weak or Python reference): a
// kernel's fresh result, which aliases no other tensor.
bool held_only_by_caller(const at::Tensor& t);

// A result that is a new tensor by its operator's schema, from a kernel written outside PyTorch (a FlagGems
// function): from_kernel_result(), except that a result whose memory is a kernel view's -- the kernel handed
// back its input, or a view of it -- gets a copy of its own, since adopting that memory would alias a flagos
// tensor the caller may overwrite, and outlive its owner.
at::Tensor adopt_fresh_result(at::Tensor result, c10::Device device);

// A kernel's result that aliases a kernel view, as a flagos tensor over the
// viewed flagos tensor's storage `flagos_storage` (same sizes, strides, offset);
// in place, as from_kernel_result(), where nothing else holds it.
at::Tensor alias_of_kernel_result(at::Tensor result, const c10::Storage& flagos_storage);

// A flagos tensor on `device` holding the values of CPU tensor `cpu` (a copy; in place, as
// from_kernel_result(), where nothing else holds `cpu`).
at::Tensor to_device(at::Tensor cpu, c10::Device device);

}  // namespace torch_fl::aten
