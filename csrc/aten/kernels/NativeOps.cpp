#include "aten/kernels/NativeOps.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>

#include <sstream>
#include <string>

#include "aten/views/KernelView.h"
#include "runtime/DeviceRuntime.h"
#include "runtime/FlagosDeviceAllocator.h"

namespace torch_fl::aten {

namespace {

constexpr c10::DispatchKeySet kFlagosKeys(c10::DispatchKey::PrivateUse1);

c10::Device resolve_device(std::optional<c10::Device> device) {
  auto d = c10::device_or_default(device);
  TORCH_CHECK(d.type() == c10::DeviceType::PrivateUse1, "expected a flagos device, got ", d);
  if (!d.has_index()) d.set_index(runtime::current_device());
  runtime::check_device_index(d.index());
  return d;
}

void check_strided(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  const auto requested = c10::layout_or_default(layout);
  TORCH_CHECK(requested == c10::Layout::Strided, sparse_layout_advice(requested));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "pin_memory applies to CPU tensors, not flagos tensors");
}

// A dense block copy is one runtime copy; anything else (dtype conversion,
// broadcasting, different strides) runs the kernel device's copy kernel over
// kernel views (KernelView.h).
bool is_block_copy(const at::Tensor& src, const at::Tensor& dst) {
  return src.dtype() == dst.dtype() && src.sizes() == dst.sizes() && src.strides() == dst.strides() &&
         src.is_non_overlapping_and_dense() && !src.is_conj() && !dst.is_conj() && !src.is_neg() &&
         !dst.is_neg();
}

// Under torch.use_deterministic_algorithms(True) PyTorch fills the new memory of empty tensors and of
// resize_ with NaN (or the integer maximum) on the CPU and CUDA, so that reading it shows; so does flagos.
bool fills_new_memory() {
  const auto& context = at::globalContext();
  return context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory();
}

at::Tensor filled_if_deterministic(at::Tensor t) {
  if (C10_UNLIKELY(fills_new_memory())) at::native::fill_empty_deterministic_(t);
  return t;
}

}  // namespace

std::string sparse_layout_advice(c10::Layout layout) {
  const char* name = "non-strided";
  switch (layout) {
    case c10::kSparse: name = "torch.sparse_coo"; break;
    case c10::kSparseCsr: name = "torch.sparse_csr"; break;
    case c10::kSparseCsc: name = "torch.sparse_csc"; break;
    case c10::kSparseBsr: name = "torch.sparse_bsr"; break;
    case c10::kSparseBsc: name = "torch.sparse_bsc"; break;
    case c10::kMkldnn: name = "torch._mkldnn"; break;
    default: break;
  }
  std::ostringstream message;
  message << "flagos holds only strided (dense) tensors, not " << name
          << " ones; keep sparse tensors on the CPU (convert there: x.cpu().to_sparse()) and move dense tensors to flagos";
  return message.str();
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_strided(layout, pin_memory);
  const auto where = resolve_device(device);
  const c10::DeviceGuard guard(where);
  return filled_if_deterministic(at::detail::empty_generic(size, &device_allocator(), kFlagosKeys,
                                                           c10::dtype_or_default(dtype), memory_format));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_strided(layout, pin_memory);
  const auto where = resolve_device(device);
  const c10::DeviceGuard guard(where);
  return filled_if_deterministic(at::detail::empty_strided_generic(size, stride, &device_allocator(), kFlagosKeys,
                                                                   c10::dtype_or_default(dtype)));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset.has_value()) offset = storage_offset->expect_int();
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  const auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  for (auto s : sizes) TORCH_CHECK(s >= 0, "resize_: negative size ", s, " in ", sizes);
  TORCH_CHECK(!memory_format.has_value() || *memory_format != c10::MemoryFormat::Preserve,
              "Unsupported memory format", *memory_format);
  auto* impl = self.unsafeGetTensorImpl();
  // As the CPU's and CUDA's resize_: the same sizes keep the tensor's strides.  Composite out=
  // implementations resize their `out` before copying into it (softmax's, log_softmax's), and
  // a strided window of a larger tensor made contiguous would be written over its neighbours.
  if (impl->sizes() != sizes) {
    // Grow the storage first, so that a failed allocation leaves `self` as it was.
    const auto old_nbytes = static_cast<int64_t>(self.storage().nbytes());
    int64_t numel = 1;
    for (auto s : sizes) numel *= s;
    const size_t needed = static_cast<size_t>(numel + self.storage_offset()) * self.itemsize();
    if (numel > 0 && needed > self.storage().nbytes()) resize_storage(self.storage(), needed);
    impl->set_sizes_contiguous(sizes);
    if (C10_UNLIKELY(fills_new_memory())) at::native::fill_resize_deterministic_(self, old_nbytes);
  }
  if (memory_format.has_value()) impl->empty_tensor_restride(*memory_format);
  return self;
}

at::Tensor& set_empty_(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &device_allocator(), /*resizable=*/true);
  return at::native::set_storage_cpu_(self, storage, 0, {0}, {});
}

at::Tensor& set_source_storage_(at::Tensor& self, c10::Storage source) { return at::native::set_(self, source); }

at::Tensor& set_source_storage_offset_(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                                       c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, storage_offset, size, stride);
}

at::Tensor& set_source_tensor_(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  // `self` is the source.  One side is flagos; the other is flagos or CPU.
  const bool src_on_device = self.is_privateuseone();
  const bool dst_on_device = dst.is_privateuseone();
  TORCH_CHECK((src_on_device || self.is_cpu()) && (dst_on_device || dst.is_cpu()),
              "flagos copies go between flagos and CPU tensors, not ", self.device(), " -> ", dst.device());
  if (self.numel() == 0) return dst;
  if (src_on_device && dst_on_device) {
    // The checks TensorIterator makes for the CPU's and CUDA's copies: x[1:].copy_(x[:-1]) raises.
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, self);
  }
  if (self._is_zerotensor()) {
    // No memory to read: the values are zeros.
    kernel_view_if_flagos(dst).zero_();
    return dst;
  }
  if (is_block_copy(self, dst)) {
    const auto kind = !src_on_device ? runtime::CopyKind::HostToDevice
                      : dst_on_device ? runtime::CopyKind::DeviceToDevice
                                      : runtime::CopyKind::DeviceToHost;
    // Copy the whole span the strides cover, starting at the lowest address.
    const size_t nbytes = static_cast<size_t>(self.numel()) * self.element_size();
    runtime::copy(dst.data_ptr(), self.const_data_ptr(), nbytes, kind, nullptr);
    return dst;
  }
  // The thread's cached views, as an operator's arguments get: a fresh pair would be two tensors and two
  // storages made and freed per copy (every dtype conversion on the host platform comes here).
  const auto view_of = [](const at::Tensor& t) { return is_flagos(t) ? cached_kernel_view(t) : t; };
  auto dst_view = view_of(dst);
  dst_view.copy_(view_of(self));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.is_privateuseone()) {
    resize_(dst, self.sym_sizes(), std::nullopt);
  } else {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  if (C10_UNLIKELY(self._is_zerotensor() || self.is_conj() || self.is_neg())) {
    // No memory to read, or a lazy bit to resolve: copy_from knows both.
    auto cpu = at::empty({}, self.options().device(c10::kCPU));
    copy_from(self.reshape({}), cpu, false);
    return cpu.item();
  }
  // The element straight into a buffer on the stack and read from there, as CUDA's and the CPU's kernels read
  // theirs: no CPU tensor, view or second dispatch per .item() (a training loop's loss, a decoding loop's stop test).
  alignas(16) unsigned char element[16];  // the widest element type: complex<double>
  const size_t nbytes = self.element_size();
  TORCH_INTERNAL_ASSERT(nbytes <= sizeof(element), "no ", self.scalar_type(), " element fits a scalar buffer");
  runtime::copy(element, self.const_data_ptr(), nbytes, runtime::CopyKind::DeviceToHost, nullptr);
  at::Scalar value;
  AT_DISPATCH_V2(self.scalar_type(), "_local_scalar_dense_flagos",
                 AT_WRAP([&] { value = at::Scalar(*reinterpret_cast<const scalar_t*>(element)); }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kComplexHalf, at::kHalf, at::kBool, at::kBFloat16,
                 AT_EXPAND(AT_FLOAT8_TYPES), AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  return value;
}

at::Tensor efficient_zero_tensor(c10::SymIntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory) {
  check_strided(layout, pin_memory);
  const auto where = resolve_device(device);
  // Like PyTorch's own (ZeroTensorAllocator): a storage without memory.
  c10::Storage nothing(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, where), nullptr, /*resizable=*/false);
  auto zeros = at::detail::make_tensor<c10::TensorImpl>(
      std::move(nothing), kFlagosKeys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor),
      c10::scalarTypeToTypeMeta(c10::dtype_or_default(dtype)));
  zeros.unsafeGetTensorImpl()->set_sizes_contiguous(C10_AS_INTARRAYREF_SLOW(size));
  return zeros;
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto dense_on_cpu_or_flagos = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.is_cpu() || t.is_privateuseone());
  };
  if (dense_on_cpu_or_flagos(self) && dense_on_cpu_or_flagos(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

void reject_sparse_layout(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  c10::Layout layout = c10::kSparse;
  for (const auto& v : *stack) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().layout() != c10::kStrided) {
      layout = v.toTensor().layout();
      break;
    }
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, c10::toString(op.operator_name()), ": ", sparse_layout_advice(layout));
}

}  // namespace torch_fl::aten
