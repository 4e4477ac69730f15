"""Recurrent layers on flagos against the CPU: nn.LSTM, nn.GRU and their cells, outputs and every gradient.

PyTorch runs LSTM and GRU cells through a fused kernel on every device but the CPU; on the host platform
flagos has its own (csrc/aten/kernels/HostRnnCells.cpp), which these tests hold to the CPU's unfused cells."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import torch_fl  # noqa: F401


def _grads(module: nn.Module, tensors: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """The gradients of the module's parameters, then of ``tensors``, on the CPU."""
    return [None if p.grad is None else p.grad.cpu() for p in [*module.parameters(), *tensors]]


def _run(module: nn.Module, device: str, inputs: list[torch.Tensor],
         loss_of: Callable[..., list[torch.Tensor]]) -> tuple[list, list]:
    torch.manual_seed(0)
    moved = module.to(device)
    leaves = [t.detach().to(device).requires_grad_() for t in inputs]
    outputs = loss_of(moved, *leaves)
    sum((o.float() * torch.linspace(0.5, 1.5, o.numel(), device=device).reshape(o.shape)).sum()
        for o in outputs).backward()
    return [o.detach().cpu() for o in outputs], _grads(moved, leaves)


def _assert_same(actual: tuple[list, list], expected: tuple[list, list]) -> None:
    for k, (a, e) in enumerate(zip(actual[0], expected[0], strict=True)):
        torch.testing.assert_close(a, e, msg=lambda m, k=k: f"output {k}: {m}")
    for k, (a, e) in enumerate(zip(actual[1], expected[1], strict=True)):
        assert (a is None) == (e is None), f"gradient {k}"
        if e is not None:
            torch.testing.assert_close(a, e, msg=lambda m, k=k: f"gradient {k}: {m}")


def _compare(make: Callable[[], nn.Module], inputs: list[torch.Tensor],
             loss_of: Callable[..., list[torch.Tensor]]) -> None:
    torch.manual_seed(1)
    cpu_module = make()
    flagos_module = make()
    flagos_module.load_state_dict(cpu_module.state_dict())
    _assert_same(_run(flagos_module, "flagos", inputs, loss_of), _run(cpu_module, "cpu", inputs, loss_of))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize(("batch_first", "bias"), [(False, True), (True, False)])
def test_stacked_bidirectional_layer_with_initial_state(kind: str, batch_first: bool, bias: bool) -> None:
    layers, hidden = 2, 5
    torch.manual_seed(2)
    x = torch.randn(3, 7, 4) if batch_first else torch.randn(7, 3, 4)
    h0 = torch.randn(2 * layers, 3, hidden)
    c0 = torch.randn(2 * layers, 3, hidden)

    def make() -> nn.Module:
        return getattr(nn, kind)(4, hidden, num_layers=layers, bidirectional=True, batch_first=batch_first, bias=bias)

    if kind == "LSTM":
        _compare(make, [x, h0, c0], lambda m, x, h, c: [m(x, (h, c))[0], *m(x, (h, c))[1]])
    else:
        _compare(make, [x, h0], lambda m, x, h: list(m(x, h)))


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN:UserWarning")  # the CPU's
def test_lstm_with_projections() -> None:
    x = torch.randn(6, 2, 4)
    _compare(lambda: nn.LSTM(4, 6, num_layers=2, proj_size=3), [x], lambda m, x: [m(x)[0], *m(x)[1]])


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_packed_sequences_of_different_lengths(kind: str) -> None:
    x = torch.randn(4, 6, 3)
    lengths = torch.tensor([6, 5, 3, 1])

    def loss_of(m: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        out, _ = m(packed)
        return [nn.utils.rnn.pad_packed_sequence(out, batch_first=True)[0]]

    _compare(lambda: getattr(nn, kind)(3, 4, batch_first=True), [x], loss_of)


@pytest.mark.parametrize("loss_on", ["h", "c", "both"])
def test_lstm_cell_gradients_through_either_state(loss_on: str) -> None:
    # A loss on h alone or on c alone leaves the other state's gradient undefined in the fused backward.
    x, h, c = torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 5)

    def loss_of(m: nn.Module, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> list[torch.Tensor]:
        hy, cy = m(x, (h, c))
        return {"h": [hy], "c": [cy], "both": [hy, cy]}[loss_on]

    _compare(lambda: nn.LSTMCell(4, 5), [x, h, c], loss_of)


@pytest.mark.parametrize("bias", [True, False])
def test_gru_cell(bias: bool) -> None:
    x, h = torch.randn(3, 4), torch.randn(3, 5)
    _compare(lambda: nn.GRUCell(4, 5, bias=bias), [x, h], lambda m, x, h: [m(x, h)])
    _compare(lambda: nn.GRUCell(4, 5, bias=bias), [x], lambda m, x: [m(x)])  # no state: zeros


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_second_order_gradients_of_a_cell(kind: str) -> None:
    # create_graph: autograd differentiates the cell's backward itself (gradient penalties).
    def grad_norm(device: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
        torch.manual_seed(3)
        cell = getattr(nn, kind)(4, 5).to(device)
        x = torch.randn(3, 4).to(device).requires_grad_()
        out = cell(x)
        h = out[0] if isinstance(out, tuple) else out
        (gx,) = torch.autograd.grad(h.square().sum(), x, create_graph=True)
        gx.square().sum().backward()
        return gx.detach().cpu(), [p.grad.cpu() for p in cell.parameters()]

    (gx, grads), (gx_cpu, grads_cpu) = grad_norm("flagos"), grad_norm("cpu")
    torch.testing.assert_close(gx, gx_cpu)
    for a, e in zip(grads, grads_cpu, strict=True):
        torch.testing.assert_close(a, e)


def test_bfloat16_layer_computes_its_gates_in_float32() -> None:
    # As CUDA's fused cells: half types are widened inside the cell, so the result is at least as close to
    # the float32 computation as the CPU's bfloat16 one.
    x = torch.randn(5, 2, 4)
    torch.manual_seed(4)
    lstm = nn.LSTM(4, 6)
    exact = lstm(x)[0]
    ours = lstm.to("flagos", torch.bfloat16)(x.to("flagos", torch.bfloat16))[0]
    cpu = lstm.cpu()(x.to(torch.bfloat16))[0]
    assert ours.dtype == torch.bfloat16
    assert (ours.cpu().float() - exact).abs().max() <= (cpu.float() - exact).abs().max() + 1e-2


def test_autocast_runs_the_cell_in_the_autocast_dtype() -> None:
    lstm = nn.LSTM(4, 6).to("flagos")
    with torch.autocast("flagos", dtype=torch.bfloat16):
        out, (h, c) = lstm(torch.randn(5, 2, 4, device="flagos"))
    assert out.dtype == torch.bfloat16 and out.device.type == "flagos"


def test_mismatched_gate_sizes_are_one_line_errors() -> None:
    gates = torch.randn(2, 8, device="flagos")
    with pytest.raises(RuntimeError, match=r"_thnn_fused_lstm_cell: the state must be 2 x 2"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.randn(2, 3, device="flagos"))
    with pytest.raises(RuntimeError, match=r"_thnn_fused_gru_cell: input_gates and hidden_gates must be"):
        torch.ops.aten._thnn_fused_gru_cell(gates, gates[:, :6], torch.randn(2, 2, device="flagos"))
