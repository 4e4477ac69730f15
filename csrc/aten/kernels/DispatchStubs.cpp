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

// The choice reads metadata only -- sizes, strides, dtypes, and which operands
// need gradients (the CPU flash kernel is not differentiable in attn_mask) --
// never data.  A plain flagos operand that needs no gradient (inference, decoding) is stood for by its
// cached kernel view: no tensor is built per call, and the attention kernel that follows finds the same
// views among the recent ones.  Any other -- one that needs a gradient (a cached view carries no autograd
// state), a fake, functional or other wrapper tensor torch.compile traces with (its storage has no data),
// symbolic sizes, a nested tensor -- by a tensor of the kernel device type without memory.
at::Tensor choice_view(const at::Tensor& t) {
  if (!is_flagos(t)) return t;
  const c10::TensorImpl& impl = *t.unsafeGetTensorImpl();
  static const c10::DispatchKeySet wrappers({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot,
                                             c10::DispatchKey::Functionalize});
  if (!t.requires_grad() && t.layout() == c10::kStrided && !impl.key_set().has_any(wrappers) &&
      !impl.has_symbolic_sizes_strides() && impl.unsafe_storage()) {
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
  // the device's flash kernel).  On CUDA memory flagos answers memory-efficient
  // attention instead, which the composite hands to the device's own kernel.
  if (runtime::kernel_device_type() == c10::kCUDA && choice == static_cast<int64_t>(at::SDPBackend::flash_attention)) {
    return static_cast<int64_t>(at::SDPBackend::efficient_attention);
  }
#endif
  return choice;
}

}  // namespace

}  // namespace torch_fl::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_fl::aten::fused_sdp_choice)
}  // namespace at::native
