#include "aten/kernels/OverrideableOps.h"

#include <ATen/ATen.h>

#include "aten/views/KernelView.h"
#include "runtime/DeviceRuntime.h"
#include <ATen/ops/_scaled_dot_product_flash_attention_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_ops.h>
#include <c10/core/DeviceGuard.h>

namespace torch_fl::aten {

namespace {

at::Tensor on_kernel_device(const at::Tensor& t) { return kernel_view_if_flagos(t); }

at::Tensor back(const at::Tensor& t, c10::Device device) { return t.defined() ? from_kernel_result(t, device) : t; }

}  // namespace

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  const c10::DeviceGuard guard(input.device());
  std::optional<at::Tensor> cpu_bias;
  if (bias.has_value()) cpu_bias = on_kernel_device(*bias);
  auto out = at::convolution_symint(on_kernel_device(input), on_kernel_device(weight), cpu_bias, stride, padding, dilation, transposed,
                                    output_padding, std::move(groups));
  return back(out, input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  const c10::DeviceGuard guard(input.device());
  // The bias gradient has one entry per output channel.
  std::optional<c10::SymIntArrayRef> bias_sizes;
  std::vector<c10::SymInt> bias_size;
  if (output_mask[2]) {
    bias_size.push_back(transposed ? weight.sym_size(1) * groups : weight.sym_size(0));
    bias_sizes = c10::SymIntArrayRef(bias_size);
  }
  auto [gi, gw, gb] = at::convolution_backward_symint(on_kernel_device(grad_output), on_kernel_device(input), on_kernel_device(weight), bias_sizes,
                                                      stride, padding, dilation, transposed, output_padding,
                                                      std::move(groups), output_mask);
  const auto device = input.device();
  return {back(gi, device), back(gw, device), back(gb, device)};
}

// The flash kernels are reached through the dispatcher with the flagos tensors, as the composite would call
// them: flagos's own kernels for them make the kernel views and adopt the results.  Called from below autograd
// (the overrideable op's autograd node runs this backward), they record no graph of their own.
FusedAttentionResult fused_attention_overrideable(const at::Tensor& query, const at::Tensor& key,
                                                  const at::Tensor& value, const std::optional<at::Tensor>& attn_bias,
                                                  double dropout_p, bool is_causal, bool return_debug_mask,
                                                  std::optional<double> scale) {
  const bool biased = attn_bias.has_value() && attn_bias->defined();
  if (runtime::kernel_device_type() == c10::kCUDA) {
    TORCH_CHECK(!biased, "flagos: the overrideable fused attention runs CUDA's flash kernel, which takes no "
                "attention mask; call scaled_dot_product_attention, which picks a kernel that takes one");
    return at::_ops::_scaled_dot_product_flash_attention::call(query, key, value, dropout_p, is_causal,
                                                               return_debug_mask, scale);
  }
  TORCH_CHECK(!return_debug_mask, "flagos: the CPU's flash attention returns no debug mask; pass return_debug_mask=False");
  auto [out, logsumexp] = at::_scaled_dot_product_flash_attention_for_cpu(
      query, key, value, dropout_p, is_causal, biased ? attn_bias : std::nullopt, scale);
  return {std::move(out), std::move(logsumexp), at::Tensor(), at::Tensor(), 0, 0, at::Tensor(), at::Tensor(),
          at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_overrideable_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k, c10::SymInt max_q,
    c10::SymInt max_k, double dropout_p, bool is_causal, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, std::optional<double> scale) {
  // Neither flash kernel differentiates the mask: an undefined gradient would read as zero.
  TORCH_CHECK_NOT_IMPLEMENTED(!(grad_input_mask[3] && attn_bias.defined()),
                              "flagos: the overrideable fused attention has no gradient for attn_bias; detach the "
                              "mask, or call scaled_dot_product_attention, which picks a kernel that has one");
  if (runtime::kernel_device_type() == c10::kCUDA) {
    auto [grad_query, grad_key, grad_value] = at::_ops::_scaled_dot_product_flash_attention_backward::call(
        grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, std::move(max_q), std::move(max_k),
        dropout_p, is_causal, philox_seed, philox_offset, scale);
    return {std::move(grad_query), std::move(grad_key), std::move(grad_value), at::Tensor()};
  }
  auto [grad_query, grad_key, grad_value] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
      attn_bias.defined() ? std::optional<at::Tensor>(attn_bias) : std::nullopt, scale);
  return {std::move(grad_query), std::move(grad_key), std::move(grad_value), at::Tensor()};
}

}  // namespace torch_fl::aten
