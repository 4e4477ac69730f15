// Operators flagos implements itself: factories, copies, views and storage
// manipulation.  Everything else goes through routing (RoutedFallback.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/SymIntArrayRef.h>

#include <string>

namespace torch_fl::aten {

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory);
at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset);
at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size);
at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride);
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step);
const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format);
at::Tensor& set_empty_(at::Tensor& self);
at::Tensor& set_source_storage_(at::Tensor& self, c10::Storage source);
at::Tensor& set_source_storage_offset_(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                                       c10::IntArrayRef size, c10::IntArrayRef stride);
at::Tensor& set_source_tensor_(at::Tensor& self, const at::Tensor& source);
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
at::Scalar local_scalar_dense(const at::Tensor& self);

// An efficient zero tensor (the ZeroTensor key): no memory, reads as zeros.
// Backward formulas produce them (sgn of a real tensor); PyTorch's ZeroTensor
// fallback materialises them before any kernel that is not zero-aware.
at::Tensor efficient_zero_tensor(c10::SymIntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory);

// Whether `self`'s TensorImpl can take `from`'s metadata and storage
// (Tensor.data = ...): also between CPU and flagos tensors, as between CPU and
// CUDA.  Module.to() swaps parameter data only where this holds; otherwise it
// replaces the parameters and unties shared (tied) ones.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);

// The one-line error for a layout flagos does not hold (sparse COO, CSR, ...).
std::string sparse_layout_advice(c10::Layout layout);

// The boxed kernel of every operator on a sparse flagos tensor: one line naming
// the layout and what to do instead.
void reject_sparse_layout(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_fl::aten
