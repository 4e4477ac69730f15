"""Operators on flagos against the same operators on CPU, forward and backward.

Every case (tests/op_cases.py) builds CPU inputs, runs the function on CPU and
on copies of the inputs on flagos:0, and compares.  Float cases also compare the
gradients of a weighted sum of the outputs with respect to every floating input.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from op_cases import BACKWARD_CASES, F32, Case, dtype_params
from op_cases import flat as _flat

@pytest.mark.parametrize(("case", "dtype"), dtype_params())
def test_forward_matches_cpu(case: Case, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    inputs = list(case.inputs(dtype, g))
    expected = _flat(case.fn(*inputs))
    actual = _flat(case.fn(*[t.to("flagos") for t in inputs]))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.device.type == "flagos"
        assert a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e, **case.tol)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in BACKWARD_CASES])
def test_backward_matches_cpu(case: Case) -> None:
    g = torch.Generator().manual_seed(1)
    inputs = list(case.inputs(F32, g))

    def grads(device: str) -> list[torch.Tensor | None]:
        leaves = [t.detach().to(device, copy=True).requires_grad_(t.is_floating_point()) for t in inputs]
        outs = [o for o in _flat(case.fn(*leaves)) if o.requires_grad]
        weights = torch.Generator().manual_seed(2)
        total = sum((o * torch.rand(o.shape, generator=weights).to(device)).sum() for o in outs)
        total.backward()
        return [leaf.grad for leaf in leaves]

    expected = grads("cpu")
    actual = grads("flagos")
    for a, e in zip(actual, expected):
        if e is None:
            assert a is None
            continue
        assert a is not None and a.device.type == "flagos"
        torch.testing.assert_close(a.cpu(), e, **case.tol)


def test_in_place_ops_write_device_memory() -> None:
    base = torch.arange(12.0).reshape(3, 4)
    d = base.to("flagos")
    ptr = d.data_ptr()
    d.add_(1).mul_(2).clamp_(max=15)
    d[:, 1].zero_()
    d.index_add_(0, torch.tensor([0, 2], device="flagos"), torch.ones(2, 4, device="flagos"))
    ref = base.clone()
    ref.add_(1).mul_(2).clamp_(max=15)
    ref[:, 1].zero_()
    ref.index_add_(0, torch.tensor([0, 2]), torch.ones(2, 4))
    assert d.data_ptr() == ptr
    torch.testing.assert_close(d.cpu(), ref)


def test_out_variants_including_resize() -> None:
    a, b = torch.randn(4, 3), torch.randn(3, 5)
    out = torch.empty(0, device="flagos")  # wrong size: the kernel must resize it on the device
    result = torch.mm(a.to("flagos"), b.to("flagos"), out=out)
    assert result is out and out.shape == (4, 5) and out.device.type == "flagos"
    torch.testing.assert_close(out.cpu(), a @ b)
    same = torch.empty(4, 3, device="flagos")
    torch.add(a.to("flagos"), 1, out=same)
    torch.testing.assert_close(same.cpu(), a + 1)
    s = torch.empty((), device="flagos")
    torch.sum(a.to("flagos"), dim=(0, 1), out=s)
    torch.testing.assert_close(s.cpu(), a.sum())


def test_resize_to_the_same_sizes_keeps_the_strides() -> None:
    # PyTorch's composite out= forms resize their `out` before copying into it: a window of a larger
    # tensor must stay a window, or the copy writes over the tensor around it.
    base = torch.full((4, 6), 7.0, device="flagos")
    window = base[:, ::2]
    assert window.resize_(4, 3) is window and window.stride() == (6, 2)
    x = torch.randn(4, 3)
    torch.softmax(x.to("flagos"), 1, out=window)
    expected = torch.full((4, 6), 7.0)
    expected[:, ::2] = torch.softmax(x, 1)
    torch.testing.assert_close(base.cpu(), expected)
    assert window.resize_(2, 2).is_contiguous()  # new sizes: contiguous, as on the CPU
    # A memory format restrides even at the same sizes, as on the CPU.
    same_sizes = (2, 3, 4, 5)
    restrided = torch.empty(same_sizes, device="flagos").resize_(same_sizes, memory_format=torch.channels_last)
    assert restrided.stride() == torch.empty(same_sizes).resize_(same_sizes, memory_format=torch.channels_last).stride()
    with pytest.raises(RuntimeError, match="Unsupported memory format"):
        window.resize_(2, 2, memory_format=torch.preserve_format)


_OVERLAPS = {
    "in-place, partial": lambda x: x[1:].add_(x[:-1]),
    "out=, partial": lambda x: torch.add(x[:-1], 1, out=x[1:]),
    "out=, the input itself": lambda x: torch.mul(x[:3], x[:3], out=x[:3]),
    "in-place, disjoint halves": lambda x: x[:3].add_(x[3:]),
    "copy_, partial": lambda x: x[1:].copy_(x[:-1]),
    "copy_, interleaved": lambda x: x[::2].copy_(x[1::2]),
    "copy_ into an expanded tensor": lambda x: x[:2].expand(3, 2).copy_(torch.ones(3, 2, device=x.device)),
    "in-place on an expanded tensor": lambda x: x[:2].expand(3, 2).add_(1),
}


@pytest.mark.parametrize("case", _OVERLAPS)
def test_memory_overlap_is_refused_or_computed_as_on_the_cpu(case: str) -> None:
    # PyTorch refuses writes whose inputs partly overlap the written tensor (a silent order-dependent
    # result otherwise); flagos's kernel views must let its checks see the aliasing.
    def outcome(device: str) -> str | list[float]:
        x = torch.arange(6.0, device=device)
        try:
            _OVERLAPS[case](x)
        except RuntimeError as e:
            return str(e).splitlines()[0]
        return x.cpu().tolist()

    assert outcome("flagos") == outcome("cpu")


@pytest.fixture
def deterministic() -> Iterator[None]:
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


def test_deterministic_mode_fills_new_memory_as_the_cpu_does(deterministic: None) -> None:
    # NaN for floating types, the largest value for integers: reading memory nothing wrote shows.
    for make in (lambda d, t: torch.empty(5, dtype=t, device=d),
                 lambda d, t: torch.empty_strided((2, 3), (1, 2), dtype=t, device=d),
                 lambda d, t: torch.empty_like(torch.ones(4, dtype=t, device=d))):
        for dtype in (torch.float32, torch.int64):
            torch.testing.assert_close(make("flagos", dtype).cpu(), make("cpu", dtype), equal_nan=True)
    grown, grown_cpu = torch.ones(2, device="flagos"), torch.ones(2)
    grown.resize_(6)
    grown_cpu.resize_(6)
    torch.testing.assert_close(grown.cpu(), grown_cpu, equal_nan=True)  # the two old values kept, the new NaN


def test_matrix_product_out_variants_write_the_given_tensor() -> None:
    # The out= forms inductor's generated code calls, into a transposed (non-contiguous) and a resized out.
    bias, a, b = torch.randn(5), torch.randn(4, 3), torch.randn(3, 5)
    out_t = torch.empty(5, 4, device="flagos").t()
    assert torch.addmm(bias.to("flagos"), a.to("flagos"), b.to("flagos"), beta=0.5, out=out_t) is out_t
    assert not out_t.is_contiguous()
    torch.testing.assert_close(out_t.cpu(), torch.addmm(bias, a, b, beta=0.5))
    x, y = torch.randn(2, 4, 3), torch.randn(2, 3, 5)
    out_b = torch.empty(0, device="flagos")
    assert torch.bmm(x.to("flagos"), y.to("flagos"), out=out_b) is out_b and out_b.shape == (2, 4, 5)
    torch.testing.assert_close(out_b.cpu(), torch.bmm(x, y))
    acc = torch.randn(2, 4, 5)
    out_acc = torch.empty(2, 4, 5, device="flagos")
    torch.baddbmm(acc.to("flagos"), x.to("flagos"), y.to("flagos"), alpha=2.0, out=out_acc)
    torch.testing.assert_close(out_acc.cpu(), torch.baddbmm(acc, x, y, alpha=2.0))


def test_views_share_device_memory() -> None:
    d = torch.zeros(4, 4, device="flagos")
    v = d.t()[1:3]
    v.fill_(5)
    real = torch.view_as_real(torch.zeros(3, dtype=torch.complex64, device="flagos"))
    real[:, 0] = 1
    assert v.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    expected = torch.zeros(4, 4)
    expected.t()[1:3] = 5
    torch.testing.assert_close(d.cpu(), expected)
    assert real.device.type == "flagos" and real.sum().item() == 3.0


@pytest.mark.parametrize("masked", [False, True], ids=["causal", "additive_mask"])
def test_overrideable_fused_attention_matches_attention_on_the_cpu(masked: bool) -> None:
    # The kernel scaled_dot_product_attention's "overrideable" choice reaches; on the host platform it runs the
    # CPU's flash kernel.
    g = torch.Generator().manual_seed(0)
    qkv = [torch.randn(2, 4, 9, 16, generator=g) for _ in range(3)]
    mask = torch.randn(9, 9, generator=g) if masked else None
    cpu = [t.clone().requires_grad_() for t in qkv]
    expected = torch.nn.functional.scaled_dot_product_attention(*cpu, attn_mask=mask, is_causal=not masked)
    expected.square().sum().backward()
    flagos = [t.to("flagos").requires_grad_() for t in qkv]
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        *flagos, None if mask is None else mask.to("flagos"), 0.0, not masked)[0]
    out.square().sum().backward()
    assert out.device.type == "flagos"
    torch.testing.assert_close(out.detach().cpu(), expected.detach())
    for a, e in zip(flagos, cpu):
        assert a.grad is not None and e.grad is not None
        torch.testing.assert_close(a.grad.cpu(), e.grad)


def test_overrideable_fused_attention_refuses_a_mask_that_needs_a_gradient() -> None:
    # Its kernels do not differentiate the mask: a gradient left undefined would read as zero.
    q, k, v = (torch.randn(1, 2, 5, 8, device="flagos", requires_grad=True) for _ in range(3))
    mask = torch.randn(5, 5, device="flagos", requires_grad=True)
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, mask)[0]
    with pytest.raises(NotImplementedError, match="no gradient for attn_bias"):
        out.sum().backward()
