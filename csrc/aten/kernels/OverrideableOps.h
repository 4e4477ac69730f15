// Operators PyTorch reaches on unknown backends only through "*_overrideable"
// entry points, whose default kernels throw instead of falling back: flagos
// answers them with the kernel device's (CPU or CUDA) implementation of the
// operator they stand for.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <optional>
#include <tuple>

#include <c10/core/SymInt.h>

namespace torch_fl::aten {

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups);

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask);

// scaled_dot_product_attention's "overrideable" fused kernel, which the composite hands to the device's own
// kernel on any device (it sends a flash-attention choice on any device but CUDA to the CPU's flash kernel).
// flagos runs the kernel device's flash attention: CUDA's on the cuda platform (the outputs, their order and
// the backward's arguments are the same), the CPU's on the host platform.
using FusedAttentionResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt,
                                        at::Tensor, at::Tensor, at::Tensor>;

FusedAttentionResult fused_attention_overrideable(const at::Tensor& query, const at::Tensor& key,
                                                  const at::Tensor& value, const std::optional<at::Tensor>& attn_bias,
                                                  double dropout_p, bool is_causal, bool return_debug_mask,
                                                  std::optional<double> scale);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_overrideable_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k, c10::SymInt max_q,
    c10::SymInt max_k, double dropout_p, bool is_causal, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, std::optional<double> scale);

}  // namespace torch_fl::aten
