// DispatchStubs that PyTorch's composite ops consult per device type before
// choosing a kernel.  Unregistered for PrivateUse1, they make the composite
// take its slowest generic path (scaled_dot_product_attention falls back to the
// math implementation, which materialises and keeps the attention matrix); flagos
// answers each with the kernel device's own choice, made on kernel views.
#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <torch/version.h>

#include "aten/views/KernelView.h"
#include "runtime/DeviceRuntime.h"

namespace torch_fl::aten {

namespace {

// A fake, functional or other wrapper tensor (what torch.compile traces with: its storage has no data), or one
// with symbolic sizes.
bool traced(const at::Tensor& t) {
  static const c10::DispatchKeySet wrappers({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot,
                                             c10::DispatchKey::Functionalize});
  const c10::TensorImpl& impl = *t.unsafeGetTensorImpl();
  return impl.key_set().has_any(wrappers) || impl.has_symbolic_sizes_strides();
}

// The choice reads metadata only -- sizes, strides, dtypes, and which operands
// need gradients (the CPU flash kernel is not differentiable in attn_mask) --
// never data.  A plain flagos operand that needs no gradient (inference, decoding) is stood for by its
// cached kernel view: no tensor is built per call, and the attention kernel that follows finds the same
// views among the recent ones.  Any other -- one that needs a gradient (a cached view carries no autograd
// state), a fake, functional or other wrapper tensor torch.compile traces with (its storage has no data),
// symbolic sizes, a nested tensor -- by a tensor of the kernel device type without memory.
at::Tensor choice_view(const at::Tensor& t) {
  if (!is_flagos(t)) return t;
  if (!t.requires_grad() && t.layout() == c10::kStrided && !traced(t) && t.unsafeGetTensorImpl()->unsafe_storage()) {
    return cached_kernel_view(t);
  }
  const c10::Device where = kernel_device_of(t.device());
  c10::Storage no_memory(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, where), nullptr, /*resizable=*/false);
  auto view = at::detail::make_tensor<c10::TensorImpl>(std::move(no_memory), kernel_dispatch_keys(), t.dtype());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(t.sym_sizes(), t.sym_strides(), t.sym_storage_offset());
  if (t.requires_grad()) view.set_requires_grad(true);
  return view;
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  std::optional<at::Tensor> mask;
  if (attn_mask.has_value() && attn_mask->defined()) mask = choice_view(*attn_mask);
  // The op of the same name asks the kernel device's stub (the stub's own call operator is not exported to
  // extensions), reached straight at the kernel device's kernel: no dispatch key computed from the
  // arguments, and no Python dispatch mode consulted (under tracing FakeTensorMode would reject the
  // stand-ins as real tensors).
  const auto choice = at::_ops::_fused_sdp_choice::redispatch(kernel_dispatch_keys(), choice_view(query),
                                                             choice_view(key), choice_view(value), mask, dropout_p,
                                                             is_causal, scale, enable_gqa);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 12)
  // Here scaled_dot_product_attention sends a flash-attention choice on any
  // device but CUDA to the CPU's flash kernel (_scaled_dot_product_flash_attention_for_cpu:
  // no dropout, no CUDA kernel; seen with 2.13, while 2.11 hands PrivateUse1 to
  // the device's flash kernel).  On CUDA memory flagos answers the overrideable
  // kernel instead, which the composite hands to the device's own, and which
  // flagos runs on CUDA's flash kernel (OverrideableOps.cpp).  That kernel takes
  // head sizes in multiples of 8 only, which the composite pads others to on
  // CUDA tensors alone.  Traced calls keep memory-efficient attention too: the
  // overrideable kernel's meta function does not describe what CUDA's flash
  // kernel returns (its output's strides, its RNG state), which compiled code
  // would read as described.  Memory-efficient attention keeps more for the
  // backward (8 MiB a layer in benchmarks/device/gpu_transformer.py's step).
  if (runtime::kernel_device_type() == c10::kCUDA && choice == static_cast<int64_t>(at::SDPBackend::flash_attention)) {
    const auto eager_dense = [](const at::Tensor& t) { return !traced(t) && !t.is_nested(); };
    const bool eager_and_unpadded = eager_dense(query) && eager_dense(key) && eager_dense(value) &&
                                    query.size(-1) % 8 == 0 && key.size(-1) % 8 == 0 && value.size(-1) % 8 == 0;
    return static_cast<int64_t>(eager_and_unpadded ? at::SDPBackend::overrideable
                                                   : at::SDPBackend::efficient_attention);
  }
#endif
  return choice;
}

}  // namespace

}  // namespace torch_fl::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_fl::aten::fused_sdp_choice)
}  // namespace at::native
