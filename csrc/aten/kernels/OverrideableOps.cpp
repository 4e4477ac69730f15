#include "aten/kernels/OverrideableOps.h"

#include <ATen/ATen.h>

#include "aten/views/KernelView.h"
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

}  // namespace torch_fl::aten
