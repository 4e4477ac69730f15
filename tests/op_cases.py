"""Operator cases shared by the host suite (tests/torch_fl/test_ops.py) and the
GPU suite (tests/gpu): each builds CPU inputs and a function to run on any device."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

F32, F16, BF16, I64, BOOL = torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool
FLOATS = (F32, F16, BF16)


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., object]
    inputs: Callable[[torch.dtype, torch.Generator], Sequence[torch.Tensor]]
    dtypes: tuple[torch.dtype, ...] = (F32,)
    grad: bool = True
    tol: dict[str, float] = field(default_factory=dict)


def rand(*shape: int) -> Callable[[torch.dtype, torch.Generator], list[torch.Tensor]]:
    def make(dtype: torch.dtype, g: torch.Generator) -> list[torch.Tensor]:
        if dtype == BOOL:
            return [torch.rand(*shape, generator=g) > 0.5]
        if dtype == I64:
            return [torch.randint(-5, 6, shape, generator=g)]
        return [torch.randn(*shape, generator=g).to(dtype)]

    return make


def many(*makers: Callable[[torch.dtype, torch.Generator], list[torch.Tensor]]):
    def make(dtype: torch.dtype, g: torch.Generator) -> list[torch.Tensor]:
        return [t for m in makers for t in m(dtype, g)]

    return make


def fixed(*tensors: Callable[[torch.Generator], torch.Tensor]):
    """Inputs that don't follow the case dtype (indices, masks)."""

    def make(dtype: torch.dtype, g: torch.Generator) -> list[torch.Tensor]:
        return [t(g) for t in tensors]

    return make


def idx(high: int, *shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randint(0, high, shape, generator=g)


def in_inference_mode(fn: Callable[..., object]) -> Callable[..., object]:
    """`fn` run under torch.inference_mode (as serving runs it): its results are inference tensors."""

    def run(*args: torch.Tensor) -> object:
        with torch.inference_mode():
            return fn(*args)

    return run


def attention_with_masks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """No mask, a boolean mask (every query keeps the first key: a row with no key would be NaN), an additive mask."""
    keep = m > 0
    keep[..., 0] = True
    return (F.scaled_dot_product_attention(q, k, v) + F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            + F.scaled_dot_product_attention(q, k, v, attn_mask=m))


CASES = [
    # elementwise
    Case("add", lambda a, b: a + b, many(rand(4, 5), rand(4, 5)), (F32, F16, BF16, I64)),
    Case("sub_broadcast", lambda a, b: a - b, many(rand(4, 5), rand(5)), (F32, I64)),
    Case("mul_scalar", lambda a: a * 3, rand(7), (F32, F16, BF16, I64)),
    Case("div", lambda a, b: a / (b.abs() + 1), many(rand(4, 5), rand(4, 5)), FLOATS),
    Case("unary_chain", lambda a: torch.tanh(a).exp().neg().abs().sqrt(), rand(3, 8), FLOATS),
    Case("activations", lambda a: F.gelu(a) + F.silu(a) + torch.sigmoid(a) + F.relu(a), rand(6, 6), FLOATS),
    Case("clamp_pow", lambda a: a.clamp(-1, 1).pow(2), rand(10), (F32, BF16)),
    Case("rsqrt_reciprocal_clamp_min", lambda a: (a.abs() + 1).rsqrt() + (a.abs() + 1).reciprocal() + a.clamp_min(0.1),
         rand(4, 6), FLOATS),
    Case("in_place_chain", lambda a, b: a.clone().mul_(b).add_(b, alpha=2).sub_(b).div_(b.abs() + 1)
         + a.clone().fill_(2.0) * b + a.clone().zero_(), many(rand(3, 5), rand(3, 5))),
    Case("where_maximum", lambda a, b: torch.where(a > b, a, torch.maximum(a, b * 2)), many(rand(5), rand(5))),
    Case("compare_int", lambda a, b: (a == b) | (a < b), many(rand(8), rand(8)), (I64, F32), grad=False),
    Case("logical_bool", lambda a, b: (a & ~b) ^ a.logical_or(b), many(rand(9), rand(9)), (BOOL,), grad=False),
    # reductions
    Case("sum_mean", lambda a: a.sum() + a.mean(dim=1).sum(), rand(6, 7), FLOATS),
    Case("sum_int", lambda a: (a.sum(), a.sum(dim=0)), rand(4, 3), (I64,), grad=False),
    Case("any_all", lambda a: (a.any(), a.all(dim=0), a.sum()), rand(4, 3), (BOOL,), grad=False),
    Case("amax_argmax", lambda a: (a.amax(dim=1), a.argmax(dim=0)), rand(5, 4), (F32, I64), grad=False),
    Case("var_norm_prod", lambda a: a.var(dim=0) + a.norm() + a.prod(dim=1).sum(), rand(4, 4)),
    Case("cumsum", lambda a: a.cumsum(dim=1), rand(3, 6), (F32, I64)),
    Case("logsumexp", lambda a: torch.logsumexp(a, dim=-1), rand(3, 9)),
    # linear algebra
    Case("mm", torch.mm, many(rand(8, 5), rand(5, 3)), FLOATS, tol={"atol": 2e-2, "rtol": 2e-2}),
    Case("bmm", torch.bmm, many(rand(2, 4, 6), rand(2, 6, 3)), FLOATS, tol={"atol": 2e-2, "rtol": 2e-2}),
    Case("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0),
         many(rand(2, 4, 3), rand(2, 4, 6), rand(2, 6, 3)), FLOATS, tol={"atol": 5e-2, "rtol": 5e-2}),
    Case("matmul_broadcast", torch.matmul, many(rand(3, 2, 4, 5), rand(5, 2))),
    Case("addmm_linear", lambda b, a, w: torch.addmm(b, a, w) + F.linear(a, w.t()), many(rand(3), rand(4, 6), rand(6, 3))),
    # convolution, normalisation, pooling
    Case("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=1), many(rand(2, 3, 8, 8), rand(4, 3, 3, 3), rand(4)),
         (F32, BF16), tol={"atol": 5e-2, "rtol": 5e-2}),
    Case("pool_norm", lambda x: F.max_pool2d(F.layer_norm(x, x.shape[-2:]), 2) + F.avg_pool2d(x, 2), rand(2, 3, 6, 6)),
    Case("batch_norm", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), many(rand(4, 3, 5), rand(3), rand(3))),
    Case("dropout_zero", lambda x: F.dropout(x, p=0.0, training=True), rand(5, 5)),
    # softmax and losses
    Case("softmax", lambda a: F.softmax(a, dim=-1), rand(4, 10), FLOATS),
    Case("log_softmax", lambda a: F.log_softmax(a, dim=0), rand(6, 3), FLOATS),
    Case("cross_entropy", lambda a, t: F.cross_entropy(a, t), many(rand(6, 5), fixed(idx(5, 6)))),
    Case("mse_l1", lambda a, b: F.mse_loss(a, b) + F.l1_loss(a, b), many(rand(7), rand(7))),
    # attention: its kernel is chosen on kernel views of the operands (csrc/aten/kernels/DispatchStubs.cpp), cached
    # ones where no operand needs a gradient
    Case("sdpa_masks", attention_with_masks, many(rand(2, 4, 5, 16), rand(2, 4, 5, 16), rand(2, 4, 5, 16), rand(5, 5))),
    Case("sdpa_causal_transposed", lambda q, k, v: F.scaled_dot_product_attention(q.transpose(1, 2), k, v, is_causal=True),
         many(rand(2, 6, 4, 16), rand(2, 4, 6, 16), rand(2, 4, 6, 16)), (F32, BF16), tol={"atol": 2e-2, "rtol": 2e-2}),
    Case("sdpa_inference_mode", in_inference_mode(attention_with_masks),
         many(rand(1, 4, 1, 16), rand(1, 4, 7, 16), rand(1, 4, 7, 16), rand(1, 7)), grad=False),
    # embedding and indexing
    Case("embedding", lambda w, i: F.embedding(i, w), many(rand(10, 4), fixed(idx(10, 3, 5)))),
    Case("index_select_gather", lambda a, i, j: a.index_select(0, i).sum() + a.gather(1, j).sum(),
         many(rand(6, 5), fixed(idx(6, 4), idx(5, 6, 3)))),
    Case("scatter_add", lambda a, i, s: a.scatter_add(1, i, s), many(rand(3, 6), fixed(idx(6, 3, 4)), rand(3, 4))),
    Case("scatter", lambda a, i: a.scatter(0, i, 7.0), many(rand(4, 3), fixed(idx(4, 2, 3))), grad=False),
    Case("advanced_index", lambda a, i: a[i] + a[:, i[:2]].sum(), many(rand(6, 6), fixed(idx(6, 5)))),
    Case("bool_mask", lambda a: a[a > 0].sum() + a.masked_fill(a < 0, 0.5).sum(), rand(5, 5), (F32, I64)),
    Case("index_put", lambda a, i, v: a.index_put((i,), v, accumulate=True), many(rand(6), fixed(idx(6, 4)), rand(4))),
    # joining and splitting
    Case("cat_stack", lambda a, b: torch.cat([a, b], 0).sum(0) + torch.stack([a, b]).prod(0).sum(0),
         many(rand(3, 4), rand(3, 4)), (F32, BF16, I64)),
    Case("split_chunk", lambda a: [t * (i + 1) for i, t in enumerate(a.split(2) + a.chunk(3, dim=1))], rand(5, 6)),
    # views and non-contiguous inputs
    Case("transpose_matmul", lambda a, b: a.t() @ b[:, ::2], many(rand(5, 4), rand(5, 6))),
    Case("permute_reshape", lambda a: a.permute(2, 0, 1).reshape(4, -1).contiguous() * 2, rand(2, 3, 4)),
    Case("narrow_expand", lambda a, b: a.narrow(1, 1, 3) + b.expand(4, 3), many(rand(4, 5), rand(1, 3))),
    Case("select_slice", lambda a: (a[1], a[:, 1:4], a[2, ::2]), rand(5, 5)),
    Case("unfold_diagonal", lambda a: a.unfold(0, 2, 1).sum() + a.diagonal().sum(), rand(5, 5)),
    Case("as_strided", lambda a: a.as_strided((3, 3), (1, 3), 1) * 2, rand(16)),
    Case("noncontig_elementwise", lambda a: (a[::2, 1::2] * a[1::2, ::2]).exp(), rand(6, 6), (F32, BF16)),
]

# The cases whose gradients are compared (float32, differentiable).
BACKWARD_CASES = [c for c in CASES if c.grad and F32 in c.dtypes]


def flat(values: object) -> list[torch.Tensor]:
    if isinstance(values, torch.Tensor):
        return [values]
    if isinstance(values, (list, tuple)):
        return [t for v in values for t in flat(v)]
    return []


def dtype_params() -> list[object]:
    """pytest parameters (case, dtype) for every case and each of its dtypes."""
    import pytest

    return [pytest.param(c, d, id=f"{c.name}-{str(d).removeprefix('torch.')}") for c in CASES for d in c.dtypes]
