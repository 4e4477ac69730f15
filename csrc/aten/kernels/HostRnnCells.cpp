// Fused LSTM and GRU cells on the host platform.
//
// PyTorch's LSTM and GRU cells -- and so nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell -- call a fused
// kernel on every device but the CPU (RNN.cpp: input.is_cuda() || input.is_xpu() ||
// input.is_privateuseone()), and only CUDA has one.  On the host platform, whose kernel device is the
// CPU, they failed with "Could not run 'aten::_thnn_fused_lstm_cell' with arguments from the 'CPU'
// backend".  These kernels compute what CUDA's do (RNN.cu), from flagos operators: the gates in
// float32 for half types, and a workspace of the activated gates that only their backward reads.
// The cuda platform reaches CUDA's own kernels and does not build this file.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

namespace torch_fl::aten {

namespace {

bool given(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

void check_cell(const char* op, const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                const at::Tensor& state, int64_t gates_per_state) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(), op,
              ": input_gates and hidden_gates must be matrices of one size, got ", input_gates.sizes(), " and ",
              hidden_gates.sizes());
  TORCH_CHECK(state.dim() == 2 && state.size(0) == input_gates.size(0) &&
                  state.size(1) * gates_per_state == input_gates.size(1),
              op, ": the state must be ", input_gates.size(0), " x ", input_gates.size(1) / gates_per_state,
              " for gates of ", input_gates.sizes(), ", got ", state.sizes());
}

at::Tensor one_minus(const at::Tensor& t) { return at::rsub(t, 1); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, 4);
  const auto dtype = input_gates.scalar_type();
  const auto acc = at::toOpMathType(dtype);
  auto gates = input_gates.to(acc) + hidden_gates.to(acc);
  if (given(input_bias)) gates = gates + input_bias->to(acc);
  if (given(hidden_bias)) gates = gates + hidden_bias->to(acc);
  const auto chunks = gates.chunk(4, 1);
  const auto in = chunks[0].sigmoid(), forget = chunks[1].sigmoid(), cell = chunks[2].tanh(),
             out = chunks[3].sigmoid();
  const auto cy = forget * cx.to(acc) + in * cell;
  const auto hy = out * cy.tanh();
  return {hy.to(dtype), cy.to(dtype), at::cat({in, forget, cell, out}, 1).to(dtype)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                        const std::optional<at::Tensor>& grad_cy,
                                                                        const at::Tensor& cx, const at::Tensor& cy,
                                                                        const at::Tensor& workspace, bool has_bias) {
  if (!given(grad_hy) && !given(grad_cy)) return {};
  const auto dtype = workspace.scalar_type();
  const auto acc = at::toOpMathType(dtype);
  const auto chunks = workspace.to(acc).chunk(4, 1);
  const auto &in = chunks[0], &forget = chunks[1], &cell = chunks[2], &out = chunks[3];
  const auto tanh_cy = cy.to(acc).tanh();
  const auto ghy = given(grad_hy) ? grad_hy->to(acc) : at::zeros_like(tanh_cy);
  auto gcy = ghy * out * one_minus(tanh_cy * tanh_cy);
  if (given(grad_cy)) gcy = gcy + grad_cy->to(acc);
  const auto grad_gates = at::cat({gcy * cell * in * one_minus(in), gcy * cx.to(acc) * forget * one_minus(forget),
                                   gcy * in * one_minus(cell * cell), ghy * tanh_cy * out * one_minus(out)},
                                  1);
  return {grad_gates.to(dtype), (gcy * forget).to(dtype), has_bias ? grad_gates.sum(0).to(dtype) : at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, 3);
  const auto dtype = input_gates.scalar_type();
  const auto acc = at::toOpMathType(dtype);
  auto ig = input_gates.to(acc);
  auto hg = hidden_gates.to(acc);
  if (given(input_bias)) ig = ig + input_bias->to(acc);
  if (given(hidden_bias)) hg = hg + hidden_bias->to(acc);
  const auto i = ig.chunk(3, 1), h = hg.chunk(3, 1);
  const auto reset = (i[0] + h[0]).sigmoid(), update = (i[1] + h[1]).sigmoid();
  const auto fresh = (i[2] + reset * h[2]).tanh();
  const auto h_prev = hx.to(acc);
  const auto hy = fresh + update * (h_prev - fresh);
  return {hy.to(dtype), at::cat({reset, update, fresh, h_prev, h[2]}, 1).to(dtype)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const auto dtype = workspace.scalar_type();
  const auto acc = at::toOpMathType(dtype);
  const auto w = workspace.to(acc).chunk(5, 1);
  const auto &reset = w[0], &update = w[1], &fresh = w[2], &h_prev = w[3], &hidden_new = w[4];
  const auto g = grad_hy.to(acc);
  const auto g_update = g * (h_prev - fresh) * one_minus(update) * update;
  const auto g_fresh = g * one_minus(update) * one_minus(fresh * fresh);
  const auto g_reset = g_fresh * hidden_new * one_minus(reset) * reset;
  const auto grad_input_gates = at::cat({g_reset, g_update, g_fresh}, 1);
  const auto grad_hidden_gates = at::cat({g_reset, g_update, g_fresh * reset}, 1);
  return {grad_input_gates.to(dtype), grad_hidden_gates.to(dtype), (g * update).to(dtype),
          has_bias ? grad_input_gates.sum(0).to(dtype) : at::Tensor(),
          has_bias ? grad_hidden_gates.sum(0).to(dtype) : at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
}

}  // namespace torch_fl::aten
