#include "aten/OverrideableOps.h"

#include <ATen/ATen.h>

#include "aten/HostView.h"
#include "runtime/DeviceRuntime.h"

namespace torch_fl::aten {

namespace {

// The CPU operand for a flagos tensor: a zero-copy view where device memory is
// host-addressable, else a copy.
at::Tensor on_cpu(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone()) return t;
  return runtime::device_memory_is_host_addressable() ? host_view(t) : t.to(c10::kCPU);
}

at::Tensor back(const at::Tensor& t, c10::Device device) { return t.defined() ? to_device(t, device) : t; }

}  // namespace

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  std::optional<at::Tensor> cpu_bias;
  if (bias.has_value()) cpu_bias = on_cpu(*bias);
  auto out = at::convolution_symint(on_cpu(input), on_cpu(weight), cpu_bias, stride, padding, dilation, transposed,
                                    output_padding, std::move(groups));
  return back(out, input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  // The bias gradient has one entry per output channel.
  std::optional<c10::SymIntArrayRef> bias_sizes;
  std::vector<c10::SymInt> bias_size;
  if (output_mask[2]) {
    bias_size.push_back(transposed ? weight.sym_size(1) * groups : weight.sym_size(0));
    bias_sizes = c10::SymIntArrayRef(bias_size);
  }
  auto [gi, gw, gb] = at::convolution_backward_symint(on_cpu(grad_output), on_cpu(input), on_cpu(weight), bias_sizes,
                                                      stride, padding, dilation, transposed, output_padding,
                                                      std::move(groups), output_mask);
  const auto device = input.device();
  return {back(gi, device), back(gw, device), back(gb, device)};
}

}  // namespace torch_fl::aten
