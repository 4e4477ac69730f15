// Operators PyTorch reaches on unknown backends only through "*_overrideable"
// entry points, whose default kernels throw instead of falling back: flagos
// answers them with the kernel device's (CPU or CUDA) implementation of the
// operator they stand for.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace torch_fl::aten {

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups);

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask);

}  // namespace torch_fl::aten
